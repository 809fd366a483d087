/* Engram constants: numpy default_rng port, multipliers, primes, offsets and the per-position hash.
 *
 * Checked against the values of model-spec §2.2 (released config) and against the tiny fixture's
 * `engram.*` constants (golden.safetensors) and `engram_hash` of prompt 3 (debug.safetensors).
 * With `--numpy-cases FILE` it instead checks the RNG port against cases written by numpy
 * (tests/test_engram_consts_numpy.sh). The fixture's safetensors are read by a small local helper
 * (the project's safetensors reader is a separate module). */
#include "model/engram_consts.h"
#include "model/numpy_pcg64.h"
#include "test_harness.h"

#include <cjson/cJSON.h>
#include <inttypes.h>

/* ---- minimal safetensors reader (integer tensors only) ---- */

/* Reads tensor `name` of dtype I64 or I32 as int64 ([*numel]); returns NULL if absent. */
static int64_t *st_read_int(const char *path, const char *name, int64_t shape[4], int *ndim,
                            size_t *numel) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char lenb[8];
    int64_t *out = NULL;
    if (fread(lenb, 1, 8, f) != 8) goto done;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lenb[i];
    char *hdr = malloc(hlen + 1);
    if (fread(hdr, 1, hlen, f) != hlen) {
        free(hdr);
        goto done;
    }
    hdr[hlen] = 0;
    cJSON *root = cJSON_Parse(hdr);
    free(hdr);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (t && cJSON_IsString(dt) && cJSON_IsArray(sh) && cJSON_GetArraySize(off) == 2) {
        int is64 = strcmp(dt->valuestring, "I64") == 0;
        *ndim = cJSON_GetArraySize(sh);
        *numel = 1;
        for (int i = 0; i < *ndim && i < 4; i++) {
            shape[i] = (int64_t)cJSON_GetArrayItem(sh, i)->valuedouble;
            *numel *= (size_t)shape[i];
        }
        size_t begin = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        size_t esz = is64 ? 8 : 4;
        unsigned char *raw = malloc(*numel * esz + 1);
        out = malloc(*numel * sizeof *out + 1);
        fseek(f, (long)(8 + hlen + begin), SEEK_SET);
        if ((is64 || strcmp(dt->valuestring, "I32") == 0) && fread(raw, esz, *numel, f) == *numel) {
            for (size_t i = 0; i < *numel; i++) {
                uint64_t v = 0;
                for (int b = (int)esz - 1; b >= 0; b--) v = v << 8 | raw[i * esz + (size_t)b];
                out[i] = is64 ? (int64_t)v : (int64_t)(int32_t)(uint32_t)v;
            }
        } else {
            free(out);
            out = NULL;
        }
        free(raw);
    }
    cJSON_Delete(root);
done:
    fclose(f);
    return out;
}

/* ---- numpy RNG ---- */

