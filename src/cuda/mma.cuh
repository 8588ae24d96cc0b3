// mma.cuh -- int8 tensor-core mat-mats for the prompt path and the batched step (mma.sync m16n8k16 / m16n8k32 on
// the q8 activations), with the decode step's bits: every (row, token, lane unit) float term of k_mv's unit_dot8
// computed from exact integer sums, and the terms added in the order k_mv's lanes and its shuffle tree add them.
// Included by prefill.cuh (it uses mm_args, pf_qout and the weight layouts of weights.cuh). See docs/CUDA.md.
//
// Why the order can be kept: k_mv's lane sl of a row adds the terms of units sl, sl + sw, ... in turn into one float,
// then group_sum adds the sw lanes' floats by shuffles with offsets sw/2, sw/4, .. 1 (and a row over two warps adds
// the two warps' sums in warp order). That tree, evaluated depth first, visits its leaves in bit-reversed order:
// lanes 0, sw/2, sw/4, 3sw/4, ... and each inner node is the sum of the two subtrees it joins (float addition is
// commutative, so only the tree's shape matters). So a warp here runs the lane slots in that order, each slot's
// units in turn into one float per (row, token), and joins finished subtrees like a binary counter: after slot c,
// one join per trailing one bit of c, the partial sums waiting in shared memory (at most log2(sw) of them).
// The integer sums of a unit (its 16- or 32-value dots, the K-quants' min and scale sums) come from the tensor
// cores; they are exact in any order, so the float terms are unit_dot8's, term for term.

// c = A (16 x 16 s8, rows g and g + 8 of the warp's 16) x B (16 x 8 s8): k = 4 tg .. 4 tg + 3 in each thread's word.
static __device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0), "r"(0), "r"(0), "r"(0), "r"(0));
}

// c = acc + A (16 x 32) x B (32 x 8): a0 / a1 rows g / g + 8 at k 4 tg.., a2 / a3 the same rows at k 16 + 4 tg..;
// b0 k 4 tg.., b1 k 16 + 4 tg.. of token g.
static __device__ __forceinline__ void mma_k32(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1, const int (&acc)[4]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(acc[0]), "r"(acc[1]), "r"(acc[2]), "r"(acc[3]));
}

// |x| < 2^22 to float, exactly (the same value as (float)x) with two full-rate operations instead of the
// conversion unit.
static __device__ __forceinline__ float mq_i2f(int x) { return __int_as_float(0x4B400000 + x) - 12582912.0f; }

// A signed byte in every byte of a word.
static __device__ __forceinline__ uint32_t mq_bcast(int s) { return (uint32_t)(uint8_t)(int8_t)s * 0x01010101u; }

// One lane unit of the thread's two rows (g, g + 8 of its warp's 16): fetch() loads, into a raw record, the weight
// words this thread contributes to the unit's mma A fragments and the rows' scales (issued MQ_AHEAD units early);
// decode() unpacks them when the unit's turn comes; terms() dots them with one token tile (B: token g of the tile;
// C: tokens 2 tg, 2 tg + 1 of rows g, g + 8 in acc[0..3]) and adds the 4 float terms into acc. K says
// which activation form the type reads (q8_K: true, q8_0: false).
template <int T> struct mq_unit;

