/* The compressed KV record (kv_record.h): fp4_act_quant's codes in dim order, then its e4m3 scales. */
#include "forward/kv_record.h"

#include "backend/cpu/cpu_ops.h"

#include <assert.h>
#include <string.h>

int di_kv_record_bytes(int dh) {
    assert(dh > 0 && dh % DI_KV_RECORD_BLOCK == 0);
    return (dh / 2 + dh / DI_KV_RECORD_BLOCK + 31) / 32 * 32;
}

void di_kv_record_quant(const float *row, int dh, uint8_t *rec) {
    memset(rec, 0, (size_t)di_kv_record_bytes(dh));
    for (int b = 0; b < dh / DI_KV_RECORD_BLOCK; b++) {
        float s; /* 2^-9 .. 448: always finite */
        uint8_t codes[DI_KV_RECORD_BLOCK];
        if (!di_cpu_fp4_block_codes(row + b * DI_KV_RECORD_BLOCK, DI_KV_RECORD_BLOCK, DI_FP4_SCALE_E4M3, &s, codes)) {
            /* a NaN: the block reads back as NaN */
            rec[dh / 2 + b] = DI_KV_RECORD_NAN;
            continue;
        }
        const int sb = di_e4m3_encode(s);
        assert(sb >= 0);
        rec[dh / 2 + b] = (uint8_t)sb;
        for (int i = 0; i < DI_KV_RECORD_BLOCK; i += 2)
            rec[(b * DI_KV_RECORD_BLOCK + i) / 2] = (uint8_t)(codes[i] | codes[i + 1] << 4);
    }
}

void di_kv_record_values(const uint8_t *rec, int dh, float *out) {
    for (int d = 0; d < dh; d += 2) {
        const float s = di_e4m3_to_f32(rec[dh / 2 + d / DI_KV_RECORD_BLOCK]);
        const uint8_t pair = rec[d / 2];
        /* code times scale: exact (at most 6 significant bits, 2^-10 .. 2,688), as bf16 too */
        out[d] = di_e2m1_lut[pair & 15] * s;
        out[d + 1] = di_e2m1_lut[pair >> 4] * s;
    }
}
