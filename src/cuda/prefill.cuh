// prefill.cuh -- the CUDA backend's prompt path: a chunk of up to PF_NC prompt tokens through every layer at once
// (mat-mat tiles that reuse each weight load over PF_TT tokens, attention of all the chunk's queries over the cache
// and the chunk's own keys), with the decode step's numerics: every value is computed by the same per-lane unit
// dots (weights.cuh), the same lane and warp sums, norms, quantizations and attention split order as one token step
// of backend.cu, so a prompt run at once gives the logits of the same prompt run token by token (Gemma 4: its own
// chunk, pf_enqueue_g4, mirroring enqueue_step_g4). Included by backend.cu (it uses that file's structures and
// device functions); no host allocation per token. See docs/CUDA.md.

#define PF_NC 512 // tokens per prefill chunk (scratch sized for it once per context)
// PF_TT: tokens per mat-mat tile: each weight unit a lane loads is dotted with PF_TT tokens' activations (chunks of
// fewer tokens, as a batched step of a few rows, take tiles of 1, 2 or 4: pf_tt)
#define PF_TT 8

// A context's prefill scratch (allocated at its first prompt of more than one token).
struct pf_bufs {
    int nc, as;                 // chunk tokens; stride of a token's int8 forms (max K rounded up to 256)
    float *x, *xn, *q, *k, *v;  // [nc][d], [nc][d], [nc][qd], [nc][kvd], [nc][kvd]
    float *att, *o, *gate, *up; // [nc][qd], [nc][d], [nc][n_ff], [nc][n_ff]
    float *part;                // [nc][n_head_kv][S][n_rep][hd + 2]: the attention's split states
    int8_t *a0, *aK;            // int8 forms of the current mat-mat input: [nc][as]
    float *d0, *dK;             // their scales: [nc][as / 32], [nc][as / 256]
    __half *kn, *vn;            // the chunk's roped keys and values as F16: [nc][n_head_kv][hd]
    int *toks;                  // [nc]
    // Gemma 4: kn / vn hold nslot slots of kvs halves each ([nslot][nc][n_head_kv][hd] at the layer maxima: slot 0 for
    // layers whose keys only they read, one slot a layer whose cache KV-shared layers read: pf_g4_kv_plan); the
    // chunk's per-layer inputs and a layer's PLE gate
    size_t kvs;
    float *pli, *ple_g; // [nc][n_layer][P], [nc][P]
    void *mem;
    size_t bytes;
};

// A token's int8 forms in the chunk buffers (only the forms the model needs: qout_of's choice).
static __host__ __device__ __forceinline__ qout pf_qout(const qout &b, int as, int t) {
    qout o;
    o.q0 = b.q0 ? b.q0 + (size_t)t * as : NULL;
    o.qK = b.qK ? b.qK + (size_t)t * as : NULL;
    o.d0 = b.d0 + (size_t)t * (as / 32);
    o.dK = b.dK + (size_t)t * (as / 256);
    return o;
}

// A batched decode step (batch.cuh) runs its n sequences through this file's kernels as a chunk of n tokens whose
// token t is the next token of its own context: its position, key splits, cache and cache capacity come from device
// tables (one layer's entries here; NULL pos: a prompt chunk, token t at p0 + t of the one context).
struct pf_rowl {
    const int *pos, *S, *cap;      // [n]: position, key splits (the context's S), the layer's cache capacity
    __half *const *kc, *const *vc; // [n]: the layer's K / V cache of the row's context
};

// ---- mat-mat: decode's k_mv (and k_mv_geglu) over a tile of PF_TT tokens -------------------------------------------
// Thread layout as k_mv (sw lanes a row, rows blockIdx.y * rows-a-block + threadIdx.x / sw); blockIdx.x picks the tile
// of tokens, so consecutive blocks read the same weight rows (L2 hits). Lane sl takes units sl, sl + sw, ... in that
// order and adds each unit's dot into one accumulator per token (the same float sums as row_part / row_part2), then
// row_total per token: the decode step's bits. The tile's unit loop loads each weight unit once for its PF_TT tokens
// (the unit dots of one unit read the same addresses with no store between: the compiler keeps one load).
struct mm_args {
    dmat A, B;        // B: the up matrix of a GeGLU of one type (geglu), dotted in the same loop
    int geglu, sw, n; // n: tokens of the chunk
    float softcap;    // > 0: y = cap * tanh(y / cap)
    const float *x;   // float inputs [n][xs] (float path and F16/BF16/F32 matrices)
    int xs;
    qout xa; // int8 inputs: token t at pf_qout(xa, as, t)
    int as;
    float *y; // outputs y[t * ys + row]
    int ys;
};

// One weight unit held in registers (load), one token's activations for unit u (fetch: the same for every row), and
// their dot: the expressions of unit_dot8 / unit_dot (weights.cuh) split so that a thread dots R rows' units with
// PF_TT tokens' activations, each loaded once (R x PF_TT dots for R + PF_TT loads). Integer sums are exact in any
// order; the float expressions are unit_dot8's, term for term. The generic form (types without a split below: Q4_1,
// Q5_1, Q5_K, F32, rows not a multiple of 8) calls unit_dot8 / unit_dot per token and row (R = 1).
template <int T, bool I8> struct pf_unit {
    static constexpr int R = 1;
    struct act {
        qact x;
        const float *xf;
    };
    const uint8_t *q, *m;
    int u;
    __device__ __forceinline__ void load(const uint8_t *q_, const uint8_t *m_, int u_) { q = q_, m = m_, u = u_; }
    static __device__ __forceinline__ act fetch8(const qact &x, int) { return act{x, NULL}; }
    static __device__ __forceinline__ act fetchf(const float *x, int) {
        act a;
        a.xf = x;
        return a;
    }
    __device__ __forceinline__ float dot8(const act &a) const { return unit_dot8<T>(q, m, u, a.x); }
    __device__ __forceinline__ float dotf(const act &a) const { return unit_dot<T>(q, m, u, a.xf); }
};

template <> struct pf_unit<T_Q4_K, true> { // unit_dot8<T_Q4_K>
    static constexpr int R = 4;
    struct act {
        int4 a0, a1;
        int s0, s1;
        float dk;
    };
    uint32_t lo[4], hi[4];
    float2 dd;
    int sc0, sc1, m0, m1;
    __device__ __forceinline__ void load(const uint8_t *q, const uint8_t *, int u) {
        const int b = u >> 3, i = u & 7, j = i >> 1, hf = i & 1;
        const uint8_t *blk = q + (size_t)b * 144;
        const uint4 hd = *(const uint4 *)blk;
        const uint4 w = *(const uint4 *)(blk + 16 + 32 * j + 16 * hf);
        dd = __half22float2(*(const __half2 *)&hd.x);
        const uint32_t S = j < 2 ? hd.y & 0x3F3F3F3Fu : (hd.w & 0x0F0F0F0Fu) | ((hd.y >> 2) & 0x30303030u);
        const uint32_t Mn = j < 2 ? hd.z & 0x3F3F3F3Fu : ((hd.w >> 4) & 0x0F0F0F0Fu) | ((hd.z >> 2) & 0x30303030u);
        const int k0 = 16 * (j & 1);
        sc0 = (S >> k0) & 0xFF, sc1 = (S >> (k0 + 8)) & 0xFF, m0 = (Mn >> k0) & 0xFF, m1 = (Mn >> (k0 + 8)) & 0xFF;
        const uint32_t ws[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int k = 0; k < 4; k++) lo[k] = ws[k] & 0x0F0F0F0Fu, hi[k] = (ws[k] >> 4) & 0x0F0F0F0Fu;
    }
    static __device__ __forceinline__ act fetch8(const qact &x, int u) {
        const int b = u >> 3, i = u & 7, j = i >> 1, hf = i & 1;
        const int8_t *p = x.qK + 256 * b + 64 * j + 16 * hf;
        act a;
        a.a0 = *(const int4 *)p, a.a1 = *(const int4 *)(p + 32);
        a.s0 =
            dp4a(0x01010101, a.a0.w, dp4a(0x01010101, a.a0.z, dp4a(0x01010101, a.a0.y, dp4a(0x01010101, a.a0.x, 0))));
        a.s1 =
            dp4a(0x01010101, a.a1.w, dp4a(0x01010101, a.a1.z, dp4a(0x01010101, a.a1.y, dp4a(0x01010101, a.a1.x, 0))));
        a.dk = x.dK[b];
        return a;
    }
    __device__ __forceinline__ float dot8(const act &a) const {
        int i0 = dp4a((int)lo[0], a.a0.x, 0);
        i0 = dp4a((int)lo[1], a.a0.y, i0);
        i0 = dp4a((int)lo[2], a.a0.z, i0);
        i0 = dp4a((int)lo[3], a.a0.w, i0);
        int i1 = dp4a((int)hi[0], a.a1.x, 0);
        i1 = dp4a((int)hi[1], a.a1.y, i1);
        i1 = dp4a((int)hi[2], a.a1.z, i1);
        i1 = dp4a((int)hi[3], a.a1.w, i1);
        return a.dk * (dd.x * (float)(sc0 * i0 + sc1 * i1) - dd.y * (float)(m0 * a.s0 + m1 * a.s1));
    }
};