template <> struct mq_unit<T_Q4_K> { // unit_dot8<T_Q4_K>: 16 values of sub-block 2j and 16 of 2j + 1
    static constexpr bool K = true, PF = false; // PF (activations a unit ahead): 2.6% slower pp512 (167 registers)
    static constexpr int UPB = 8;               // units a scale block (the activations' q8_K scales: the block's table)
    struct raw { // the loads of one unit (fetch), decoded when the unit's turn comes
        uint4 hd[2];
        uint32_t w[2];
    };
    uint32_t lo[2], hi[2], mm[4];
    float2 dd[2];
    int sc0[2], sc1[2];
    static __device__ __forceinline__ void fetch(raw &x, const dmat &M, int rA, int rB, int u, int tg) {
        const int b = u >> 3, i = u & 7, j = i >> 1, hf = i & 1;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint8_t *blk = M.q + (size_t)(r ? rB : rA) * M.qrow + (size_t)b * 144;
            x.hd[r] = __ldg((const uint4 *)blk);
            x.w[r] = __ldg((const uint32_t *)(blk + 16 + 32 * j + 16 * hf + 4 * tg));
        }
    }
    __device__ __forceinline__ void decode(const raw &x, int u) {
        const int j = (u & 7) >> 1, k0 = 16 * (j & 1);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint4 hd = x.hd[r];
            const uint32_t w = x.w[r];
            dd[r] = __half22float2(*(const __half2 *)&hd.x);
            const uint32_t S = j < 2 ? hd.y & 0x3F3F3F3Fu : (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
            const uint32_t Mn = j < 2 ? hd.z & 0x3F3F3F3Fu : ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
            sc0[r] = (S >> k0) & 0xFF, sc1[r] = (S >> (k0 + 8)) & 0xFF;
            mm[r] = ((Mn >> k0) & 0xFF) * 0x01010101u, mm[2 + r] = ((Mn >> (k0 + 8)) & 0xFF) * 0x01010101u;
            lo[r] = w & 0x0F0F0F0Fu, hi[r] = (w >> 4) & 0x0F0F0F0Fu;
        }
    }
    struct act { // one token tile's activations of a unit (fetch_act, a unit ahead of its terms)
        uint32_t x[2];
        float dk[2];
    };
    static __device__ __forceinline__ void fetch_x(act &a, const int8_t *xq, int u, int tg) {
        const int b = u >> 3, i = u & 7;
        const int8_t *p = xq + 256 * b + 64 * (i >> 1) + 16 * (i & 1);
        a.x[0] = __ldg((const uint32_t *)(p + 4 * tg)), a.x[1] = __ldg((const uint32_t *)(p + 32 + 4 * tg));
    }
    __device__ __forceinline__ void terms(const act &a, float (&acc)[4]) const {
        const uint32_t b0 = a.x[0], b1 = a.x[1];
        const int z[4] = {0, 0, 0, 0};
        int i0[4], i1[4], ms[4];
        mma_k16(i0, lo[0], lo[1], b0);
        mma_k16(i1, hi[0], hi[1], b1);
        mma_k32(ms, mm[0], mm[1], mm[2], mm[3], b0, b1, z); // m0 s0 + m1 s1
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1, t = e & 1;
            acc[e] += a.dk[t] * (dd[r].x * mq_i2f(sc0[r] * i0[e] + sc1[r] * i1[e]) - dd[r].y * mq_i2f(ms[e]));
        }
    }
};

