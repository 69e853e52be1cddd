/* The main of every Criterion suite (tests/meson.build links it in place of
 * Criterion's own): the same run, plus what meson cannot see by itself.
 *  - Each skip reason is printed once with its count ("skipped: 30 of 30 tests:
 *    no GPU on this machine ..."), on stdout, so the test log and tools/test.sh's
 *    summary say what was skipped and why.
 *  - A suite whose tests all skipped (none passed, failed or crashed) exits 77,
 *    which meson reports as SKIP instead of OK. A failure or crash still exits 1,
 *    whatever else skipped. */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <stdio.h>
#include <string.h>

#define MAX_REASONS 32

static struct {
    char text[512];
    int count;
} reasons[MAX_REASONS];
static int num_reasons, skips_with_reason;
static struct criterion_global_stats totals;

static void note_skip(const char *message)
{
    const char *text = message && message[0] ? message : "(no reason given)";
    skips_with_reason++;
    for (int i = 0; i < num_reasons; i++)
        if (strncmp(reasons[i].text, text, sizeof reasons[i].text - 1) == 0) {
            reasons[i].count++;
            return;
        }
    if (num_reasons == MAX_REASONS)
        return;
    snprintf(reasons[num_reasons].text, sizeof reasons[num_reasons].text, "%s", text);
    reasons[num_reasons++].count = 1;
}

/* Criterion names a report hook after its source line, and the names are global:
 * these lines keep clear of the hooks a suite defines itself (shared_cache.h). */
#line 9000
ReportHook(POST_TEST)(struct criterion_test_stats *stats)
{
    if (stats->test_status == CR_STATUS_SKIPPED)
        note_skip(stats->message);
}

ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
    totals = *stats;
}

int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    int status = 0;
    if (criterion_handle_args(argc, argv, true)) {
        int all_passed = criterion_run_all_tests(tests);
        for (int i = 0; i < num_reasons; i++)
            printf("skipped: %d of %zu tests: %s\n", reasons[i].count, totals.nb_tests, reasons[i].text);
        size_t explained = (size_t)skips_with_reason, unexplained = 0; /* disabled or filtered out */
        if (totals.tests_skipped > explained)
            unexplained = totals.tests_skipped - explained;
        if (skips_with_reason && unexplained)
            printf("skipped: %zu of %zu tests: disabled or not selected\n", unexplained, totals.nb_tests);
        int ran_none = totals.nb_tests > 0 && totals.tests_skipped == totals.nb_tests && totals.tests_passed == 0;
        if (!all_passed || totals.tests_failed || totals.tests_crashed || totals.errors)
            status = 1;
        else if (ran_none)
            status = 77; /* meson: SKIP */
    }
    criterion_finalize(tests);
    fflush(stdout);
    return status;
}
