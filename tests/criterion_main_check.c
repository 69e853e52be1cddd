/* A suite for tests/criterion_main.sh: one suite that skips (in its init, as the
 * GPU suite does), one that passes, one that fails. Not a test of its own. */
#include <criterion/criterion.h>

static void no_device(void) { cr_skip_test("no device here (a made-up reason)"); }
TestSuite(skips, .init = no_device);
Test(skips, first) { cr_assert(1); }
Test(skips, second) { cr_assert(1); }

Test(passes, one) { cr_assert(1); }
Test(passes, skipped_inside) { cr_skip_test("a second made-up reason"); }

Test(fails, one) { cr_assert(0, "this failure must not be hidden by the skips"); }