template <> struct mq_unit<T_Q6_K> { // unit_dot8<T_Q6_K>: 4 groups of 16 values, scales 0, 2, 4, 6 (of 8h + l/16)
    static constexpr bool K = true, PF = false; // PF: 225 registers (spills at the 168 of 3 blocks an SM)
    static constexpr int UPB = 4;
    struct raw {
        uint32_t A[2], C[2], H[2], s0[2], s1[2];
        float d[2];
    };
    uint32_t w[4][2], s02[4], s46[4];
    float d[2];
    int sc[4][2];
    static __device__ __forceinline__ void fetch(raw &x, const dmat &M, int rA, int rB, int u, int tg) {
        const int b = u >> 2, i = u & 3, h = i >> 1, l = 16 * (i & 1);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const size_t row = (size_t)(r ? rB : rA);
            const uint8_t *qb = M.q + row * M.qrow + (size_t)b * 192, *mb = M.m + row * M.mrow + (size_t)b * 20;
            x.A[r] = __ldg((const uint32_t *)(qb + 64 * h + l + 4 * tg));
            x.C[r] = __ldg((const uint32_t *)(qb + 64 * h + 32 + l + 4 * tg));
            x.H[r] = __ldg((const uint32_t *)(qb + 128 + 32 * h + l + 4 * tg));
            x.s0[r] = __ldg((const uint32_t *)(mb + 8 * h)), x.s1[r] = __ldg((const uint32_t *)(mb + 8 * h + 4));
            x.d[r] = __ldg((const float *)(mb + 16));
        }
    }
    __device__ __forceinline__ void decode(const raw &x, int u) {
        const int o = 8 * (u & 1);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint32_t A = x.A[r], C = x.C[r], H = x.H[r], sw0 = x.s0[r], sw1 = x.s1[r];
            w[0][r] = (A & 0x0F0F0F0Fu) | ((H & 0x03030303u) << 4);
            w[1][r] = (C & 0x0F0F0F0Fu) | (((H >> 2) & 0x03030303u) << 4);
            w[2][r] = ((A >> 4) & 0x0F0F0F0Fu) | (((H >> 4) & 0x03030303u) << 4);
            w[3][r] = ((C >> 4) & 0x0F0F0F0Fu) | (((H >> 6) & 0x03030303u) << 4);
            d[r] = x.d[r];
            sc[0][r] = (int)(int8_t)(sw0 >> o), sc[1][r] = (int)(int8_t)(sw0 >> (o + 16));
            sc[2][r] = (int)(int8_t)(sw1 >> o), sc[3][r] = (int)(int8_t)(sw1 >> (o + 16));
            s02[r] = mq_bcast(sc[0][r]), s02[2 + r] = mq_bcast(sc[1][r]);
            s46[r] = mq_bcast(sc[2][r]), s46[2 + r] = mq_bcast(sc[3][r]);
        }
    }
    struct act {
        uint32_t x[4];
        float dk[2];
    };
    static __device__ __forceinline__ void fetch_x(act &a, const int8_t *xq, int u, int tg) {
        const int b = u >> 2, i = u & 3;
        const int8_t *p = xq + 256 * b + 128 * (i >> 1) + 16 * (i & 1) + 4 * tg;
#pragma unroll
        for (int k = 0; k < 4; k++) a.x[k] = __ldg((const uint32_t *)(p + 32 * k));
    }
    __device__ __forceinline__ void terms(const act &a, float (&acc)[4]) const {
        const uint32_t x0 = a.x[0], x1 = a.x[1], x2 = a.x[2], x3 = a.x[3];
        const int z[4] = {0, 0, 0, 0};
        int i0[4], i1[4], i2[4], i3[4], t1[4], t[4];
        mma_k16(i0, w[0][0], w[0][1], x0);
        mma_k16(i1, w[1][0], w[1][1], x1);
        mma_k16(i2, w[2][0], w[2][1], x2);
        mma_k16(i3, w[3][0], w[3][1], x3);
        mma_k32(t1, s02[0], s02[1], s02[2], s02[3], x0, x1, z); // sc0 t0 + sc2 t1
        mma_k32(t, s46[0], s46[1], s46[2], s46[3], x2, x3, t1); // + sc4 t2 + sc6 t3
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = e >> 1, tt = e & 1;
            const int X = sc[0][r] * i0[e] + sc[1][r] * i1[e] + sc[2][r] * i2[e] + sc[3][r] * i3[e] - 32 * t[e];
            acc[e] += a.dk[tt] * d[r] * (float)X;
        }
    }
};