template <> struct pf_unit<T_Q6_K, true> { // unit_dot8<T_Q6_K>
    static constexpr int R = 2;
    struct act {
        int x[4][4];
        int t[4];
        float dk;
    };
    uint32_t w[4][4];
    float d;
    int sc0, sc2, sc4, sc6;
    __device__ __forceinline__ void load(const uint8_t *q, const uint8_t *m, int u) {
        const int b = u >> 2, i = u & 3, h = i >> 1, l = 16 * (i & 1);
        const uint8_t *qb = q + (size_t)b * 192, *mb = m + (size_t)b * 20;
        const uint4 A = *(const uint4 *)(qb + 64 * h + l), C = *(const uint4 *)(qb + 64 * h + 32 + l);
        const uint4 Hh = *(const uint4 *)(qb + 128 + 32 * h + l);
        const uint32_t sw0 = *(const uint32_t *)(mb + 8 * h), sw1 = *(const uint32_t *)(mb + 8 * h + 4);
        d = *(const float *)(mb + 16);
        const int o = 8 * (l >> 4);
        sc0 = (int)(int8_t)(sw0 >> o), sc2 = (int)(int8_t)(sw0 >> (o + 16));
        sc4 = (int)(int8_t)(sw1 >> o), sc6 = (int)(int8_t)(sw1 >> (o + 16));
        const uint32_t aw[4] = {A.x, A.y, A.z, A.w}, cw[4] = {C.x, C.y, C.z, C.w}, hw[4] = {Hh.x, Hh.y, Hh.z, Hh.w};
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[0][k] = (aw[k] & 0x0F0F0F0Fu) | ((hw[k] & 0x03030303u) << 4);
            w[1][k] = (cw[k] & 0x0F0F0F0Fu) | (((hw[k] >> 2) & 0x03030303u) << 4);
            w[2][k] = ((aw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> 4) & 0x03030303u) << 4);
            w[3][k] = ((cw[k] >> 4) & 0x0F0F0F0Fu) | (((hw[k] >> 6) & 0x03030303u) << 4);
        }
    }
    static __device__ __forceinline__ act fetch8(const qact &x, int u) {
        const int b = u >> 2, i = u & 3, h = i >> 1, l = 16 * (i & 1);
        const int8_t *xa = x.qK + 256 * b + 128 * h + l;
        act a;
#pragma unroll
        for (int g = 0; g < 4; g++) {
            const int4 X = *(const int4 *)(xa + 32 * g);
            a.x[g][0] = X.x, a.x[g][1] = X.y, a.x[g][2] = X.z, a.x[g][3] = X.w;
            a.t[g] = dp4a(0x01010101, X.w, dp4a(0x01010101, X.z, dp4a(0x01010101, X.y, dp4a(0x01010101, X.x, 0))));
        }
        a.dk = x.dK[b];
        return a;
    }
    __device__ __forceinline__ float dot8(const act &a) const {
        int i0 = 0, i1 = 0, i2 = 0, i3 = 0;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            i0 = dp4a((int)w[0][k], a.x[0][k], i0);
            i1 = dp4a((int)w[1][k], a.x[1][k], i1);
            i2 = dp4a((int)w[2][k], a.x[2][k], i2);
            i3 = dp4a((int)w[3][k], a.x[3][k], i3);
        }
        return a.dk * d *
               (float)(sc0 * (i0 - 32 * a.t[0]) + sc2 * (i1 - 32 * a.t[1]) + sc4 * (i2 - 32 * a.t[2]) +
                       sc6 * (i3 - 32 * a.t[3]));
    }
};

// legacy blocks: the 8 ints of the token's q8_0 block u, their sum and scale
struct pf_act32 {
    int a[8];
    int s;
    float d0;
};
static __device__ __forceinline__ pf_act32 fetch32(const qact &x, int u) {
    pf_act32 a;
    load_q8_32(x.q0, u, a.a);
    a.s = sum_q8_32(a.a);
    a.d0 = x.d0[u];
    return a;
}

template <> struct pf_unit<T_Q4_0, true> { // unit_dot8<T_Q4_0>
    static constexpr int R = 4;
    typedef pf_act32 act;
    uint4 w;
    float dw;
    __device__ __forceinline__ void load(const uint8_t *q, const uint8_t *m, int u) {
        w = ((const uint4 *)q)[u];
        dw = ((const float *)m)[u];
    }
    static __device__ __forceinline__ act fetch8(const qact &x, int u) { return fetch32(x, u); }
    __device__ __forceinline__ float dot8(const act &a) const {
        return dw * a.d0 * (float)(nib_dot32(w, a.a) - 8 * a.s);
    }
};

template <> struct pf_unit<T_Q5_0, true> { // unit_dot8<T_Q5_0>
    static constexpr int R = 4;
    typedef pf_act32 act;
    uint4 w;
    uint32_t qh;
    float d;
    __device__ __forceinline__ void load(const uint8_t *q, const uint8_t *m, int u) {
        w = ((const uint4 *)q)[u];
        d = ((const float *)m)[2 * u];
        qh = ((const uint32_t *)m)[2 * u + 1];
    }
    static __device__ __forceinline__ act fetch8(const qact &x, int u) { return fetch32(x, u); }
    __device__ __forceinline__ float dot8(const act &a) const {
        return d * a.d0 * (float)(nib5_dot32(w, qh, a.a) - 16 * a.s);
    }
};

template <> struct pf_unit<T_Q8_0, true> { // unit_dot8<T_Q8_0>
    static constexpr int R = 4;
    typedef pf_act32 act;
    int4 w0, w1;
    float dw;
    __device__ __forceinline__ void load(const uint8_t *q, const uint8_t *m, int u) {
        w0 = ((const int4 *)q)[2 * u], w1 = ((const int4 *)q)[2 * u + 1];
        dw = ((const float *)m)[u];
    }
    static __device__ __forceinline__ act fetch8(const qact &x, int u) { return fetch32(x, u); }
    __device__ __forceinline__ float dot8(const act &a) const {
        int s = dp4a(w0.x, a.a[0], 0);
        s = dp4a(w0.y, a.a[1], s), s = dp4a(w0.z, a.a[2], s), s = dp4a(w0.w, a.a[3], s);
        s = dp4a(w1.x, a.a[4], s), s = dp4a(w1.y, a.a[5], s), s = dp4a(w1.z, a.a[6], s), s = dp4a(w1.w, a.a[7], s);
        return dw * a.d0 * (float)s;
    }
};

// 16-bit float rows: the token's 8 values of unit u
struct pf_act8f {
    float4 a, b;
};

template <> struct pf_unit<T_F16, false> { // unit_dot<T_F16>
    static constexpr int R = 4;
    typedef pf_act8f act;
    float2 p0, p1, p2, p3;
    __device__ __forceinline__ void load(const uint8_t *q, const uint8_t *, int u) {
        const uint4 w = ((const uint4 *)q)[u];
        p0 = __half22float2(*(const __half2 *)&w.x), p1 = __half22float2(*(const __half2 *)&w.y);
        p2 = __half22float2(*(const __half2 *)&w.z), p3 = __half22float2(*(const __half2 *)&w.w);
    }
    static __device__ __forceinline__ act fetchf(const float *x, int u) {
        return act{((const float4 *)x)[2 * u], ((const float4 *)x)[2 * u + 1]};
    }
    __device__ __forceinline__ float dotf(const act &x) const {
        const float4 a = x.a, b = x.b;
        return p0.x * a.x + p0.y * a.y + p1.x * a.z + p1.y * a.w + p2.x * b.x + p2.y * b.y + p3.x * b.z + p3.y * b.w;
    }
};

template <> struct pf_unit<T_BF16, false> { // unit_dot<T_BF16>
    static constexpr int R = 4;
    typedef pf_act8f act;
    float f[8];
    __device__ __forceinline__ void load(const uint8_t *q, const uint8_t *, int u) {
        const uint4 w = ((const uint4 *)q)[u];
        f[0] = __uint_as_float(w.x << 16), f[1] = __uint_as_float(w.x & 0xFFFF0000u);
        f[2] = __uint_as_float(w.y << 16), f[3] = __uint_as_float(w.y & 0xFFFF0000u);
        f[4] = __uint_as_float(w.z << 16), f[5] = __uint_as_float(w.z & 0xFFFF0000u);
        f[6] = __uint_as_float(w.w << 16), f[7] = __uint_as_float(w.w & 0xFFFF0000u);
    }
    static __device__ __forceinline__ act fetchf(const float *x, int u) {
        return act{((const float4 *)x)[2 * u], ((const float4 *)x)[2 * u + 1]};
    }
    __device__ __forceinline__ float dotf(const act &x) const {
        const float4 a = x.a, b = x.b;
        return f[0] * a.x + f[1] * a.y + f[2] * a.z + f[3] * a.w + f[4] * b.x + f[5] * b.y + f[6] * b.z + f[7] * b.w;
    }
};

// Rows a thread takes: U::R for a plain mat-mat, half of it (at least 1) for a GeGLU's two matrices.
template <int T, bool I8, bool G> struct pf_rows_of {
    static constexpr int R = G ? (pf_unit<T, I8>::R > 1 ? pf_unit<T, I8>::R / 2 : 1) : pf_unit<T, I8>::R;
};

