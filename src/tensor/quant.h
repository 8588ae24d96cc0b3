/* quant.h -- block layouts of the ggml weight/activation formats and the per-family (de)quantizers.
 * Internal to the tensor and kernels rooms; layouts follow docs quant-formats.md (little-endian host). */
#ifndef PB_QUANT_H
#define PB_QUANT_H

#include "tensor/types.h"

#define PB_QK4_0 32
#define PB_QK4_1 32
#define PB_QK5_0 32
#define PB_QK5_1 32
#define PB_QK8_0 32
#define PB_QK8_1 32

/* ---- 32-element legacy blocks ---------------------------------------------------------------- */
typedef struct {
    uint16_t d;     /* fp16 scale */
    uint8_t qs[16]; /* nibbles: low = elements 0..15, high = 16..31 */
} pb_block_q4_0;
_Static_assert(sizeof(pb_block_q4_0) == 18, "q4_0 block size");

typedef struct {
    uint16_t d; /* fp16 scale */
    uint16_t m; /* fp16 block minimum */
    uint8_t qs[16];
} pb_block_q4_1;
_Static_assert(sizeof(pb_block_q4_1) == 20, "q4_1 block size");

typedef struct {
    uint16_t d;
    uint8_t qh[4]; /* bit e = 5th bit of element e (little-endian u32) */
    uint8_t qs[16];
} pb_block_q5_0;
_Static_assert(sizeof(pb_block_q5_0) == 22, "q5_0 block size");

typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[16];
} pb_block_q5_1;
_Static_assert(sizeof(pb_block_q5_1) == 24, "q5_1 block size");

typedef struct {
    uint16_t d;
    int8_t qs[32];
} pb_block_q8_0;
_Static_assert(sizeof(pb_block_q8_0) == 34, "q8_0 block size");

typedef struct {
    uint16_t d; /* fp16 scale */
    uint16_t s; /* fp16(d * sum(qs)) */
    int8_t qs[32];
} pb_block_q8_1;
_Static_assert(sizeof(pb_block_q8_1) == 36, "q8_1 block size");

/* ---- 256-element K-quant super-blocks -------------------------------------------------------- */
typedef struct {
    uint8_t scales[16]; /* low nibble scale, high nibble min, per 16 values */
    uint8_t qs[64];     /* 2-bit quants */
    uint16_t d;         /* fp16 super-scale of scales */
    uint16_t dmin;      /* fp16 super-scale of mins */
} pb_block_q2_K;
_Static_assert(sizeof(pb_block_q2_K) == 84, "q2_K block size");

typedef struct {
    uint8_t hmask[32];  /* 3rd bit of each quant */
    uint8_t qs[64];     /* low 2 bits */
    uint8_t scales[12]; /* sixteen 6-bit signed scales */
    uint16_t d;
} pb_block_q3_K;
_Static_assert(sizeof(pb_block_q3_K) == 110, "q3_K block size");

typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12]; /* eight 6-bit scales + eight 6-bit mins */
    uint8_t qs[128];
} pb_block_q4_K;
_Static_assert(sizeof(pb_block_q4_K) == 144, "q4_K block size");

typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} pb_block_q5_K;
_Static_assert(sizeof(pb_block_q5_K) == 176, "q5_K block size");

typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} pb_block_q6_K;
_Static_assert(sizeof(pb_block_q6_K) == 210, "q6_K block size");

typedef struct {
    float d; /* float32 scale */
    int8_t qs[256];
    int16_t bsums[16]; /* sum of qs per 16 values */
} pb_block_q8_K;
_Static_assert(sizeof(pb_block_q8_K) == 292, "q8_K block size");

/* Q4_K / Q5_K 6-bit scale and min of sub-block j (0..7). */
static inline void pb_quant_scale_min_k4(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q3_K signed scale of sub-block j (0..15), -32..31. */
static inline int pb_quant_scale_q3(int j, const uint8_t *s) {
    int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    int hi = (s[8 + (j % 4)] >> (2 * (j / 4))) & 3;
    return (lo | (hi << 4)) - 32;
}

/* ---- dequantize (n % blck == 0) and reference quantizers (quant_legacy.c, quant_k.c) --------- */
void pb_dequant_q4_0(const void *src, float *dst, int64_t n);
void pb_dequant_q4_1(const void *src, float *dst, int64_t n);
void pb_dequant_q5_0(const void *src, float *dst, int64_t n);
void pb_dequant_q5_1(const void *src, float *dst, int64_t n);
void pb_dequant_q8_0(const void *src, float *dst, int64_t n);
void pb_dequant_q8_1(const void *src, float *dst, int64_t n);
void pb_dequant_q2_K(const void *src, float *dst, int64_t n);
void pb_dequant_q3_K(const void *src, float *dst, int64_t n);
void pb_dequant_q4_K(const void *src, float *dst, int64_t n);
void pb_dequant_q5_K(const void *src, float *dst, int64_t n);
void pb_dequant_q6_K(const void *src, float *dst, int64_t n);
void pb_dequant_q8_K(const void *src, float *dst, int64_t n);

void pb_quant_q4_0(const float *src, void *dst, int64_t n);
void pb_quant_q4_1(const float *src, void *dst, int64_t n);
void pb_quant_q5_0(const float *src, void *dst, int64_t n);
void pb_quant_q5_1(const float *src, void *dst, int64_t n);
void pb_quant_q8_0(const float *src, void *dst, int64_t n);
void pb_quant_q8_1(const float *src, void *dst, int64_t n);
void pb_quant_q2_K(const float *src, void *dst, int64_t n);
void pb_quant_q3_K(const float *src, void *dst, int64_t n);
void pb_quant_q4_K(const float *src, void *dst, int64_t n);
void pb_quant_q5_K(const float *src, void *dst, int64_t n);
void pb_quant_q6_K(const float *src, void *dst, int64_t n);
void pb_quant_q8_K(const float *src, void *dst, int64_t n);

#endif
