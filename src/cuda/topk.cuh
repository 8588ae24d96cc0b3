// topk.cuh -- the best M logits on the device (sparse sampling: pb_sampler_sample_top's input), included by backend.cu
//
// The order is pb_sampler's canonical one: value descending, id ascending, NaN counting as -inf and -0 as +0. It is
// one unsigned 64-bit key a value (tk_key: the value's bits made monotonic above, the id reversed below; larger is
// better), so ties and NaN need no special case and the result is one exact set in one exact order, whatever the
// block split. k_topk sorts keys in shared memory (bitonic, descending): each block the keys of its TK_CHUNK logits,
// writing its best mp (a power of two >= M) to part; the last block to finish (a counter, zero between launches, as
// k_argmax) merges those lists, TK_SMEM keys at a time beside the best mp so far, and writes M ids with their raw
// logits, and the raw logits of the gathered ids (the bias and penalty ids sampling also reads).

#define TK_T         1024      // threads of a k_topk block
#define TK_CHUNK     4096      // logits a block sorts in the first stage
#define TK_SMEM      8192      // keys of the shared sort buffer (64 KiB, dynamic shared memory)
#define TK_MAXM      128       // the most ids a call returns (PB_SAMPLER_TOP_MAX) and the most it gathers
#define TK_MAX_CHECK (1 << 20) // the most values pb_cu_top_check takes

struct tk_gather {
    int n;
    int id[TK_MAXM];
};

static __device__ __forceinline__ unsigned long long tk_key(float v, int id) {
    if (v != v) v = -INFINITY;
    unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)u << 32) | (unsigned)~(unsigned)id; // never 0: padding (0) sorts below every key
}

// Sorts s[0..L) descending (L a power of two <= TK_SMEM), all threads of the block taking part.
static __device__ void tk_sort(unsigned long long *s, int L) {
    for (int k = 2; k <= L; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < L / 2; i += blockDim.x) {
                const int lo = 2 * i - (i & (j - 1)), hi = lo + j; // i = q j + r: lo = 2 q j + r
                const unsigned long long a = s[lo], b = s[hi];
                // the pairs of a k-run sort descending where lo's k bit is clear, ascending where set; the final
                // run (k = L) is all descending
                if (((lo & k) == 0) ? a < b : a > b) s[lo] = b, s[hi] = a;
            }
            __syncthreads();
        }
}

static __device__ __forceinline__ int tk_pow2(int m) {
    int p = 32;
    while (p < m) p <<= 1;
    return p;
}

// ids / vals[0..m) = the m best of x[0..n) in the canonical order (vals the raw x[id]), gv[i] = x[g.id[i]].
// part: gridDim.x * tk_pow2(m) keys; cnt: zero between launches. Dynamic shared memory: TK_SMEM keys.
__global__ void __launch_bounds__(TK_T) k_topk(const float *x, int n, int m, tk_gather g, unsigned long long *part,
                                               int *cnt, int *ids, float *vals, float *gv) {
    extern __shared__ unsigned long long tks[];
    __shared__ bool last;
    const int mp = tk_pow2(m), b0 = blockIdx.x * TK_CHUNK;
    int L = TK_CHUNK; // the stage-1 sort: this block's logits (the last block's fewer), padded to a power of two
    while (L / 2 >= n - b0 && L > mp) L >>= 1;
    for (int i = threadIdx.x; i < L; i += blockDim.x)
        tks[i] = b0 + i < n && i < TK_CHUNK ? tk_key(x[b0 + i], b0 + i) : 0;
    __syncthreads();
    tk_sort(tks, L);
    for (int i = threadIdx.x; i < mp; i += blockDim.x) part[(size_t)blockIdx.x * mp + i] = i < L ? tks[i] : 0;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(cnt, 1) == (int)gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    // the last block: tks[0..mp) the best so far, each round the next TK_SMEM - mp keys of part beside them
    const int total = gridDim.x * mp, room = TK_SMEM - mp;
    for (int i = threadIdx.x; i < mp; i += blockDim.x) tks[i] = 0;
    for (int p0 = 0; p0 < total; p0 += room) {
        const int nk = total - p0 < room ? total - p0 : room;
        int R = 2 * mp;
        while (R < mp + nk) R <<= 1;
        __syncthreads();
        for (int i = mp + threadIdx.x; i < R; i += blockDim.x) tks[i] = i - mp < nk ? __ldcg(part + p0 + i - mp) : 0;
        __syncthreads();
        tk_sort(tks, R);
    }
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int id = (int)~(unsigned)(tks[i] & 0xffffffffu);
        ids[i] = id;
        vals[i] = x[id];
    }
    for (int i = threadIdx.x; i < g.n; i += blockDim.x) gv[i] = x[g.id[i]];
    if (threadIdx.x == 0) cnt[0] = 0;
}

static int tk_blocks(int n) { return (n + TK_CHUNK - 1) / TK_CHUNK; }

