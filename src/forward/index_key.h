/* An index key as the KV pool stores it: the MXFP4 record of model-spec §3.1 (fp4_act_quant with
 * ue8m0 scales, blocks of 32 dims) instead of idim fp32 values -- 68 bytes for the released
 * model's 128 dims (padded to 96) where the floats took 512. The lightning indexer reads every key
 * of its sequence at every step, so the keys' bytes bound the index scores at long contexts
 * (docs/PERFORMANCE.md, session 29); the record holds exactly the values fp4_act_quant leaves
 * (e2m1 code times a power of two), so scores over it are the CPU's bits.
 *
 * Record of idim dims (idim % 32 == 0), di_index_key_bytes(idim) bytes, 32-byte aligned in an entry
 * (the entry after it too: a 128-dim record's 68 bytes then take 3 DRAM sectors, not 3 or 4):
 *   codes  [idim / 2]  e2m1 codes, two a byte (the lower dim in the low nibble), word-interleaved:
 *                      the 4-byte word t (dims 8t .. 8t + 7 of its block) of 32-dim block b sits
 *                      at word t * nb + b (nb = idim / 32 blocks), so the device's lane t loads
 *                      its word of every block in one load (cuda_index_score_mma.cu)
 *   scales [nb]        ue8m0 bytes, 2^(byte - 127); 255 (NaN) marks a block whose values were not
 *                      finite (the CPU's scores treat a NaN dot product the same either way)
 *   zeros              up to a multiple of 32 bytes */
#ifndef DI_FORWARD_INDEX_KEY_H
#define DI_FORWARD_INDEX_KEY_H

#include <stdint.h>

/* Bytes of a key record of idim dims (a multiple of 32). */
int di_index_key_bytes(int idim);
/* fp4_act_quant(key, 32, ue8m0) (di_cpu_fp4_quant_inplace's values) as a record: rec [bytes]. */
void di_index_key_quant(const float *key, int idim, uint8_t *rec);
/* The values of a record: out [idim]. */
void di_index_key_values(const uint8_t *rec, int idim, float *out);

#endif
