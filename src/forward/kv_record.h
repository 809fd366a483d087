/* A compressed KV entry as the pool stores it: the FP4 record of model-spec §3.1 (fp4_act_quant of
 * the post-RoPE latent, blocks of 16 dims with e4m3 scales) instead of dh fp32 values -- 288 bytes
 * for the released model's 512 dims where the floats took 2,048. The record holds exactly the
 * values fp4_act_quant leaves (an e2m1 code times an e4m3 scale: at most 6 significant bits, exact
 * in bf16), so attention over it gives the bits it gave over the floats.
 *
 * Record of dh dims (dh % 16 == 0), di_kv_record_bytes(dh) bytes (a multiple of 32):
 *   codes  [dh / 2]   e2m1 codes in dim order, two a byte (the lower dim in the low nibble)
 *   scales [dh / 16]  e4m3 bytes, one a 16-dim block; 0x7F (NaN) marks a block that held a NaN,
 *                     which then reads back as NaN in all 16 dims (the in-place quantiser leaves
 *                     the NaN in its own dim only; either way every logit over the row is NaN).
 *                     The scale saturates at 448, so an infinity quantises to a finite +-6 * 448.
 *   zeros             up to a multiple of 32 bytes
 *
 * Attention lists (src/forward/attention.c; the device's list builder) hold row pointers: a row of
 * the call or a SWA ring slot as dh floats, or a record. On the device a record's pointer carries
 * DI_KV_REF_RECORD in its low bit and the kernels decode it while staging; the CPU decodes the
 * entries a row selects into floats. */
#ifndef DI_FORWARD_KV_RECORD_H
#define DI_FORWARD_KV_RECORD_H

#include <stdint.h>

#define DI_KV_RECORD_BLOCK 16 /* dims a scale */
#define DI_KV_RECORD_NAN 0x7F /* the scale byte of a block that held a NaN */
#define DI_KV_REF_RECORD 1u   /* low bit of a device list entry: it points at a record */

/* Bytes of a record of dh dims (a multiple of 16). */
int di_kv_record_bytes(int dh);
/* fp4_act_quant(row, 16, e4m3) (di_cpu_fp4_quant_inplace's values) as a record: rec [bytes]. */
void di_kv_record_quant(const float *row, int dh, uint8_t *rec);
/* The values of a record: out [dh]. */
void di_kv_record_values(const uint8_t *rec, int dh, float *out);

#endif
