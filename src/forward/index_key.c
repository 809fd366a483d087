/* The index key record (index_key.h): fp4_act_quant's codes and scales, word-interleaved. */
#include "forward/index_key.h"

#include "backend/cpu/cpu_ops.h"

#include <assert.h>
#include <math.h>
#include <string.h>

enum { KEY_BLOCK = 32 };

int di_index_key_bytes(int idim) {
    assert(idim > 0 && idim % KEY_BLOCK == 0);
    return (idim / 2 + idim / KEY_BLOCK + 31) / 32 * 32;
}

/* byte offset of the code pair of dims d, d + 1 (d even) in a record of nb blocks */
static int code_byte(int d, int nb) {
    const int b = d / KEY_BLOCK, l = d % KEY_BLOCK; /* block, dim within it */
    return 4 * ((l / 8) * nb + b) + (l % 8) / 2;
}

void di_index_key_quant(const float *key, int idim, uint8_t *rec) {
    const int nb = idim / KEY_BLOCK;
    memset(rec, 0, (size_t)di_index_key_bytes(idim));
    for (int b = 0; b < nb; b++) {
        float s; /* 2^-126 .. 2^126, or inf */
        uint8_t codes[KEY_BLOCK];
        if (!di_cpu_fp4_block_codes(key + b * KEY_BLOCK, KEY_BLOCK, DI_FP4_SCALE_UE8M0, &s, codes)) {
            /* a NaN or infinite value: the block reads back as NaN */
            rec[idim / 2 + b] = 255;
            continue;
        }
        int e;
        frexpf(s, &e); /* s = 2^(e - 1) */
        rec[idim / 2 + b] = (uint8_t)(e - 1 + 127);
        for (int i = 0; i < KEY_BLOCK; i += 2)
            rec[code_byte(b * KEY_BLOCK + i, nb)] = (uint8_t)(codes[i] | codes[i + 1] << 4);
    }
}

void di_index_key_values(const uint8_t *rec, int idim, float *out) {
    const int nb = idim / KEY_BLOCK;
    for (int d = 0; d < idim; d += 2) {
        const float s = di_e8m0_to_f32(rec[idim / 2 + d / KEY_BLOCK]);
        const uint8_t pair = rec[code_byte(d, nb)];
        /* code times scale: exact (at most 2 significant bits; 2^-127 .. 6 * 2^126), as bf16 too */
        out[d] = di_e2m1_lut[pair & 15] * s;
        out[d + 1] = di_e2m1_lut[pair >> 4] * s;
    }
}
