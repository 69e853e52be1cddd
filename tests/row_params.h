/* Criterion parameters that are the row indices 0..count-1 of a test's table:
 * a test process may not share the runner's addresses, so a parameterized test
 * takes its row by index. `rows` is static storage of `count` entries. */
#ifndef MLAJIT_TESTS_ROW_PARAMS_H
#define MLAJIT_TESTS_ROW_PARAMS_H

#include <criterion/parameterized.h>
#include <stddef.h>

static inline struct criterion_test_params row_indices(size_t *rows, size_t count)
{
    for (size_t i = 0; i < count; i++)
        rows[i] = i;
    return cr_make_param_array(size_t, rows, count);
}

#endif