// Legacy blocks (one unit a block of 32): thread tg's word tg of the 16 quant bytes holds values 4 tg.. (low
// nibbles) and 16 + 4 tg.. (high), k = 4 tg.. and 16 + 4 tg.. of one m16n8k32; the offset (8 or 16) is taken out
// of the weights before the mma, which gives unit_dot8's nib_dot32 - 8 s (nib5_dot32 - 16 s) in one sum.
template <int T> struct mq_legacy {
    static constexpr bool K = false, PF = true; // Q4_0 pp512 +5.5% (8,417 -> 8,877 tok/s, H100)
    static constexpr int UPB = 0;               // no table: a scale a unit (K / 32 of them a token), loaded as needed
    struct raw {
        uint32_t w0[2], w1[2]; // Q8_0: words tg and 4 + tg; Q4_0 / Q5_0: word tg and (Q5_0) the high bits
        float d[2];
    };
    uint32_t a[4];
    float dw[2];
    static __device__ __forceinline__ void fetch(raw &x, const dmat &M, int rA, int rB, int u, int tg) {
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const size_t row = (size_t)(r ? rB : rA);
            const uint8_t *q = M.q + row * M.qrow, *m = M.m + row * M.mrow;
            if (T == T_Q8_0) {
                x.w0[r] = __ldg((const uint32_t *)(q + 32 * u + 4 * tg));
                x.w1[r] = __ldg((const uint32_t *)(q + 32 * u + 16 + 4 * tg));
                x.d[r] = __ldg((const float *)m + u);
            } else if (T == T_Q4_0) {
                x.w0[r] = __ldg((const uint32_t *)(q + 16 * u + 4 * tg));
                x.d[r] = __ldg((const float *)m + u);
            } else { // Q5_0
                x.w0[r] = __ldg((const uint32_t *)(q + 16 * u + 4 * tg));
                x.w1[r] = __ldg((const uint32_t *)m + 2 * u + 1);
                x.d[r] = __ldg((const float *)m + 2 * u);
            }
        }
    }
    __device__ __forceinline__ void decode(const raw &x, int) {
        const int tg = threadIdx.x & 3;
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const uint32_t w = x.w0[r];
            dw[r] = x.d[r];
            if (T == T_Q8_0) {
                a[r] = w, a[2 + r] = x.w1[r];
            } else if (T == T_Q4_0) {
                a[r] = __vsub4(w & 0x0F0F0F0Fu, 0x08080808u), a[2 + r] = __vsub4((w >> 4) & 0x0F0F0F0Fu, 0x08080808u);
            } else {
                const uint32_t qh = x.w1[r];
                a[r] = __vsub4((w & 0x0F0F0F0Fu) | (uint32_t)bits4_x10(qh >> (4 * tg)), 0x10101010u);
                a[2 + r] = __vsub4(((w >> 4) & 0x0F0F0F0Fu) | (uint32_t)bits4_x10(qh >> (16 + 4 * tg)), 0x10101010u);
            }
        }
    }
    struct act {
        uint32_t x[2];
        float dk[2];
    };
    static __device__ __forceinline__ void fetch_act(act &x, const int8_t *xq, const float *dA, const float *dB, int u,
                                                     int tg) {
        const int8_t *p = xq + 32 * u + 4 * tg;
        x.x[0] = __ldg((const uint32_t *)p), x.x[1] = __ldg((const uint32_t *)(p + 16));
        x.dk[0] = __ldg(dA + u), x.dk[1] = __ldg(dB + u);
    }
    __device__ __forceinline__ void terms(const act &x, float (&acc)[4]) const {
        const int z[4] = {0, 0, 0, 0};
        int s[4];
        mma_k32(s, a[0], a[1], a[2], a[3], x.x[0], x.x[1], z);
#pragma unroll
        for (int e = 0; e < 4; e++) acc[e] += dw[e >> 1] * x.dk[e & 1] * mq_i2f(s[e]);
    }
};
template <> struct mq_unit<T_Q4_0> : mq_legacy<T_Q4_0> {};
template <> struct mq_unit<T_Q5_0> : mq_legacy<T_Q5_0> {};
template <> struct mq_unit<T_Q8_0> : mq_legacy<T_Q8_0> {};

#define MQ_LEVELS 6 // partial sums waiting at once: log2 of the widest lanes a row (64)

// Levels of waiting partial sums a warp needs for a subtree of sq leaves: log2(sq).
static __host__ __device__ __forceinline__ int mq_levels(int sq) {
    int lv = 0;
    while ((2 << lv) <= sq && lv < MQ_LEVELS) lv++;
    return lv;
}