// Rows row0 + k rb (k < R, clamped to the matrix for the loads) over the tile's tokens: lane sl's units in order,
// each unit of each row loaded once, each token's activations of the unit fetched once for the R rows.
template <int T, bool I8, bool G, int R, int TT>
static __device__ __forceinline__ void pf_rows(const mm_args &a, int row0, int rb, int sl, int sw, int t0,
                                               float (*acc)[TT], float (*acc2)[TT]) {
    typedef pf_unit<T, I8> U;
    const uint8_t *q[R], *m[R], *q1[R], *m1[R];
#pragma unroll
    for (int k = 0; k < R; k++) {
        const int r = min(row0 + k * rb, a.A.N - 1);
        q[k] = a.A.q + (size_t)r * a.A.qrow, m[k] = a.A.m + (size_t)r * a.A.mrow;
        q1[k] = a.B.q + (size_t)r * a.B.qrow, m1[k] = a.B.m + (size_t)r * a.B.mrow;
    }
    const int nu = I8 ? a.A.nunits8 : a.A.nunits;
    for (int u = sl; u < nu; u += sw) {
        U w[R], w2[R];
#pragma unroll
        for (int k = 0; k < R; k++) {
            w[k].load(q[k], m[k], u);
            if (G) w2[k].load(q1[k], m1[k], u);
        }
#pragma unroll
        for (int t = 0; t < TT; t++) {
            const int tt = min(t0 + t, a.n - 1);
            typename U::act x;
            if constexpr (I8) {
                const qout o = pf_qout(a.xa, a.as, tt);
                x = U::fetch8(qact{o.q0, o.d0, o.qK, o.dK}, u);
            } else
                x = U::fetchf(a.x + (size_t)tt * a.xs, u);
#pragma unroll
            for (int k = 0; k < R; k++) {
                if constexpr (I8) {
                    acc[k][t] += w[k].dot8(x);
                    if (G) acc2[k][t] += w2[k].dot8(x);
                } else {
                    acc[k][t] += w[k].dotf(x);
                    if (G) acc2[k][t] += w2[k].dotf(x);
                }
            }
        }
    }
}

// The R rows' sums (row_total per row and token, as k_mv / k_mv_geglu) written out.
template <int T, bool I8, bool G, int R, int TT>
static __device__ __forceinline__ void pf_tile(const mm_args &a, float *wsum) {
    const int sw = a.sw, sl = threadIdx.x % sw, rb = 32 * MV_WARPS / sw;
    const int row0 = blockIdx.y * (R * rb) + threadIdx.x / sw, t0 = blockIdx.x * TT;
    float acc[R][TT], acc2[R][TT];
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < TT; t++) acc[k][t] = 0.0f, acc2[k][t] = 0.0f;
    if (row0 < a.A.N) pf_rows<T, I8, G, R, TT>(a, row0, rb, sl, sw, t0, acc, acc2);
#pragma unroll
    for (int k = 0; k < R; k++) {
        const int row = row0 + k * rb;
#pragma unroll
        for (int t = 0; t < TT; t++) {
            const float s = row_total(acc[k][t], sw, wsum);
            float v;
            if (G) {
                const float u = row_total(acc2[k][t], sw, wsum);
                v = gelu_tanh(s) * u;
            } else
                v = a.softcap > 0.0f ? tanhf(s / a.softcap) * a.softcap : s;
            if (row < a.A.N && sl == 0 && t0 + t < a.n) a.y[(size_t)(t0 + t) * a.ys + row] = v;
        }
    }
}

// One kernel per weight type, path and GeGLU or not (the GeGLU's two matrices need more registers: one kernel for
// both forms would hold the plain form to the GeGLU's occupancy). At most 128 registers (4 blocks an SM): measured
// +6% (Q4_K_M) and +8% (Q4_0) pp512 over ptxas's own choice of up to 168 (2026-12-02, bench/gpu/NOTES.md).
template <int T, bool I8, bool G, int TT> __global__ void __launch_bounds__(32 * MV_WARPS, 4) k_pf_mm(const mm_args a) {
    __shared__ float wsum[MV_WARPS];
    pf_tile<T, I8, G, pf_rows_of<T, I8, G>::R, TT>(a, wsum);
}

// Rows a block of k_pf_mm takes (the grid's y).
static int pf_block_rows(int t, bool i8, bool geglu, int sw) {
    int R = 1;
    if (i8 && (t == T_Q4_K || t == T_Q4_0 || t == T_Q5_0 || t == T_Q8_0)) R = 4;
    if (i8 && t == T_Q6_K) R = 2;
    if (!i8 && (t == T_F16 || t == T_BF16)) R = 4;
    if (geglu) R = R > 1 ? R / 2 : 1;
    return R * (32 * MV_WARPS / sw);
}

typedef void (*mm_kernel)(mm_args);

template <int TT> static mm_kernel mm_pick_tt(int t, bool i8, bool g) {
    // clang-format off
#define MM_Q(T)                                                                                                        \
    case T: return i8 ? (g ? (mm_kernel)k_pf_mm<T, true, true, TT> : (mm_kernel)k_pf_mm<T, true, false, TT>)           \
                      : (g ? (mm_kernel)k_pf_mm<T, false, true, TT> : (mm_kernel)k_pf_mm<T, false, false, TT>);
#define MM_F(T)                                                                                                        \
    case T: return g ? (mm_kernel)k_pf_mm<T, false, true, TT> : (mm_kernel)k_pf_mm<T, false, false, TT>;
    // clang-format on
    switch (t) {
        MM_F(T_F32)
        MM_F(T_F16)
        MM_F(T_BF16)
        MM_F(T_F32 + T_SCALAR)
        MM_F(T_F16 + T_SCALAR)
        MM_F(T_BF16 + T_SCALAR)
        MM_Q(T_Q4_0)
        MM_Q(T_Q4_1)
        MM_Q(T_Q5_0)
        MM_Q(T_Q5_1)
        MM_Q(T_Q8_0)
        MM_Q(T_Q4_K)
        MM_Q(T_Q5_K)
        MM_Q(T_Q6_K)
    }
    return NULL;
#undef MM_Q
#undef MM_F
}

// Tokens a tile for a chunk of n: 8, or the fewest of 1, 2, 4 that hold n (each token's sums are the same in any
// tile: a tile only shares the weight loads among its tokens).
static int pf_tt(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : PF_TT; }

static mm_kernel mm_pick(int t, bool i8, bool g, int tt) {
    return tt == 1   ? mm_pick_tt<1>(t, i8, g)
           : tt == 2 ? mm_pick_tt<2>(t, i8, g)
           : tt == 4 ? mm_pick_tt<4>(t, i8, g)
                     : mm_pick_tt<PF_TT>(t, i8, g);
}

#include "cuda/mma.cuh"

__global__ void k_pf_geglu(float *y, const float *u, size_t n);

static bool is_float_type(int t) { return t == T_F32 || t == T_F16 || t == T_BF16 || t >= T_SCALAR; }

// A k_pf_mma launch past 48 KiB of dynamic shared memory opts in, always to the device's most (optin): the same value
// whatever the launch, so that a context launching the same kernel from another thread never finds it lowered below
// its own need between its set and its launch (setting each launch's own size could). False: it does not fit.
static bool mq_optin(mq_kernel k, size_t sm, int optin) {
    if (sm > (size_t)optin) return false;
    const cudaError_t before = cudaPeekAtLastError(); // an earlier launch's error stays for its check
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) == cudaSuccess) return true;
    if (before == cudaSuccess) cudaGetLastError(); // only this call's error is cleared
    return false;
}

// y = A x for the chunk's n tokens (B: GeGLU with A's type), with lanes a row sw (the decode launch's choice).
static void pf_launch_mm(const pb_cu_ctx *c, const pf_bufs *p, const dmat &A, const dmat *B, int sw, const float *x,
                         int xs, float *y, int ys, int n, float softcap, cudaStream_t s) {
    mm_args a;
    memset(&a, 0, sizeof a);
    a.A = A;
    if (B) a.B = *B, a.geglu = 1;
    a.sw = sw ? sw : 32;
    a.n = n;
    a.softcap = softcap;
    a.x = x;
    a.xs = xs;
    qout b = qout_of(c);
    b.q0 = b.q0 ? p->a0 : NULL;
    b.qK = b.qK ? p->aK : NULL;
    b.d0 = p->d0;
    b.dK = p->dK;
    a.xa = b;
    a.as = p->as;
    a.y = y;
    a.ys = ys;
    const bool i8 = c->g->int8 && !is_float_type(A.type);
    // the tensor-core form where the type has one (a GeGLU as its two matrices, then k_pf_geglu: the same bits)
    const int nt = mq_nt(n), ks = mq_ks(A.N, n, nt, c->g->n_sm, c->g->mma_ks);
    mq_kernel mq = i8 && c->g->mma && n >= c->g->mma_min && (!B || ys == A.N) ? mq_pick(A.type, nt, ks) : NULL;
    const size_t sm = mq ? mq_smem(A.type, A.nunits8, nt, a.sw, ks) : 0;
    if (mq && sm > 48 * 1024 && !mq_optin(mq, sm, c->g->smem_optin)) mq = NULL; // the dp4a form: the same bits
    if (mq && (a.sw & (a.sw - 1)) == 0 && a.sw >= 4 && a.sw <= 64) {
        const dim3 grid((n + 8 * nt - 1) / (8 * nt), (A.N + 64 / ks - 1) / (64 / ks));
        mq<<<grid, 128, sm, s>>>(a);
        if (B) {
            a.A = *B;
            a.y = p->up;
            mq<<<grid, 128, sm, s>>>(a);
            const size_t tot = (size_t)n * A.N;
            k_pf_geglu<<<(unsigned)((tot + 255) / 256), 256, 0, s>>>(y, p->up, tot);
        }
        return;
    }
    const int rb = pf_block_rows(A.type, i8, B != NULL, a.sw);
    const int tt = pf_tt(n);
    mm_pick(A.type, i8, B != NULL, tt)<<<dim3((n + tt - 1) / tt, (A.N + rb - 1) / rb), 32 * MV_WARPS, 0, s>>>(a);
}