// The top-K scratch of a context (once): the blocks' lists, the counter, the result and its pinned host copy.
static int tk_ready(pb_cu_ctx *c, char *err, size_t cap) {
    if (c->tk_mem) return ST_OK;
    const int nv = c->g->hp.n_vocab, nb = tk_blocks(nv > TK_MAX_CHECK ? nv : TK_MAX_CHECK); // the test hook's too
    CU(cudaFuncSetAttribute(k_topk, cudaFuncAttributeMaxDynamicSharedMemorySize, TK_SMEM * 8));
    const size_t bytes = (size_t)nb * TK_MAXM * 8 + 256 + 3 * TK_MAXM * 4;
    CU(cudaMalloc(&c->tk_mem, bytes));
    CU(cudaMemset(c->tk_mem, 0, bytes));
    c->tk_part = (unsigned long long *)c->tk_mem;
    c->tk_cnt = (int *)(c->tk_part + (size_t)nb * TK_MAXM);
    c->tk_out = c->tk_cnt + 64; // ids, vals, gathered vals: TK_MAXM each, one copy back
    CU(cudaMallocHost(&c->h_tk, 3 * TK_MAXM * 4));
    return ST_OK;
}

// k_topk over x[0..n) on the context's stream, the result copied into ids / vals / gvals.
static int tk_run(pb_cu_ctx *c, const float *x, int n, int m, const int32_t *gather, int ng, int32_t *ids, float *vals,
                  float *gvals, char *err, size_t cap) {
    tk_gather g;
    g.n = ng;
    for (int i = 0; i < ng; i++) g.id[i] = gather[i];
    k_topk<<<tk_blocks(n), TK_T, TK_SMEM * 8, c->stream>>>(
        x, n, m, g, c->tk_part, c->tk_cnt, c->tk_out, (float *)c->tk_out + TK_MAXM, (float *)c->tk_out + 2 * TK_MAXM);
    CU(cudaGetLastError());
    CU(cudaMemcpyAsync(c->h_tk, c->tk_out, 3 * TK_MAXM * 4, cudaMemcpyDeviceToHost, c->stream));
    CU(cudaStreamSynchronize(c->stream));
    memcpy(ids, c->h_tk, (size_t)m * 4);
    memcpy(vals, c->h_tk + TK_MAXM, (size_t)m * 4);
    if (ng) memcpy(gvals, c->h_tk + 2 * TK_MAXM, (size_t)ng * 4);
    return ST_OK;
}

static int tk_args(int n, int m, const int32_t *gather, int ng, char *err, size_t cap) {
    if (m < 1 || m > TK_MAXM || m > n)
        return fail(err, cap, ST_INVALID, "cuda: top %d of %d logits (1..%d, at most the count)", m, n, TK_MAXM);
    if (ng < 0 || ng > TK_MAXM || (ng && !gather))
        return fail(err, cap, ST_INVALID, "cuda: %d gathered ids (0..%d)", ng, TK_MAXM);
    for (int i = 0; i < ng; i++)
        if (gather[i] < 0 || gather[i] >= n)
            return fail(err, cap, ST_INVALID, "cuda: gathered id %d outside 0..%d", gather[i], n - 1);
    return ST_OK;
}

extern "C" int pb_cu_has_logits_top(const pb_cu_ctx *c) { return c && !c->no_topk; }

extern "C" int pb_cu_logits_top(pb_cu_ctx *c, int m, const int32_t *gather, int ng, int32_t *ids, float *vals,
                                float *gvals, char *err, size_t cap) {
    if (c->no_topk) return fail(err, cap, ST_INVALID, "cuda: the top-K on the device is off (PB_CUDA_TOPK=0)");
    const int nv = c->g->hp.n_vocab;
    int st = tk_args(nv, m, gather, ng, err, cap);
    if (st || (st = tk_ready(c, err, cap))) return st;
    return tk_run(c, c->logits, nv, m, gather, ng, ids, vals, gvals, err, cap);
}

extern "C" int pb_cu_top_check(pb_cu_ctx *c, const float *x, int n, int m, const int32_t *gather, int ng, int32_t *ids,
                               float *vals, float *gvals, char *err, size_t cap) {
    if (n < 1 || n > TK_MAX_CHECK) return fail(err, cap, ST_INVALID, "cuda: top-K check of %d values", n);
    int st = tk_args(n, m, gather, ng, err, cap);
    if (st || (st = tk_ready(c, err, cap))) return st;
    float *d = NULL; // a test hook: its own buffer, so the logits stay as they were
    CU(cudaMalloc(&d, (size_t)n * sizeof(float)));
    cudaError_t e = cudaMemcpyAsync(d, x, (size_t)n * sizeof(float), cudaMemcpyHostToDevice, c->stream);
    st = e == cudaSuccess ? tk_run(c, d, n, m, gather, ng, ids, vals, gvals, err, cap)
                          : fail(err, cap, ST_INTERNAL, "cuda: top-K check: %s", cudaGetErrorString(e));
    cudaFree(d);
    return st;
}
