/* The public ABI as a program built against include/mlajit.h sees it: the
 * version of the library against the header's. (tests/abi_exports.py checks the
 * shared library's exports against the header.) */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "mlajit.h"

Test(version, the_library_reports_the_header_it_was_built_with)
{
    int major = -1, minor = -1, patch = -1;
    const char *s = mlajit_version(&major, &minor, &patch);
    cr_assert_not_null(s);
    cr_expect_eq(major, MLAJIT_VERSION_MAJOR);
    cr_expect_eq(minor, MLAJIT_VERSION_MINOR);
    cr_expect_eq(patch, MLAJIT_VERSION_PATCH);
    cr_expect_str_eq(s, MLAJIT_VERSION_STRING);
    char joined[32];
    snprintf(joined, sizeof joined, "%d.%d.%d", major, minor, patch);
    cr_expect_str_eq(s, joined, "the string is the numbers");
    cr_expect_str_eq(mlajit_version(NULL, NULL, NULL), s, "each number may be NULL");
}