/* default_rng(seed).integers(low, high, size=n, dtype=np.int64), values printed by numpy 2.4.6 */
static void test_numpy_fixed_cases(void) {
    static const struct {
        uint64_t seed;
        int64_t low, high;
        int n;
        int64_t v[7];
    } cases[] = {
        {10007, 0, 46539438283891, 4, {38316048023122, 2419938046656, 17979836159674, 36993668729195}},
        {140098, 0, 46539438283891, 4, {33858405369630, 25755403400457, 15460673601360, 41309613242795}},
        {10007, 0, 5965958626684848, 4, {4911790207900797, 310215395755901, 2304861480898423, 4742272473109330}},
        {40028, 0, 5965958626684848, 4, {5272528839171849, 322900961933926, 4720871995168226, 1214925795744287}},
        {0, 0, 1000, 7, {850, 636, 511, 269, 307, 40, 75}}, /* 32-bit path, buffered halves */
        {12345678901234, -5, 4294967306, 7, /* two-word seed, 64-bit path, negative low */
         {1745378375, 112543443, 2665494503, 139339525, 592940820, 2779637105, 1970264912}},
        {7, 0, 4294967296, 5, {4058335883, 2684764585, 2938530453, 3853503932, 2483747170}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        di_numpy_pcg64 g;
        di_numpy_pcg64_seed(&g, cases[c].seed);
        int64_t got[7];
        di_numpy_integers_i64(&g, cases[c].low, cases[c].high, (size_t)cases[c].n, got);
        for (int i = 0; i < cases[c].n; i++)
            CHECKF(got[i] == cases[c].v[i], "seed %" PRIu64 " [%d]: %" PRId64 " != %" PRId64,
                   cases[c].seed, i, got[i], cases[c].v[i]);
    }
}

/* Lines "ints SEED LOW HIGH N v..." and "state SEED N w..." (SeedSequence uint32 words). */
static int run_numpy_cases(const char *path) {
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return TEST_SUMMARY();
    char kind[16];
    int n_cases = 0;
    while (fscanf(f, "%15s", kind) == 1) {
        uint64_t seed;
        int n;
        if (strcmp(kind, "ints") == 0) {
            int64_t low, high;
            if (fscanf(f, "%" SCNu64 " %" SCNd64 " %" SCNd64 " %d", &seed, &low, &high, &n) != 4) break;
            int64_t *got = malloc((size_t)n * sizeof *got), want;
            di_numpy_pcg64 g;
            di_numpy_pcg64_seed(&g, seed);
            di_numpy_integers_i64(&g, low, high, (size_t)n, got);
            for (int i = 0; i < n && fscanf(f, "%" SCNd64, &want) == 1; i++)
                CHECKF(got[i] == want, "ints seed %" PRIu64 " range [%" PRId64 ", %" PRId64
                       ") [%d]: %" PRId64 " != %" PRId64, seed, low, high, i, got[i], want);
            free(got);
        } else if (strcmp(kind, "state") == 0) {
            if (fscanf(f, "%" SCNu64 " %d", &seed, &n) != 2) break;
            uint32_t *got = malloc((size_t)n * sizeof *got), want;
            di_numpy_seed_sequence_state(seed, got, (size_t)n);
            for (int i = 0; i < n && fscanf(f, "%" SCNu32, &want) == 1; i++)
                CHECKF(got[i] == want, "state seed %" PRIu64 " [%d]: %u != %u", seed, i, got[i], want);
            free(got);
        } else {
            CHECKF(0, "unknown case kind %s", kind);
            break;
        }
        n_cases++;
    }
    fclose(f);
    printf("%d numpy cases\n", n_cases);
    CHECK(n_cases > 0);
    return TEST_SUMMARY();
}

/* ---- released config (model-spec §2.2) ---- */

static void test_released_constants(void) {
    static const int layers[2] = {1, 14};
    static const int64_t rows[2] = {384006168, 384016682};
    static const int64_t mult[2][4] = {
        {76632096046245, 4839876093313, 35959672319349, 73987337458391},
        {67716810739261, 51510806800915, 30921347202721, 82619226485591}};
    static const int64_t primes[2][24] = {
        {16000057, 16000079, 16000081, 16000097, 16000121, 16000129, 16000133, 16000183,
         16000189, 16000207, 16000211, 16000253, 16000277, 16000289, 16000307, 16000321,
         16000339, 16000381, 16000393, 16000399, 16000403, 16000409, 16000447, 16000463},
        {16000477, 16000487, 16000499, 16000507, 16000511, 16000573, 16000609, 16000627,
         16000667, 16000669, 16000693, 16000697, 16000711, 16000729, 16000759, 16000769,
         16000781, 16000799, 16000813, 16000819, 16000841, 16000877, 16000879, 16000889}};
    di_engram_consts ec;
    di_err err = {0};
    CHECK(di_engram_consts_init(&ec, layers, 2, 4, 8, 16000000, 99092, rows, &err) == DI_OK);
    CHECK(ec.n_cols == 24);
    for (int l = 0; l < 2; l++) {
        CHECK(ec.layer[l].layer_id == layers[l]);
        CHECK(ec.layer[l].num_rows == rows[l]);
        for (int i = 0; i < 4; i++) CHECK(ec.layer[l].mult[i] == mult[l][i]);
        int64_t sum = 0;
        for (int c = 0; c < 24; c++) {
            CHECK(ec.layer[l].primes[c] == primes[l][c]);
            CHECK(ec.layer[l].offsets[c] == sum);
            sum += primes[l][c];
        }
    }
    CHECK(di_engram_consts_slot(&ec, 14) == 1);
    CHECK(di_engram_consts_slot(&ec, 2) == -1);

    /* a table size that the primes do not give is an error naming the field */
    int64_t wrong[2] = {384006168, 384016683};
    CHECK(di_engram_consts_init(&ec, layers, 2, 4, 8, 16000000, 99092, wrong, &err) == DI_EFORMAT);
    CHECK(strstr(err.msg, "engram_num_embeddings[1]") != NULL);
    CHECK(di_engram_consts_init(&ec, layers, 2, 1, 8, 16000000, 99092, NULL, &err) == DI_EUNSUPPORTED);
    CHECK(di_engram_consts_init(&ec, layers, 2, 4, 0, 16000000, 99092, NULL, &err) == DI_EUNSUPPORTED);
    CHECK(di_engram_consts_init(&ec, layers, 5, 4, 8, 16000000, 99092, NULL, &err) == DI_EUNSUPPORTED);
    CHECK(di_engram_consts_init(&ec, layers, 2, 4, 8, 16000000, 0, NULL, &err) == DI_EINVAL);
    static const int dup[2] = {3, 3};
    CHECK(di_engram_consts_init(&ec, dup, 2, 4, 8, 16000000, 99092, NULL, &err) == DI_EINVAL);
}

/* ---- tiny fixture ---- */

static void test_tiny_constants(const di_engram_consts *ec) {
    const char *golden = DI_TINY_FIXTURE_DIR "/golden.safetensors";
    int64_t shape[4];
    int ndim;
    size_t numel;
    int64_t *m = st_read_int(golden, "engram.multipliers", shape, &ndim, &numel);
    int64_t *p = st_read_int(golden, "engram.primes", shape, &ndim, &numel);
    int64_t *o = st_read_int(golden, "engram.offsets", shape, &ndim, &numel);
    CHECK(m && p && o);
    if (m && p && o) {
        for (int l = 0; l < 2; l++) {
            for (int i = 0; i < 4; i++) CHECK(ec->layer[l].mult[i] == m[l * 4 + i]);
            for (int c = 0; c < 12; c++) {
                CHECK(ec->layer[l].primes[c] == p[l * 12 + c]);
                CHECK(ec->layer[l].offsets[c] == o[l * 12 + c]);
            }
        }
    }
    free(m);
    free(p);
    free(o);
}

static void test_tiny_token_map(const di_engram_token_map *tm) {
    int64_t shape[4];
    int ndim;
    size_t numel;
    int64_t *want = st_read_int(DI_TINY_FIXTURE_DIR "/golden.safetensors", "engram.token_map",
                                shape, &ndim, &numel);
    CHECK(want && numel == 2048 && tm->vocab_size == 2048);
    int diff = 0;
    for (size_t t = 0; want && t < numel && t < (size_t)tm->vocab_size; t++) diff += tm->map[t] != want[t];
    CHECKF(diff == 0, "%d token ids differ from golden engram.token_map", diff);
    free(want);
}

/* engram_hash of debug.safetensors: [40, 2, 12] rows of prompt 3 */
static void test_tiny_hash(const di_engram_consts *ec, const di_engram_token_map *tm) {
    int64_t shape[4], hshape[4];
    int ndim, hdim;
    size_t numel, hnumel;
    int64_t *tokens = st_read_int(DI_TINY_FIXTURE_DIR "/golden.safetensors", "prompt.3.tokens",
                                  shape, &ndim, &numel);
    int64_t *want = st_read_int(DI_TINY_FIXTURE_DIR "/debug.safetensors", "engram_hash", hshape,
                                &hdim, &hnumel);
    CHECK(tokens && want && hdim == 3 && hshape[0] == (int64_t)numel && hshape[1] == 2 &&
          hshape[2] == 12);
    if (tokens && want && hnumel == numel * 24) {
        int n = (int)numel, bad = 0;
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        int64_t *rows = malloc((size_t)n * 12 * sizeof *rows);
        for (int i = 0; i < n; i++) ids[i] = di_engram_token_map_get(tm, tokens[i]);
        int32_t pad = di_engram_token_map_get(tm, 2);
        for (int l = 0; l < 2; l++) {
            di_engram_hash_sequence(ec, l, pad, ids, n, rows);
            for (int p = 0; p < n; p++)
                for (int c = 0; c < 12; c++) bad += rows[p * 12 + c] != want[(p * 2 + l) * 12 + c];
        }
        CHECKF(bad == 0, "%d of %d engram_hash entries differ", bad, n * 24);
        /* one position by hand: the last one, from its 4 newest ids */
        int32_t last[4] = {ids[n - 1], ids[n - 2], ids[n - 3], ids[n - 4]};
        di_engram_hash_position(ec, 1, pad, last, 4, rows);
        for (int c = 0; c < 12; c++) CHECK(rows[c] == want[((n - 1) * 2 + 1) * 12 + c]);
        free(ids);
        free(rows);
    }
    free(tokens);
    free(want);
}

/* Blocking: a DEAD id pads its shift and every longer one; a short history pads the start. */
static void test_hash_blocking(const di_engram_consts *ec) {
    int64_t a[12], b[12];
    int32_t dead_mid[4] = {5, 7, DI_ENGRAM_DEAD, 9};
    int32_t short_hist[2] = {5, 7};
    di_engram_hash_position(ec, 0, 2, dead_mid, 4, a);
    di_engram_hash_position(ec, 0, 2, short_hist, 2, b);
    for (int c = 0; c < 12; c++) CHECK(a[c] == b[c]);
    int32_t padded[4] = {5, 7, 2, 2};
    di_engram_hash_position(ec, 0, 2, padded, 4, b);
    for (int c = 0; c < 12; c++) CHECK(a[c] == b[c]);
    /* 2-gram columns ignore shifts 2 and 3 */
    int32_t other[4] = {5, 7, 100, 200};
    di_engram_hash_position(ec, 0, 2, other, 4, b);
    for (int c = 0; c < 4; c++) CHECK(a[c] == b[c]);
    CHECK(a[4] != b[4] || a[5] != b[5] || a[6] != b[6] || a[7] != b[7]);
    for (int c = 0; c < 12; c++)
        CHECK(a[c] >= ec->layer[0].offsets[c] &&
              a[c] < ec->layer[0].offsets[c] + ec->layer[0].primes[c]);
    CHECK(di_engram_token_map_get(&(di_engram_token_map){0}, 0) == DI_ENGRAM_DEAD);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--numpy-cases") == 0) return run_numpy_cases(argv[2]);
    test_numpy_fixed_cases();
    test_released_constants();

    static const int tiny_layers[2] = {1, 4};
    static const int64_t tiny_rows[2] = {1524, 2304};
    di_engram_consts ec;
    di_err err = {0};
    CHECKF(di_engram_consts_init(&ec, tiny_layers, 2, 4, 4, 100, 773, tiny_rows, &err) == DI_OK,
           "%s", err.msg);
    test_tiny_constants(&ec);
    test_hash_blocking(&ec);

    di_engram_token_map tm;
    CHECKF(di_engram_token_map_from_stub(DI_TINY_FIXTURE_DIR "/tokenizer_stub.json", &tm, &err) ==
               DI_OK, "%s", err.msg);
    CHECK(tm.n_compressed == 773);
    test_tiny_token_map(&tm);
    test_tiny_hash(&ec, &tm);
    di_engram_token_map_free(&tm);
    return TEST_SUMMARY();
}