// ---- per-token kernels: k_embed, k_add_norm, k_quant, k_geglu of the decode step, blockIdx.x = token --------------

__global__ void k_pf_embed(const dmat E, const int *toks, float scale, float *x, const float *w, float *xn, int d,
                           float eps, const qout qb, int as) {
    __shared__ double sh[32];
    const int t = blockIdx.x, tok = toks[t];
    x += (size_t)t * d, xn += (size_t)t * d;
    const uint8_t *q = E.q + (size_t)tok * E.qrow, *m = E.m + (size_t)tok * E.mrow;
    for (int i = threadIdx.x; i < d; i += blockDim.x) x[i] = deq_elem(E.type, q, m, i) * scale;
    __syncthreads();
    float r = rms_factor(x, d, eps, sh);
    for (int i = threadIdx.x; i < d; i += blockDim.x) xn[i] = (x[i] * r) * w[i];
    if (qb.q0 || qb.qK) {
        __syncthreads();
        quant_act(xn, d, pf_qout(qb, as, t), (int)(threadIdx.x >> 5), (int)(blockDim.x >> 5));
    }
}

// k_add_norm for token blockIdx.x (x, o, xn rows of d; the same sums in the same order, so the same bits).
__global__ void k_pf_add_norm(float *x, const float *o, const float *post_w, const float *next_w, float *xn, int d,
                              float eps, const qout qb, int as) {
    __shared__ double sh[32];
    __shared__ float xs[NORM_NPT * 1024];
    const int t = threadIdx.x, bd = blockDim.x, tk = blockIdx.x;
    x += (size_t)tk * d, o += (size_t)tk * d, xn += (size_t)tk * d;
    const qout qo = pf_qout(qb, as, tk);
    const bool qq = qb.q0 || qb.qK;
    if (d <= NORM_NPT * bd) {
        float ov[NORM_NPT], xv[NORM_NPT], pw[NORM_NPT], nw[NORM_NPT];
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++) {
            const int i = t + k * bd;
            const bool in = i < d;
            ov[k] = in ? o[i] : 0.0f;
            pw[k] = in && post_w ? post_w[i] : 0.0f;
            xv[k] = in ? x[i] : 0.0f;
            nw[k] = in ? next_w[i] : 0.0f;
        }
        float r = 1.0f;
        if (post_w) {
            double ss = 0.0;
#pragma unroll
            for (int k = 0; k < NORM_NPT; k++)
                if (t + k * bd < d) ss += (double)ov[k] * (double)ov[k];
            ss = block_sum(ss, sh);
            r = 1.0f / sqrtf((float)(ss / (double)d) + eps);
        }
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++)
            if (t + k * bd < d) {
                xv[k] += post_w ? (ov[k] * r) * pw[k] : ov[k];
                x[t + k * bd] = xv[k];
            }
        double ss = 0.0;
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++)
            if (t + k * bd < d) ss += (double)xv[k] * (double)xv[k];
        ss = block_sum(ss, sh);
        const float rn = 1.0f / sqrtf((float)(ss / (double)d) + eps);
#pragma unroll
        for (int k = 0; k < NORM_NPT; k++)
            if (t + k * bd < d) {
                const float v = (xv[k] * rn) * nw[k];
                xn[t + k * bd] = v;
                xs[t + k * bd] = v;
            }
        if (qq) {
            __syncthreads();
            quant_act(xs, d, qo, t >> 5, bd >> 5);
        }
        return;
    }
    {
        float r = post_w ? rms_factor(o, d, eps, sh) : 1.0f;
        for (int i = t; i < d; i += bd) x[i] += post_w ? (o[i] * r) * post_w[i] : o[i];
        __syncthreads();
    }
    float r = rms_factor(x, d, eps, sh);
    for (int i = t; i < d; i += bd) xn[i] = (x[i] * r) * next_w[i];
    if (qq) {
        __syncthreads();
        quant_act(xn, d, qo, t >> 5, bd >> 5);
    }
}

// The int8 forms of rows x[t][0..K) (row stride K) for token blockIdx.x; quant_act's blocks are independent, so
// any split of them over warps gives k_quant's bits.
__global__ void k_pf_quant(const float *x, int K, const qout qb, int as) {
    const int t = blockIdx.x;
    quant_act(x + (size_t)t * K, K, pf_qout(qb, as, t), (int)(blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5)),
              (int)(gridDim.y * (blockDim.x >> 5)));
}

static void pf_launch_quant(const pb_cu_ctx *c, const pf_bufs *p, const float *x, int K, int n, cudaStream_t s) {
    if (!c->g->int8 || K < 32) return;
    qout b = qout_of(c);
    b.q0 = b.q0 ? p->a0 : NULL;
    b.qK = b.qK ? p->aK : NULL;
    b.d0 = p->d0;
    b.dK = p->dK;
    const int ny = (K / 32 + 3) / 4;
    k_pf_quant<<<dim3(n, ny), 128, 0, s>>>(x, K, b, p->as);
}

// ---- attention over the chunk ----------------------------------------------------------------------------------
// k_pf_rope_k: token blockIdx.y's key of kv head blockIdx.x roped (q/k norm for Gemma 3) at its position, and its
// value, both as F16 into the chunk's kn / vn (what the decode step writes into the cache slot). The cache itself is
// written after the layer's attention (k_pf_kv_store): in a ring, a later token of the chunk takes the slot of a key
// an earlier token still sees. Gemma 1-3 run k_pf_rope_k<MAX_EPL, false>, the code as before the template; G4 (Gemma
// 4) is k_attn<..., true>'s row write: the key through rope_head (k norm when kn_w is set), V (the raw K projection
// on k_eq_v layers: the caller passes k as v) RMS-normed without weights when vnorm is set; EPL sizes the shared
// rows (head_dim <= 32 EPL).
template <int EPL, bool G4>
__global__ void __launch_bounds__(128)
    k_pf_rope_k(const float *k, const float *v, const float *kn_w, const float *inv, float eps, int p0, const int *rpos,
                int hd, __half *kn, __half *vn, int vnorm) {
    __shared__ float ks[1][32 * EPL], rbuf[32 * EPL];
    __shared__ double rsh[32];
    const int g = blockIdx.x, Hkv = gridDim.x, t = blockIdx.y, pos = rpos ? rpos[t] : p0 + t;
    const size_t row = ((size_t)t * Hkv + g) * hd;
    if constexpr (G4) {
        rope_head(k + row, kn_w, inv, hd, (float)pos, eps, rbuf, rsh, ks[0]);
        float rv = 1.0f;
        if (vnorm) rv = rms_factor(v + row, hd, eps, rsh);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            kn[row + i] = __float2half_rn(ks[0][i]);
            vn[row + i] = __float2half_rn(vnorm ? v[row + i] * rv : v[row + i]);
        }
    } else {
        if (kn_w)
            rope_head(k + row, kn_w, inv, hd, (float)pos, eps, rbuf, rsh, ks[0]);
        else
            rope_heads(k + row, inv, hd, 1, (float)pos, ks);
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            kn[row + i] = __float2half_rn(ks[0][i]);
            vn[row + i] = __float2half_rn(v[row + i]);
        }
    }
}