// Shared memory a block of k_pf_mma<T, NT, KS> takes for sw lanes a row: the waiting partial sums of its 128
// threads' 4 NT outputs, and with KS 4 the 4 warps' sums.
static __host__ __device__ __forceinline__ int mq_wait_floats(int nt, int sw, int ks) {
    return mq_levels(sw / ks) * nt * 4 * 128 + (ks > 1 ? 4 * nt * 4 * 32 : 0);
}

// The K-quants' activation scales of a block's 8 nt tokens, [scale block][token] after the waiting sums: one LDS.64
// a token pair and unit instead of two global loads and their address arithmetic (2026-12-05, SASS: ~40 of ~290
// instructions a unit rebuilt the 8 scale pointers the registers could not keep).
static int mq_tab_floats(int type, int nu, int nt) {
    const int upb = type == T_Q4_K ? mq_unit<T_Q4_K>::UPB : type == T_Q6_K ? mq_unit<T_Q6_K>::UPB : 0;
    return upb ? (nu + upb - 1) / upb * 8 * nt : 0;
}

static size_t mq_smem(int type, int nu, int nt, int sw, int ks) {
    return ((size_t)mq_wait_floats(nt, sw, ks) + (size_t)mq_tab_floats(type, nu, nt)) * sizeof(float);
}

// The lane slot visited c-th: the bit-reversed order of the shuffle tree's leaves (a row over two warps: each
// warp's 32 slots in turn).
static __device__ __forceinline__ int mq_slot(int c, int lb) {
    return (int)(__brev((unsigned)(c & 31)) >> (32 - lb)) + (c & 32);
}

// One finished leaf (slot c's sum, in p) joined with the waiting subtrees: one join per trailing one bit of c,
// then p waits at the next level, unless c is the last leaf (p is then the row's total).
template <int NT> static __device__ __forceinline__ void mq_join(float (&p)[NT][4], int c, int sw, float *wait) {
    int lev = 0;
    for (; (c >> lev) & 1; lev++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) p[nt][e] = wait[((lev * NT + nt) * 4 + e) * 128 + threadIdx.x] + p[nt][e];
    if (c + 1 < sw)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                wait[((lev * NT + nt) * 4 + e) * 128 + threadIdx.x] = p[nt][e];
                p[nt][e] = 0.0f;
            }
}

#define MQ_AHEAD 4 // units whose weight loads are in flight ahead of the one being dotted

