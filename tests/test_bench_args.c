/* `deepinfer bench --bench-batch`: the list of decode batch sizes is parsed before the GPU
 * benchmark does any work (a typo must not cost a device run): defaults, lists in any order with
 * repeats, and every malformed form refused with an error naming the flag. The context range
 * (--bench-min-context .. --bench-max-context) and --bench-logprobs likewise. */
#include <stdbool.h>

#include "cli/commands.h"
#include "test_harness.h"

static void expect_list(const char *spec, const int *want, int n_want) {
    int got[DI_BENCH_MAX_BATCH], n = -1;
    di_err err = {0};
    const di_status st = di_bench_parse_batches(spec, got, &n, &err);
    bool same = st == DI_OK && n == n_want;
    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
    CHECKF(same, "'%s': status %d, %d sizes (%s)", spec, (int)st, n, err.msg);
}

static void expect_error(const char *spec) {
    int got[DI_BENCH_MAX_BATCH], n = 0;
    di_err err = {0};
    const di_status st = di_bench_parse_batches(spec, got, &n, &err);
    CHECKF(st == DI_EINVAL && strstr(err.msg, "--bench-batch") && strstr(err.msg, spec),
           "'%s' was not refused with a clear error (%s)", spec, err.msg);
}

int main(void) {
    const int all[] = {1, 8, 32, 64, 128, 256};
    expect_list("", all, 6);
    expect_list("0", all, 6);
    const int one[] = {1}, one_64[] = {1, 64}, odd[] = {3, 17, 200, 256};
    expect_list("1", one, 1);
    expect_list("1,64", one_64, 2);
    expect_list("64,1,64", one_64, 2); /* ascending, without repeats */
    expect_list("256,17,3,200", odd, 4);
    const char *bad[] = {"1,64,", ",1", "1,,8", "x", "1,x", "8 ,1", " 8", "-1", "0,8", "257", "1,300",
                         "99999999999999999999", "1.5", "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) expect_error(bad[i]);
    di_err err = {0};
    CHECK(di_bench_check_contexts(4096, 131072, &err) == DI_OK);
    CHECK(di_bench_check_contexts(131072, 131072, &err) == DI_OK);
    CHECK(di_bench_check_contexts(0, 0, &err) == DI_OK); /* prefill rows only */
    CHECKF(di_bench_check_contexts(131072, 4096, &err) == DI_EINVAL && strstr(err.msg, "--bench-min-context") &&
               strstr(err.msg, "--bench-max-context"),
           "min above max was not refused with a clear error (%s)", err.msg);
    CHECK(di_bench_check_logprobs(0, &err) == DI_OK && di_bench_check_logprobs(20, &err) == DI_OK);
    CHECKF(di_bench_check_logprobs(21, &err) == DI_EINVAL && strstr(err.msg, "--bench-logprobs 21"),
           "--bench-logprobs 21 was not refused with a clear error (%s)", err.msg);
    CHECK(di_bench_check_logprobs(-1, &err) == DI_EINVAL && strstr(err.msg, "--bench-logprobs"));
    return TEST_SUMMARY();
}