// k_attn's split pass for token blockIdx.z at position p0 + z (grid Hkv x ceil(S / spb) x n: block y takes splits
// y spb .. y spb + spb - 1 in turn, each as k_attn's block of that split would, so the query is roped once for spb
// splits): the same query rope, the same split of its visible keys, per-warp online softmax and 4-warp merge, into
// that token's part rows. A block whose splits hold no key writes their empty rows ({-inf, 0, ...}, what the pass
// gives without keys) without roping. Keys of positions >= p0 come from the chunk's kn / vn (the values the decode
// step would have written into their slots).
// With a rows table (a batched step: token z is the next one of its own context) the cache, its capacity, the
// position and the key splits are the row's (splits past the row's do nothing), and only the row's own key
// comes from kn / vn (row z).
// Template as k_attn: EPL values a lane (head_dim <= 32 EPL), REP query heads a block (at least the model's n_rep:
// Gemma 1-3 take 2, 4 or 8, as the decode step). G4 (Gemma 4): k_attn<EPL, REP, true>'s split
// pass, per token: nz blocks a kv head (grid Hkv nz x S x n; block x takes kv head x / nz, query heads (x % nz) REP..
// of it, as k_attn's gridDim.z), every query head through rope_head (q norm where qn is set); kc / vc / cap / ring
// and kn / vn are those of the layer whose cache it reads (a KV-shared layer: its producer's).
template <int EPL, int REP, bool G4>
__global__ void __launch_bounds__(128, EPL > 8 ? 1 : REP <= 2 ? 6 : REP <= 4 ? 4 : 1)
    k_pf_attn(const float *q, const __half *kc, const __half *vc, const __half *kn, const __half *vn, const float *qn,
              const float *inv, float eps, float *part, int p0, int n_rep, int hd, int cap, int ring, int window,
              float scale, float softcap, const pf_rowl rt, int nz, int Sc, int spb) {
    __shared__ float sm[4][REP][2 + 32 * EPL];
    __shared__ float qs[REP][32 * EPL], rbuf[32 * EPL];
    __shared__ double rsh[32];
    __shared__ float wM[REP], wW[REP][4];
    const int g = G4 ? (int)blockIdx.x / nz : (int)blockIdx.x;
    const int Hkv = G4 ? (int)gridDim.x / nz : (int)gridDim.x, tk = blockIdx.z;
    const int r0 = G4 ? (int)blockIdx.x % nz * REP : 0, nr = G4 ? min(REP, n_rep - r0) : n_rep; // this block's heads
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int S = Sc, pos = p0 + tk, kb0 = p0; // kb0: the first position whose key is in kn / vn (at row tk0 there)
    const int tk0 = rt.pos ? tk : 0;
    part += (size_t)tk * Hkv * Sc * n_rep * (hd + 2); // a token's rows: Sc splits (a batched step's most)
    if (rt.pos) S = rt.S[tk], pos = kb0 = rt.pos[tk], cap = rt.cap[tk], kc = rt.kc[tk], vc = rt.vc[tk];
    const int s0 = (int)blockIdx.y * spb, s1 = min(S, s0 + spb);
    if (s0 >= S) return;
    const int lo = window > 0 ? max(0, pos - window + 1) : 0, nk = pos - lo + 1, per = (nk + S - 1) / S;
    if (lo + s0 * per > pos) { // no split of this block holds a key
        for (int s = s0; s < s1; s++)
            for (int idx = threadIdx.x; idx < nr * (hd + 2); idx += blockDim.x) {
                const int r = idx / (hd + 2), e = idx % (hd + 2);
                part[(((size_t)g * S + s) * n_rep + r0 + r) * (hd + 2) + e] = e == 0 ? -INFINITY : 0.0f;
            }
        return;
    }
    q += (size_t)tk * Hkv * n_rep * hd;
    if constexpr (G4) {
        for (int r = 0; r < nr; r++)
            rope_head(q + ((size_t)g * n_rep + r0 + r) * hd, qn, inv, hd, (float)pos, eps, rbuf, rsh, qs[r]);
    } else if (qn)
        for (int r = 0; r < n_rep; r++)
            rope_head(q + ((size_t)g * n_rep + r) * hd, qn, inv, hd, (float)pos, eps, rbuf, rsh, qs[r]);
    else
        rope_heads(q + (size_t)g * n_rep * hd, inv, hd, n_rep, (float)pos, qs);
    float qr[REP][EPL];
#pragma unroll
    for (int r = 0; r < REP; r++)
#pragma unroll
        for (int i = 0; i < EPL; i++) {
            const int e = lane + 32 * i;
            qr[r][i] = r < nr && e < hd ? qs[r][e] : 0.0f;
        }
    for (int s = s0; s < s1; s++) {
        const int k0 = lo + s * per, k1 = min(pos, k0 + per - 1);
        float acc[REP][EPL], mx[REP], l[REP];
#pragma unroll
        for (int r = 0; r < REP; r++) {
            mx[r] = -INFINITY;
            l[r] = 0.0f;
#pragma unroll
            for (int i = 0; i < EPL; i++) acc[r][i] = 0.0f;
        }
        for (int k = k0 + w; k <= k1; k += 8) {
            const bool two = k + 4 <= k1;
            const int ka = k, kb = two ? k + 4 : k;
            const size_t ca = ((size_t)g * cap + (ring ? ka % cap : ka)) * hd,
                         cb = ((size_t)g * cap + (ring ? kb % cap : kb)) * hd;
            const size_t na = ((size_t)(ka - kb0 + tk0) * Hkv + g) * hd,
                         nb = ((size_t)(kb - kb0 + tk0) * Hkv + g) * hd;
            const __half *kr0 = ka >= kb0 ? kn + na : kc + ca, *vr0 = ka >= kb0 ? vn + na : vc + ca;
            const __half *kr1 = kb >= kb0 ? kn + nb : kc + cb, *vr1 = kb >= kb0 ? vn + nb : vc + cb;
            float kv[2][EPL], vv[2][EPL];
#pragma unroll
            for (int i = 0; i < EPL; i++) {
                const int e = lane + 32 * i;
                kv[0][i] = e < hd ? __half2float(kr0[e]) : 0.0f;
                vv[0][i] = e < hd ? __half2float(vr0[e]) : 0.0f;
                kv[1][i] = e < hd ? __half2float(kr1[e]) : 0.0f;
                vv[1][i] = e < hd ? __half2float(vr1[e]) : 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
                if (j == 1 && !two) break;
                split_key<EPL, REP>(qr, kv[j], vv[j], nr, scale, softcap, mx, l, acc);
            }
        }
        split_write<EPL, REP>(sm, wM, wW, mx, l, acc, nr, hd,
                              part + (((size_t)g * S + s) * n_rep + r0) * (hd + 2));
        __syncthreads(); // sm and wM / wW are the next split's
    }
}

// merge_heads for kv head blockIdx.x of token blockIdx.y (its int8 forms follow through k_pf_quant); rS (a batched
// step): the row's own key splits, within token rows of S.
__global__ void __launch_bounds__(128)
    k_pf_merge(const float *part, float *att, int n_rep, int hd, int S, const int *rS) {
    __shared__ float wt[MAX_REP][MAX_SPLITS], Ls[MAX_REP];
    extern __shared__ float as[]; // n_rep x hd: merge_heads keeps the merged values there for its quantization
    const int g = blockIdx.x, Hkv = gridDim.x, tk = blockIdx.y;
    const qout none = {NULL, NULL, NULL, NULL};
    merge_heads(part + (size_t)tk * Hkv * S * n_rep * (hd + 2), att + (size_t)tk * Hkv * n_rep * hd, g, n_rep, hd,
                rS ? rS[tk] : S, none, wt, Ls, as);
}

// The chunk's keys and values into their cache slots (token blockIdx.y, kv head blockIdx.x): in a ring only the
// last token of the chunk that lands on a slot writes it. A batched step's rows each write their own cache's slot.
__global__ void k_pf_kv_store(const __half *kn, const __half *vn, __half *kc, __half *vc, int p0, int n, int hd,
                              int cap, int ring, const pf_rowl rt) {
    const int g = blockIdx.x, Hkv = gridDim.x, t = blockIdx.y;
    int pos = p0 + t;
    if (rt.pos)
        pos = rt.pos[t], cap = rt.cap[t], kc = rt.kc[t], vc = rt.vc[t];
    else if (ring && pos + cap <= p0 + n - 1)
        return;
    const int slot = ring ? pos % cap : pos;
    const size_t src = ((size_t)t * Hkv + g) * hd, dst = ((size_t)g * cap + slot) * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) kc[dst + i] = kn[src + i], vc[dst + i] = vn[src + i];
}

__global__ void k_pf_geglu(float *y, const float *u, size_t n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = gelu_tanh(y[i]) * u[i];
}

// ---- Gemma 4's per-token kernels: k_g4_add, k_ple_in, the PLE k_geglu of the decode step, blockIdx = token --------

// k_g4_add for token blockIdx.x (g4_add_row: the same code and block size, the same bits).
__global__ void k_pf_g4_add(float *x, const float *o, const float *post_w, float scale, const float *next_w, float *xn,
                            int d, float eps, const qout qb, int as) {
    __shared__ double sh[32];
    const size_t t = blockIdx.x;
    g4_add_row(x + t * d, o + t * d, post_w, scale, next_w, xn + t * d, d, eps, pf_qout(qb, as, (int)t), sh);
}

// k_ple_in for layer blockIdx.x of token blockIdx.y: pli [n][n_layer][P] (ple_in_chunk, 128 threads as k_ple_in).
__global__ void __launch_bounds__(128) k_pf_ple_in(float *pli, const dmat E, const int *toks, const float *w, int P,
                                                   float ps, float ts, float r2, float eps) {
    __shared__ double sh[32];
    const int l = blockIdx.x, nl = gridDim.x, t = blockIdx.y;
    ple_in_chunk(pli + ((size_t)t * nl + l) * P, E, toks[t], l, w, P, ps, ts, r2, eps, sh);
}

// The PLE gate of layer il for every token: y[t][i] = gelu(y[t][i]) * pli[t][il][i] (k_geglu's expression).
__global__ void k_pf_ple_geglu(float *y, const float *pli, int il, int nl, int P, int n) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)n * P) return;
    const size_t t = i / P, j = i % P;
    y[i] = gelu_tanh(y[i]) * pli[(t * nl + il) * P + j];
}

// ---- the chunk's forward -----------------------------------------------------------------------------------------

static void pf_free(struct pf_bufs *p) {
    if (!p) return;
    if (p->mem) cudaFree(p->mem);
    free(p);
}

// Whether a prompt (batch false) or a batched step (batch.cuh: batch true) takes this path's kernels: PB_CUDA_PREFILL=0
// in the environment (read at each call) keeps the token-by-token steps for both (A/B runs); for Gemma 4 models only,
// PB_CUDA_G4_PREFILL=0 keeps their prompts on token steps and PB_CUDA_G4_BATCH=0 their batches on each row's own
// one-token graph (each the way back if its parity run fails); the norms must take k_add_norm's one-block form (d <=
// NORM_NPT x 1024) and the add + norm must not be fused into the mat-vec's last block (PB_CUDA_FUSE=1: another order
// of sums).
static bool pf_usable(const pb_cu_ctx *c, bool batch) {
    const char *e = getenv("PB_CUDA_PREFILL");
    if (e && atoi(e) == 0) return false;
    if (c->g->g4) { // Gemma 4 (pf_enqueue_g4): per-layer geometry, KV sharing, PLE
        const char *e4 = getenv(batch ? "PB_CUDA_G4_BATCH" : "PB_CUDA_G4_PREFILL");
        if (e4 && atoi(e4) == 0) return false;
    }
    return !c->g->fuse && c->g->hp.n_embd <= NORM_NPT * 1024;
}