// y = A x for the chunk's n tokens; blockIdx.x takes a tile of 8 NT tokens, consecutive blocks the token tiles of
// the same rows. KS 1: a block of 4 warps takes 64 rows, 16 a warp, each warp all of its rows' lane slots; KS 4:
// 16 rows, each warp a quarter of the slots (in mq_slot order: a quarter of the tree is a subtree of it, so the
// quarters' sums joined as ((0 + 1) + (2 + 3)) are the tree's total), for matrices of few rows or chunks of few
// tokens, whose grid of 64-row blocks would leave most of the GPU idle. Each warp walks its slots' units slot by
// slot (each slot's units in turn into one float per output, mq_join after a slot's last), the weights of the next
// MQ_AHEAD units of that walk loading while a unit is dotted.
template <int T, int NT, int KS> __global__ void __launch_bounds__(128, T == T_Q4_K ? 4 : 3) k_pf_mma(const mm_args a) {
    // [levels][NT][4][128]; with KS 4 then [4][NT][4][32] (the quarters' sums); then, for the K-quants, the scale table
    extern __shared__ float mq_wait[];
    typedef mq_unit<T> U;
    const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5, g = lane >> 2, tg = lane & 3;
    const int rowA = blockIdx.y * (64 / KS) + (KS == 1 ? 16 * wp : 0) + g, rowB = rowA + 8;
    const int rA = min(rowA, a.A.N - 1), rB = min(rowB, a.A.N - 1), t0 = blockIdx.x * 8 * NT;
    const int sw = a.sw, nu = a.A.nunits8, lb = sw > 32 ? 5 : __ffs(sw) - 1;
    constexpr bool TAB = U::UPB > 0;
    const int8_t *xq[NT];
    const float *dA[NT], *dB[NT];
    float2 *tab = (float2 *)(mq_wait + mq_wait_floats(NT, sw, KS)); // TAB: [scale block][4 NT token pairs]
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const qout ob = pf_qout(a.xa, a.as, min(t0 + 8 * nt + g, a.n - 1));
        xq[nt] = U::K ? ob.qK : ob.q0;
        if (!TAB) {
            const qout o0 = pf_qout(a.xa, a.as, min(t0 + 8 * nt + 2 * tg, a.n - 1));
            const qout o1 = pf_qout(a.xa, a.as, min(t0 + 8 * nt + 2 * tg + 1, a.n - 1));
            dA[nt] = U::K ? o0.dK : o0.d0, dB[nt] = U::K ? o1.dK : o1.d0;
        }
    }
    if (TAB) { // the block's scale table (read after the barrier below, once the first weight loads are issued)
        const int upb = TAB ? U::UPB : 1, nb = (nu + upb - 1) / upb;
        float *tf = (float *)tab;
        for (int i = threadIdx.x; i < nb * 8 * NT; i += blockDim.x) {
            const int bb = i / (8 * NT), tk = i % (8 * NT);
            tf[i] = __ldg(pf_qout(a.xa, a.as, min(t0 + tk, a.n - 1)).dK + bb);
        }
    }
    // one token tile's activations of unit u: its words, and its scales from the table or global memory
    auto fetch_a = [&](typename U::act &x, int nt, int u) {
        if constexpr (TAB) {
            U::fetch_x(x, xq[nt], u, tg);
            const float2 d = tab[(u / (TAB ? U::UPB : 1)) * 4 * NT + 4 * nt + tg];
            x.dk[0] = d.x, x.dk[1] = d.y;
        } else
            U::fetch_act(x, xq[nt], dA[nt], dB[nt], u, tg);
    };
    const int sq = sw / KS, c0 = KS == 1 ? 0 : wp * sq, c1 = c0 + sq; // this warp's slots: leaves c0 .. c1 - 1
    // the loads' cursor: slot pc, unit pu (empty slots skipped: nothing to load)
    int pc = c0, pu = mq_slot(c0, lb);
    while (pc < c1 && pu >= nu) pu = ++pc < c1 ? mq_slot(pc, lb) : nu;
    typename U::raw ring[MQ_AHEAD];
