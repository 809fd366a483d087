/* Minimal test harness: CHECK records a failure and goes on; each test binary ends with
 * TEST_SUMMARY(), which prints "N passed, N failed" and returns the exit status. Fixture paths are
 * resolved relative to the repository root (ctest runs tests there). */
#ifndef DI_TEST_HARNESS_H
#define DI_TEST_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_test_pass, g_test_fail;

#define CHECK(cond)                                                                   \
    do {                                                                              \
        if (cond) {                                                                   \
            g_test_pass++;                                                            \
        } else {                                                                      \
            g_test_fail++;                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
        }                                                                             \
    } while (0)

#define CHECKF(cond, ...)                                                             \
    do {                                                                              \
        if (cond) {                                                                   \
            g_test_pass++;                                                            \
        } else {                                                                      \
            g_test_fail++;                                                            \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);  \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

#define TEST_SUMMARY()                                                                \
    (printf("%d passed, %d failed\n", g_test_pass, g_test_fail), g_test_fail ? 1 : 0)

/* A uniform double in [0, 1) from a xorshift64 state (tests' reproducible random data). */
static inline double test_unit(uint64_t *state) {
    *state ^= *state << 13, *state ^= *state >> 7, *state ^= *state << 17;
    return (double)(*state >> 11) / 9007199254740992.0;
}

/* Where the bundled tiny fixture lives inside the repository. */
#define DI_TINY_FIXTURE_DIR "tests/data/v41-tiny"

#endif