// Gemma 4's chunk keys: last[il], the last layer whose attention reads layer il's cache (il itself, or the last
// KV-shared layer with kv_src il), after which the chunk's keys of il go into its cache (k_pf_kv_store); slot[il],
// the kn / vn slot that holds them until then: 0, shared by the layers that only read their own, or one of its own
// for a layer read by later ones (their chunk keys must outlive the layers between). Returns the slots.
static int pf_g4_kv_plan(const pb_cu_model *g, int *slot, int *last) {
    const int nl = g->hp.n_layer;
    for (int il = 0; il < nl; il++) last[il] = il;
    for (int il = 0; il < nl; il++) {
        const int src = g->layers[il].kv_src;
        if (src != il && il > last[src]) last[src] = il;
    }
    int ns = 1;
    for (int il = 0; il < nl; il++) slot[il] = last[il] > il ? ns++ : 0;
    return ns;
}

// Scratch for chunks of up to nc tokens whose attention takes up to S key splits (a prompt: PF_NC and the context's
// S; a batched step: PB_CU_BATCH_MAX rows and MAX_SPLITS). Gemma 4: rows at the layers' maxima (head dim, kv heads,
// MLP width), per-layer inputs, a kn / vn slot a producer of shared KV.
static int pf_alloc(const pb_cu_ctx *c, int nc_, int S, pf_bufs **out, char *err, size_t cap) {
    const pb_cu_desc *hp = &c->g->hp;
    const size_t nc = (size_t)nc_, d = (size_t)hp->n_embd;
    size_t hd = (size_t)hp->head_dim, qd = (size_t)hp->n_head * hd, kvd = (size_t)hp->n_head_kv * hd;
    size_t ff = (size_t)hp->n_ff, P = 0, nslot = 1;
    size_t part = nc * kvd / hd * (size_t)S * (size_t)(hp->n_head / hp->n_head_kv) * (hd + 2) * 4;
    if (c->g->g4) {
        hd = qd = kvd = ff = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            const pb_cu_layer_d *L = &c->g->layers[il];
            const size_t h = (size_t)L->hd, kv = (size_t)L->hkv * h, f = (size_t)L->gate.N;
            hd = h > hd ? h : hd;
            kvd = kv > kvd ? kv : kvd;
            ff = f > ff ? f : ff;
        }
        qd = (size_t)hp->n_head * hd;
        P = (size_t)hp->n_embd_per_layer;
        part = nc * (size_t)hp->n_head * (size_t)S * (hd + 2) * 4; // [nc][kv heads][S][n_rep][hd + 2]
        int slot[MAX_LAYERS], last[MAX_LAYERS];
        nslot = (size_t)pf_g4_kv_plan(c->g, slot, last);
    }
    size_t kmax = d > qd ? d : qd;
    if (ff > kmax) kmax = ff;
    if (P > kmax) kmax = P;
    const size_t as = (kmax + 255) / 256 * 256;
    const size_t sz[] = {nc * d * 4,
                         nc * d * 4,
                         nc * qd * 4,
                         nc * kvd * 4,
                         nc * kvd * 4,
                         nc * qd * 4,
                         nc * d * 4,
                         nc * ff * 4,
                         nc * ff * 4,
                         part,
                         nc * as,
                         nc * as,
                         nc * as / 32 * 4,
                         nc * as / 256 * 4 + 4,
                         nslot * nc * kvd * 2,
                         nslot * nc * kvd * 2,
                         nc * 4,
                         nc * (size_t)hp->n_layer * P * 4,
                         nc * P * 4};
    const int nb = (int)(sizeof sz / sizeof sz[0]);
    size_t total = 0;
    for (int i = 0; i < nb; i++) total += (sz[i] + 255) / 256 * 256;
    size_t fr = 0, tot = 0;
    CU(cudaMemGetInfo(&fr, &tot));
    if (total + ((size_t)128 << 20) > fr)
        return fail(err, cap, ST_MEMLIMIT, "cuda: prefill scratch needs %zu MiB, %zu MiB free", total >> 20, fr >> 20);
    pf_bufs *p = (pf_bufs *)calloc(1, sizeof *p);
    if (!p) return fail(err, cap, ST_NOMEM, "cuda: out of host memory");
    cudaError_t e = cudaMalloc(&p->mem, total);
    if (e != cudaSuccess) {
        free(p);
        return fail(err, cap, ST_MEMLIMIT, "cuda: prefill scratch: %s", cudaGetErrorString(e));
    }
    p->nc = (int)nc;
    p->as = (int)as;
    p->bytes = total;
    p->kvs = nc * kvd;
    void **ptrs[] = {(void **)&p->x,   (void **)&p->xn,   (void **)&p->q,    (void **)&p->k,    (void **)&p->v,
                     (void **)&p->att, (void **)&p->o,    (void **)&p->gate, (void **)&p->up,   (void **)&p->part,
                     (void **)&p->a0,  (void **)&p->aK,   (void **)&p->d0,   (void **)&p->dK,   (void **)&p->kn,
                     (void **)&p->vn,  (void **)&p->toks, (void **)&p->pli,  (void **)&p->ple_g};
    uint8_t *b = (uint8_t *)p->mem;
    for (int i = 0; i < nb; i++) {
        *ptrs[i] = b;
        b += (sz[i] + 255) / 256 * 256;
    }
    *out = p;
    return ST_OK;
}

// A batched step's device tables (batch.cuh): per row pos, S; per layer and row (PB_CU_BATCH_MAX entries a layer) the
// cache pointers and capacities; smax: the largest S of the rows (the attention grid's splits).
struct pf_rowtab {
    const int *pos, *S, *cap;
    __half *const *kc, *const *vc;
    int smax;
};

// ---- Gemma 4's chunk: enqueue_step_g4 (enqueue_ple_in, enqueue_attn_g4, enqueue_ffn_g4) for n tokens at once -------

// The chunk's int8 forms (qout_of's choice of forms, in the chunk buffers).
static qout pf_qb(const pb_cu_ctx *c, const pf_bufs *p) {
    qout qb = qout_of(c);
    qb.q0 = qb.q0 ? p->a0 : NULL;
    qb.qK = qb.qK ? p->aK : NULL;
    qb.d0 = p->d0;
    qb.dK = p->dK;
    return qb;
}

// Layer il's entries of a batched step's rows table (rt NULL: none, a prompt chunk). A KV-shared layer passes its
// producer's index (kv_src): it has no cache of its own (cap 0 in the table), the producer's is the one it reads.
static pf_rowl pf_rowl_of(const pf_rowtab *rt, int il) {
    pf_rowl rl = {NULL, NULL, NULL, NULL, NULL};
    if (rt) {
        const size_t o = (size_t)il * PB_CU_BATCH_MAX;
        rl = {rt->pos, rt->S, rt->cap + o, rt->kc + o, rt->vc + o};
    }
    return rl;
}

// Layer j's chunk keys (slot[j] of kn / vn) into its cache, after the attention of the last layer that reads them
// (with rt: each row's one key into its own context's cache, the row's slot).
static void pf_store_g4(const pb_cu_ctx *c, const pf_bufs *p, int j, const int *slot, int p0, int n,
                        const pf_rowtab *rt, cudaStream_t s) {
    const pb_cu_layer_d *L = &c->g->layers[j];
    const pf_rowl rl = pf_rowl_of(rt, j);
    const size_t o = (size_t)slot[j] * p->kvs;
    k_pf_kv_store<<<dim3(L->hkv, n), 128, 0, s>>>(p->kn + o, p->vn + o, rt ? NULL : c->kc[j], rt ? NULL : c->vc[j], p0,
                                                  n, L->hd, rt ? 0 : c->cap[j], L->swa ? 1 : 0, rl);
}