#pragma unroll
    for (int k = 0; k < MQ_AHEAD; k++)
        if (pc < c1) {
            U::fetch(ring[k], a.A, rA, rB, pu, tg);
            for (pu += sw; pc < c1 && pu >= nu;) pu = ++pc < c1 ? mq_slot(pc, lb) : nu;
        }
    if (TAB) __syncthreads(); // the scale table is written
    // the activations' cursor (slot qc, unit qu): a unit ahead of the dots, so each unit's activation words and scales
    // are in flight while the unit before is dotted (2026-12-05: the loads' latency was the largest stall)
    int qc = c0, qu = mq_slot(c0, lb);
    while (qc < c1 && qu >= nu) qu = ++qc < c1 ? mq_slot(qc, lb) : nu;
    typename U::act ac[NT], an[NT];
    if (U::PF && qc < c1) {
#pragma unroll
        for (int nt = 0; nt < NT; nt++) fetch_a(ac[nt], nt, qu);
        for (qu += sw; qc < c1 && qu >= nu;) qu = ++qc < c1 ? mq_slot(qc, lb) : nu;
    }
    // the dots' cursor: slot cc, unit cu; an empty slot is a leaf of 0 (as a k_mv lane with no unit)
    float p[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) p[nt][e] = 0.0f;
    int cc = c0, cu = mq_slot(c0, lb);
    while (cc < c1 && cu >= nu) {
        mq_join<NT>(p, cc - c0, sq, mq_wait);
        cu = ++cc < c1 ? mq_slot(cc, lb) : nu;
    }
    while (cc < c1) {
#pragma unroll
        for (int k = 0; k < MQ_AHEAD; k++) {
            if (cc < c1) {
                if (U::PF && qc < c1) { // the next unit's activations
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) fetch_a(an[nt], nt, qu);
                    for (qu += sw; qc < c1 && qu >= nu;) qu = ++qc < c1 ? mq_slot(qc, lb) : nu;
                }
                U w;
                w.decode(ring[k], cu);
                if (pc < c1) { // this ring entry's next unit
                    U::fetch(ring[k], a.A, rA, rB, pu, tg);
                    for (pu += sw; pc < c1 && pu >= nu;) pu = ++pc < c1 ? mq_slot(pc, lb) : nu;
                }
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    if (!U::PF) fetch_a(ac[nt], nt, cu);
                    w.terms(ac[nt], p[nt]);
                    if (U::PF) ac[nt] = an[nt];
                }
                if ((cu += sw) >= nu) // the slot's last unit: join, and the empty slots after it
                    do {
                        mq_join<NT>(p, cc - c0, sq, mq_wait);
                        cu = ++cc < c1 ? mq_slot(cc, lb) : nu;
                    } while (cc < c1 && cu >= nu);
            }
        }
    }
    if (KS > 1) { // the quarters' sums: ((0 + 1) + (2 + 3)), in warp 0
        float *q = mq_wait + (size_t)mq_levels(sq) * NT * 4 * 128;
        __syncthreads();
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) q[((wp * NT + nt) * 4 + e) * 32 + lane] = p[nt][e];
        __syncthreads();
        if (wp) return;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = (nt * 4 + e) * 32 + lane, st = NT * 4 * 32;
                p[nt][e] = (q[i] + q[st + i]) + (q[2 * st + i] + q[3 * st + i]);
            }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int row = e < 2 ? rowA : rowB, tok = t0 + 8 * nt + 2 * tg + (e & 1);
            const float s = p[nt][e];
            if (row < a.A.N && tok < a.n)
                a.y[(size_t)tok * a.ys + row] = a.softcap > 0.0f ? tanhf(s / a.softcap) * a.softcap : s;
        }
}

typedef void (*mq_kernel)(mm_args);

// The tensor-core form for a weight type (NULL: none; the dp4a mat-mat runs), tiles of 8 nt tokens. (A cap of 128
// registers, __launch_bounds__(128, 4), measured slower on 2026-12-05: pp512 8,196 against 8,505 tok/s, H100.)
template <int NT, int KS> static mq_kernel mq_pick_nt(int t) {
    switch (t) {
    case T_Q4_K: return k_pf_mma<T_Q4_K, NT, KS>;
    case T_Q6_K: return k_pf_mma<T_Q6_K, NT, KS>;
    case T_Q4_0: return k_pf_mma<T_Q4_0, NT, KS>;
    case T_Q5_0: return k_pf_mma<T_Q5_0, NT, KS>;
    case T_Q8_0: return k_pf_mma<T_Q8_0, NT, KS>;
    }
    return NULL;
}

static mq_kernel mq_pick(int t, int nt, int ks) {
    if (ks > 1) return nt == 1 ? mq_pick_nt<1, 4>(t) : nt == 2 ? mq_pick_nt<2, 4>(t) : mq_pick_nt<4, 4>(t);
    return nt == 1 ? mq_pick_nt<1, 1>(t) : nt == 2 ? mq_pick_nt<2, 1>(t) : mq_pick_nt<4, 1>(t);
}

// Token tiles of 8 nt: 4 (32 tokens) for a long chunk, fewer for a batched step of few rows.
static int mq_nt(int n) { return n <= 8 ? 1 : n <= 16 ? 2 : 4; }

// KS for a launch: 4 where 64-row blocks would give fewer than 4 blocks an SM (PB_CUDA_MMA_KS=1|4 forces one).
static int mq_ks(int N, int n, int nt, int n_sm, int force) {
    if (force == 1 || force == 4) return force;
    const long blocks = (long)((N + 63) / 64) * ((n + 8 * nt - 1) / (8 * nt));
    return blocks < 4L * n_sm ? 4 : 1;
}