// Layer il's attention (enqueue_attn_g4): q (and k, v where the layer has its own cache; V = the raw K projection on
// k_eq_v layers) with the lanes a row of the decode launch (one launch where launch_mv makes one: wq's), the chunk's
// keys roped / normed into the kn / vn slot of the layer whose cache it reads, the split pass (the narrow or the wide
// form, as the decode step), the merge, att's int8 forms. With rt (a batched step) each token is its row's next one:
// roped at the row's position, its keys below it from the row's cache of layer kv_src (the table's entries of the
// producer), its own key from row t of the producer's slot, the row's splits (the grid: the rows' largest).
static void pf_attn_g4(const pb_cu_ctx *c, pf_bufs *p, int il, const int *slot, int p0, int n, const pf_rowtab *rt,
                       cudaStream_t s) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    const pb_cu_layer_d *L = &g->layers[il];
    const int d = hp->n_embd, hd = L->hd, hkv = L->hkv, n_rep = hp->n_head / hkv, src = L->kv_src;
    const int S = rt ? rt->smax : c->S;
    const int qd = hp->n_head * hd, kvd = hkv * hd;
    const bool own = src == il, keqv = own && L->wv.N == 0, i8 = g->int8 != 0;
    // launch_mv: one k_mv for q, k (, v) where wk has wq's type and a kernel exists for (wq, wv or wq)
    const bool one = L->wk.type == L->wq.type && mv_pick(L->wq.type, keqv ? L->wq.type : L->wv.type, i8, false);
    pf_launch_mm(c, p, L->wq, NULL, L->wq.sw, p->xn, d, p->q, qd, n, 0.0f, s);
    const float *inv = L->swa ? g->rope_l : g->rope_g;
    __half *kn = p->kn + (size_t)slot[src] * p->kvs, *vn = p->vn + (size_t)slot[src] * p->kvs;
    if (own) {
        pf_launch_mm(c, p, L->wk, NULL, one ? L->wq.sw : L->wk.sw, p->xn, d, p->k, kvd, n, 0.0f, s);
        if (!keqv) pf_launch_mm(c, p, L->wv, NULL, one ? L->wq.sw : L->wv.sw, p->xn, d, p->v, kvd, n, 0.0f, s);
        const float *v = keqv ? p->k : p->v;
        const int *rpos = rt ? rt->pos : NULL;
        if (hd <= 32 * MAX_EPL)
            k_pf_rope_k<MAX_EPL, true>
                <<<dim3(hkv, n), 128, 0, s>>>(p->k, v, L->k_norm, inv, hp->norm_eps, p0, rpos, hd, kn, vn, hp->v_norm);
        else
            k_pf_rope_k<WIDE_EPL, true>
                <<<dim3(hkv, n), 128, 0, s>>>(p->k, v, L->k_norm, inv, hp->norm_eps, p0, rpos, hd, kn, vn, hp->v_norm);
    }
    const pf_rowl rl = pf_rowl_of(rt, src); // the producer's entries: a KV-shared layer's own are empty (cap 0)
    __half *kc = rt ? NULL : c->kc[src], *vc = rt ? NULL : c->vc[src];
    const int cap = rt ? 0 : c->cap[src];
    const int ring = g->layers[src].swa ? 1 : 0, win = L->swa ? hp->sliding_window : 0, spb = g->pf_spb;
    if (hd <= 32 * MAX_EPL)
        k_pf_attn<MAX_EPL, MAX_REP, true><<<dim3(hkv, (S + spb - 1) / spb, n), 128, 0, s>>>(
            p->q, kc, vc, kn, vn, L->q_norm, inv, hp->norm_eps, p->part, p0, n_rep, hd, cap, ring, win, hp->query_scale,
            hp->attn_softcap, rl, 1, S, spb);
    else {
        const int nz = (n_rep + WIDE_REP - 1) / WIDE_REP; // k_attn's gridDim.z
        k_pf_attn<WIDE_EPL, WIDE_REP, true><<<dim3(hkv * nz, (S + spb - 1) / spb, n), 128, 0, s>>>(
            p->q, kc, vc, kn, vn, L->q_norm, inv, hp->norm_eps, p->part, p0, n_rep, hd, cap, ring, win, hp->query_scale,
            hp->attn_softcap, rl, nz, S, spb);
    }
    k_pf_merge<<<dim3(hkv, n), 128, (size_t)n_rep * hd * sizeof(float), s>>>(p->part, p->att, n_rep, hd, S, rl.S);
    pf_launch_quant(c, p, p->att, qd, n, s);
}

// A layer's launches from o to down, into p->o: o, the post-attention add + norm, the GeGLU at width F (one mat-mat
// where gate and up share a type, k_mv_geglu's lanes a row; else two and k_pf_geglu), its int8 forms, down. The
// part of a layer Gemma 1-3 (pf_enqueue) and Gemma 4 (pf_ffn_g4) share; qd: the attention output's width.
static void pf_mlp(const pb_cu_ctx *c, pf_bufs *p, const pb_cu_layer_d *L, int qd, int F, int n, int nt, const qout &qb,
                   cudaStream_t s) {
    const pb_cu_desc *hp = &c->g->hp;
    const int d = hp->n_embd;
    pf_launch_mm(c, p, L->wo, NULL, L->wo.sw, p->att, qd, p->o, d, n, 0.0f, s);
    k_pf_add_norm<<<n, nt, 0, s>>>(p->x, p->o, L->post_attn_norm, L->ffn_norm, p->xn, d, hp->norm_eps, qb, p->as);
    if (L->up.type == L->gate.type) { // k_mv_geglu: gate and up in one loop with gate's lanes a row
        pf_launch_mm(c, p, L->gate, &L->up, L->gate.sw, p->xn, d, p->gate, F, n, 0.0f, s);
    } else { // two mat-vecs and k_geglu
        pf_launch_mm(c, p, L->gate, NULL, L->gate.sw, p->xn, d, p->gate, F, n, 0.0f, s);
        pf_launch_mm(c, p, L->up, NULL, L->up.sw, p->xn, d, p->up, F, n, 0.0f, s);
        const size_t tot = (size_t)n * F;
        k_pf_geglu<<<(unsigned)((tot + 255) / 256), 256, 0, s>>>(p->gate, p->up, tot);
    }
    pf_launch_quant(c, p, p->gate, F, n, s);
    pf_launch_mm(c, p, L->down, NULL, L->down.sw, p->gate, F, p->o, d, n, 0.0f, s);
}

// Layer il after the attention (enqueue_ffn_g4): o, the add + norms, the GeGLU at the layer's width, down, the
// post-FFN norm and residual; with PLE the gate on x, gelu * pli[il], proj, its post norm and residual; the layer
// output scale and the next norm.
static void pf_ffn_g4(const pb_cu_ctx *c, pf_bufs *p, int il, int n, int nt, cudaStream_t s) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    const pb_cu_layer_d *L = &g->layers[il];
    const int d = hp->n_embd, P = hp->n_embd_per_layer, F = L->gate.N, qd = hp->n_head * L->hd;
    const qout qb = pf_qb(c, p);
    pf_mlp(c, p, L, qd, F, n, nt, qb, s);
    const float *next = il + 1 < hp->n_layer ? g->layers[il + 1].attn_norm : g->output_norm;
    const float *post = L->post_ffw_norm;
    if (L->inp_gate.N > 0) {
        k_pf_g4_add<<<n, nt, 0, s>>>(p->x, p->o, post, 1.0f, NULL, p->xn, d, hp->norm_eps, qb, p->as); // x's forms
        pf_launch_mm(c, p, L->inp_gate, NULL, L->inp_gate.sw, p->x, d, p->ple_g, P, n, 0.0f, s);
        const size_t tot = (size_t)n * P;
        k_pf_ple_geglu<<<(unsigned)((tot + 255) / 256), 256, 0, s>>>(p->ple_g, p->pli, il, hp->n_layer, P, n);
        pf_launch_quant(c, p, p->ple_g, P, n, s);
        pf_launch_mm(c, p, L->proj, NULL, L->proj.sw, p->ple_g, P, p->o, d, n, 0.0f, s);
        post = L->ple_post_norm;
    }
    k_pf_g4_add<<<n, nt, 0, s>>>(p->x, p->o, post, L->out_scale, next, p->xn, d, hp->norm_eps, qb, p->as);
}

// Gemma 4's chunk of n tokens at positions p0.. (pf_enqueue's contract): k_pf_embed, the per-layer inputs
// (enqueue_ple_in: x's forms, the model projection, k_ple_in per token, xn's forms again), then per layer the
// attention, the stores of the chunk keys whose last reader it was, the rest of the layer. A KV-shared layer reads
// its producer's cache below p0 and the producer's chunk keys from their slot, which outlives the layers between:
// the producer's cache is written only after its last reader's attention, so no ring slot a reader still needs is
// taken by a later key of the chunk (as k_pf_kv_store's rule for a layer's own keys).
// With rt (a batched step: token t is the next token of row t's context) the same launches run over the rows table:
// a row's "chunk keys" are its one new key, row t of the layer's slot, which the row's KV-shared layers read from the
// producer's slot as the token step's read it from the producer's cache slot (written there by the producer's
// k_attn, the same F16 bytes); keys below the row's position come from its own caches. The deferred stores are kept
// (one plan for both: each row's store writes only its own context's slot pos % cap, a key outside every window of
// the step, so storing right after the producer's attention would give the same bits).
static void pf_enqueue_g4(const pb_cu_ctx *c, pf_bufs *p, int p0, int n, int nt, const pf_rowtab *rt, cudaStream_t s) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    const int d = hp->n_embd, P = hp->n_embd_per_layer, nl = hp->n_layer;
    const qout qb = pf_qb(c, p);
    k_pf_embed<<<n, nt, 0, s>>>(g->tok_embd, (const int *)p->toks, hp->embd_scale, p->x,
                                (const float *)g->layers[0].attn_norm, p->xn, d, hp->norm_eps, qb, p->as);
    if (P > 0) {
        pf_launch_quant(c, p, p->x, d, n, s);
        pf_launch_mm(c, p, g->ple_proj, NULL, g->ple_proj.sw, p->x, d, p->pli, nl * P, n, 0.0f, s);
        const float ps = 1.0f / sqrtf((float)d), ts = sqrtf((float)P), r2 = 1.0f / sqrtf(2.0f); // as enqueue_ple_in
        k_pf_ple_in<<<dim3(nl, n), 128, 0, s>>>(p->pli, g->ple_tok, (const int *)p->toks, g->ple_proj_norm, P, ps, ts,
                                                r2, hp->norm_eps);
        pf_launch_quant(c, p, p->xn, d, n, s);
    }
    int slot[MAX_LAYERS], last[MAX_LAYERS];
    pf_g4_kv_plan(g, slot, last);
    for (int il = 0; il < nl; il++) {
        pf_attn_g4(c, p, il, slot, p0, n, rt, s);
        for (int j = 0; j <= il; j++)
            if (g->layers[j].kv_src == j && last[j] == il) pf_store_g4(c, p, j, slot, p0, n, rt, s);
        pf_ffn_g4(c, p, il, n, nt, s);
    }
}

// Enqueues the chunk of n tokens at positions p0.. (p->toks already on the device) on stream s; leaves each token's
// final-normed state in p->xn and its int8 forms in p->a0 / p->aK. With rt (a batched step), token t is the next
// token of row t's context (rt's tables) and c is any of the rows' contexts (only its model is used).
static void pf_enqueue(const pb_cu_ctx *c, pf_bufs *p, int p0, int n, cudaStream_t s, const pf_rowtab *rt) {
    const pb_cu_model *g = c->g;
    const pb_cu_desc *hp = &g->hp;
    const int d = hp->n_embd, H = hp->n_head, Hkv = hp->n_head_kv, hd = hp->head_dim, n_rep = H / Hkv;
    const int qd = H * hd, kvd = Hkv * hd, ff = hp->n_ff;
    int nt = d >= 1024 ? 1024 : (d + 31) / 32 * 32; /* as enqueue_step */
    if (g->normt && d <= NORM_NPT * g->normt) nt = g->normt;
    if (g->g4) { // Gemma 4: its own chunk (a prompt, or with rt a batched step's rows)
        pf_enqueue_g4(c, p, p0, n, nt, rt, s);
        return;
    }
    qout qb = qout_of(c);
    qb.q0 = qb.q0 ? p->a0 : NULL;
    qb.qK = qb.qK ? p->aK : NULL;
    qb.d0 = p->d0;
    qb.dK = p->dK;
    k_pf_embed<<<n, nt, 0, s>>>(g->tok_embd, (const int *)p->toks, hp->embd_scale, p->x,
                                (const float *)g->layers[0].attn_norm, p->xn, d, hp->norm_eps, qb, p->as);
    for (int il = 0; il < hp->n_layer; il++) {
        const pb_cu_layer_d *L = &g->layers[il];
        // q, k, v: one decode launch (all three with wq's lanes a row) where a kernel exists for the mix (launch_mv)
        const bool one = L->wk.type == L->wq.type && mv_pick(L->wq.type, L->wv.type, g->int8 != 0, false);
        pf_launch_mm(c, p, L->wq, NULL, L->wq.sw, p->xn, d, p->q, qd, n, 0.0f, s);
        pf_launch_mm(c, p, L->wk, NULL, one ? L->wq.sw : L->wk.sw, p->xn, d, p->k, kvd, n, 0.0f, s);
        pf_launch_mm(c, p, L->wv, NULL, one ? L->wq.sw : L->wv.sw, p->xn, d, p->v, kvd, n, 0.0f, s);
        const float *inv = L->swa ? g->rope_l : g->rope_g;
        const int ring = L->swa ? 1 : 0, S = rt ? rt->smax : c->S;
        pf_rowl rl = {NULL, NULL, NULL, NULL, NULL};
        if (rt) {
            const size_t o = (size_t)il * PB_CU_BATCH_MAX;
            rl = {rt->pos, rt->S, rt->cap + o, rt->kc + o, rt->vc + o};
        }
        __half *kc = rt ? NULL : c->kc[il], *vc = rt ? NULL : c->vc[il];
        const int cap = rt ? 0 : c->cap[il];
        k_pf_rope_k<MAX_EPL, false>
            <<<dim3(Hkv, n), 128, 0, s>>>(p->k, p->v, L->k_norm, inv, hp->norm_eps, p0, rl.pos, hd, p->kn, p->vn, 0);
        // query heads a block sized to the model's, as the decode step's k_attn (each head's sums are its own)
        void (*ka)(const float *, const __half *, const __half *, const __half *, const __half *, const float *,
                   const float *, float, float *, int, int, int, int, int, int, float, float, const pf_rowl, int, int,
                   int) =
            g->arep_max  ? k_pf_attn<MAX_EPL, MAX_REP, false>
            : n_rep <= 2 ? k_pf_attn<MAX_EPL, 2, false>
            : n_rep <= 4 ? k_pf_attn<MAX_EPL, 4, false>
                         : k_pf_attn<MAX_EPL, MAX_REP, false>;
        const int spb = g->pf_spb;
        ka<<<dim3(Hkv, (S + spb - 1) / spb, n), 128, 0, s>>>(
            p->q, kc, vc, p->kn, p->vn, L->q_norm, inv, hp->norm_eps, p->part, p0, n_rep, hd, cap, ring,
            L->swa ? hp->sliding_window : 0, hp->query_scale, hp->attn_softcap, rl, 1, S, spb);
        k_pf_merge<<<dim3(Hkv, n), 128, (size_t)n_rep * hd * sizeof(float), s>>>(p->part, p->att, n_rep, hd, S, rl.S);
        k_pf_kv_store<<<dim3(Hkv, n), 128, 0, s>>>(p->kn, p->vn, kc, vc, p0, n, hd, cap, ring, rl);
        pf_launch_quant(c, p, p->att, qd, n, s);
        pf_mlp(c, p, L, qd, ff, n, nt, qb, s);
        const float *next = il + 1 < hp->n_layer ? g->layers[il + 1].attn_norm : g->output_norm;
        k_pf_add_norm<<<n, nt, 0, s>>>(p->x, p->o, L->post_ffw_norm, next, p->xn, d, hp->norm_eps, qb, p->as);
    }
}

// Token t's final-normed state and its int8 forms into the decode buffers (c->xn, c->aq0 ...), then the decode
// step's output mat-vec (the same kernel and lanes: the same logits) into c->logits.
static void pf_output(pb_cu_ctx *c, const pf_bufs *p, int t, cudaStream_t s) {
    const pb_cu_desc *hp = &c->g->hp;
    const size_t d = (size_t)hp->n_embd;
    cudaMemcpyAsync(c->xn, p->xn + (size_t)t * d, d * sizeof(float), cudaMemcpyDeviceToDevice, s);
    const qout o = qout_of(c);
    if (o.q0) {
        cudaMemcpyAsync(c->aq0, p->a0 + (size_t)t * p->as, d, cudaMemcpyDeviceToDevice, s);
        cudaMemcpyAsync(c->ad0, p->d0 + (size_t)t * (p->as / 32), d / 32 * sizeof(float), cudaMemcpyDeviceToDevice, s);
    }
    if (o.qK) {
        cudaMemcpyAsync(c->aqK, p->aK + (size_t)t * p->as, d, cudaMemcpyDeviceToDevice, s);
        cudaMemcpyAsync(c->adK, p->dK + (size_t)t * (p->as / 256), d / 256 * sizeof(float), cudaMemcpyDeviceToDevice,
                        s);
    }
    mv_args a = mv1(c, c->g->output, c->logits, c->xn);
    a.softcap = hp->final_softcap;
    launch_mv(a, c->up, s);
}

// pb_cu_forward for a prompt: chunks of up to PF_NC tokens through pf_enqueue; the last token's logits (every
// token's with all_logits, one output mat-vec each) and the hidden rows come back as from the token steps.
static int pf_forward(pb_cu_ctx *c, int pos, const int32_t *tokens, int n, float *logits, float *hidden, int all_logits,
                      const volatile int *cancel, int *n_done, char *err, size_t cap) {
    const pb_cu_desc *hp = &c->g->hp;
    const size_t V = (size_t)hp->n_vocab, d = (size_t)hp->n_embd;
    pf_bufs *p = (pf_bufs *)c->pf;
    cudaStream_t s = c->stream;
    for (int t0 = 0; t0 < n; t0 += p->nc) {
        const int m = n - t0 < p->nc ? n - t0 : p->nc;
        if (cancel && *cancel) {
            CU(cudaStreamSynchronize(s));
            return fail(err, cap, ST_CANCELLED, "cuda: cancelled after %d tokens", t0);
        }
        CU(cudaStreamSynchronize(s)); // the staging buffer is free again
        for (int i = 0; i < m; i++) c->h_params[i] = tokens[t0 + i];
        CU(cudaMemcpyAsync(p->toks, c->h_params, (size_t)m * sizeof(int), cudaMemcpyHostToDevice, s));
        pf_enqueue(c, p, pos + t0, m, s, NULL);
        CU(cudaGetLastError());
        for (int i = 0; i < m; i++) {
            const int t = t0 + i;
            if (!(all_logits || t == n - 1)) continue;
            pf_output(c, p, i, s);
            if (c->am_want) { // pb_cu_forward_argmax (no logits buffer): the argmax, the logits stay on the device
                enqueue_argmax(c, c->logits, (int)V);
                CU(cudaMemcpyAsync(c->h_am, c->am_out, sizeof(int), cudaMemcpyDeviceToHost, s));
                CU(cudaStreamSynchronize(s));
                *c->am_want = *c->h_am;
                continue;
            }
            CU(cudaMemcpyAsync(c->h_logits, c->logits, V * sizeof(float), cudaMemcpyDeviceToHost, s));
            CU(cudaStreamSynchronize(s));
            memcpy(logits + (all_logits ? (size_t)t * V : 0), c->h_logits, V * sizeof(float));
        }
        if (hidden) {
            CU(cudaMemcpyAsync(hidden + (size_t)t0 * d, p->xn, (size_t)m * d * sizeof(float), cudaMemcpyDeviceToHost,
                               s));
        }
        CU(cudaStreamSynchronize(s));
        *n_done = t0 + m;
    }
    CU(cudaGetLastError());
    return ST_OK;
}
