// batch.cuh -- pb_cu_forward_batch: one decode step for n sequences at once (continuous batching), included by
// backend.cu after prefill.cuh. The n rows go through the prompt path's kernels (prefill.cuh) as one chunk of n
// tokens whose token i is the next token of context i: every weight matrix is read once for all rows (the mat-mats
// k_pf_mm, which have the one-token mat-vecs' bits), and the attention reads each row's own cache, position and key
// splits from device tables. Gemma 4 runs its own chunk (pf_enqueue_g4) over the same tables: per-layer geometry,
// KV-shared layers reading the producer layer's entries, PLE per row. The step is captured once per row count as a
// CUDA graph on the model's batch stream. One or two rows, a model the prompt path does not take (pf_usable),
// PB_CUDA_G4_BATCH=0 on a Gemma 4 model or scratch that does not fit runs each row's own one-token graph on its
// context's stream instead (all rows enqueued before any wait). See docs/CUDA.md.

// The batch scratch of a model (pb_cu_model.bt, under bt_mu): activations of PB_CU_BATCH_MAX rows, the rows' tables
// (device, with a pinned host twin of the same layout), the rows' logits and the argmax's scratch.
struct bt_bufs {
    pf_bufs *p;
    void *mem, *h_mem;
    // the table block (tab_bytes): toks, pos, S [BMAX]; cap, kc, vc [n_layer][BMAX] (a Gemma 4 KV-shared layer's
    // entries are its own: cap 0, no cache; pf_attn_g4 reads its producer's entries instead)
    size_t tab_bytes;
    int *toks, *pos, *S, *cap;         // device tables (toks is also p->toks)
    __half **kc, **vc;                 //
    int *h_toks, *h_pos, *h_S, *h_cap; // the pinned twin
    __half **h_kc, **h_vc;
    int *h_top;    // pinned: the rows' argmax
    float *logits; // [BMAX][n_vocab]
    float *am_v;   // [BMAX][am_blocks]
    int *am_i, *am_cnt, *am_out;
    cudaStream_t stream;
    cudaGraphExec_t graph[2][PB_CU_BATCH_MAX + 1]; // [top][n]
    int gsmax[2][PB_CU_BATCH_MAX + 1];             // the splits each graph was captured for
    const pb_cu_ctx *rows[PB_CU_BATCH_MAX];        // the contexts whose cache tables are on the device
    int n_rows;
};

static void bt_free(struct bt_bufs *b) {
    if (!b) return;
    for (int t = 0; t < 2; t++)
        for (int n = 0; n <= PB_CU_BATCH_MAX; n++)
            if (b->graph[t][n]) cudaGraphExecDestroy(b->graph[t][n]);
    pf_free(b->p);
    if (b->stream) cudaStreamDestroy(b->stream);
    if (b->mem) cudaFree(b->mem);
    if (b->h_mem) cudaFreeHost(b->h_mem);
    free(b);
}

// A context going away: the batch's cache tables must not keep its pointers as "on the device already" (a new
// context may get its host address, with other caches: bt_step compares addresses only).
static void bt_forget(const pb_cu_ctx *c) {
    if (!c->g) return;
    pthread_mutex_lock(&c->g->bt_mu);
    bt_bufs *b = c->g->bt;
    if (b)
        for (int i = 0; i < b->n_rows; i++)
            if (b->rows[i] == c) b->n_rows = 0; // the next step uploads every row's tables again
    pthread_mutex_unlock(&c->g->bt_mu);
}

// The batch scratch: the prompt path's (pf_alloc at PB_CU_BATCH_MAX tokens and MAX_SPLITS splits; for Gemma 4 at the
// layers' maxima of head dim, kv heads and MLP width, with the PLE inputs [B][n_layer][P] and gate [B][P] and a kn /
// vn slot a producer of shared KV), the tables, B rows of logits and the argmax's scratch.
static int bt_alloc(const pb_cu_ctx *c, bt_bufs **out, char *err, size_t cap) {
    const pb_cu_desc *hp = &c->g->hp;
    const size_t B = PB_CU_BATCH_MAX, L = (size_t)hp->n_layer, V = (size_t)hp->n_vocab;
    const size_t nab = (size_t)am_blocks((int)V);
    const size_t ints = 3 * B + L * B, tab = (ints * sizeof(int) + 15) / 16 * 16 + 2 * L * B * sizeof(__half *);
    const size_t lg = (tab + 255) / 256 * 256, amv = lg + (B * V * sizeof(float) + 255) / 256 * 256;
    const size_t total = amv + 2 * B * nab * sizeof(float) + 3 * B * sizeof(int);
    size_t fr = 0, tot = 0;
    CU(cudaMemGetInfo(&fr, &tot));
    if (total + ((size_t)128 << 20) > fr)
        return fail(err, cap, ST_MEMLIMIT, "cuda: batch scratch needs %zu MiB, %zu MiB free", total >> 20, fr >> 20);
    bt_bufs *b = (bt_bufs *)calloc(1, sizeof *b);
    if (!b) return fail(err, cap, ST_NOMEM, "cuda: out of host memory");
    int st;
    if ((st = pf_alloc(c, (int)B, MAX_SPLITS, &b->p, err, cap))) {
        free(b);
        return st;
    }
    cudaError_t e = cudaMalloc(&b->mem, total);
    if (e == cudaSuccess) e = cudaMemset(b->mem, 0, total);
    if (e == cudaSuccess) e = cudaMallocHost(&b->h_mem, tab + B * sizeof(int));
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) e = cudaDeviceSynchronize(); // the zeroed counters before any step reads them
    if (e != cudaSuccess) {
        bt_free(b);
        return fail(err, cap, ST_MEMLIMIT, "cuda: batch scratch: %s", cudaGetErrorString(e));
    }
    b->tab_bytes = tab;
    uint8_t *d = (uint8_t *)b->mem, *h = (uint8_t *)b->h_mem;
    const size_t po = (ints * sizeof(int) + 15) / 16 * 16;
    b->toks = (int *)d, b->pos = b->toks + B, b->S = b->pos + B, b->cap = b->S + B;
    b->kc = (__half **)(d + po), b->vc = b->kc + L * B;
    b->h_toks = (int *)h, b->h_pos = b->h_toks + B, b->h_S = b->h_pos + B, b->h_cap = b->h_S + B;
    b->h_kc = (__half **)(h + po), b->h_vc = b->h_kc + L * B;
    b->h_top = (int *)(h + tab);
    b->logits = (float *)(d + lg);
    b->am_v = (float *)(d + amv);
    b->am_i = (int *)(b->am_v + B * nab);
    b->am_cnt = b->am_i + B * nab;
    b->am_out = b->am_cnt + B;
    b->p->toks = b->toks; // k_pf_embed reads the rows' tokens from the table
    *out = b;
    return ST_OK;
}

// The batched step of n rows on b's stream: the chunk path over the rows' tables, the output mat-mat (the one-token
// step's output mat-vec bits, final soft-cap included) into b->logits and, with top, each row's argmax.
static void bt_enqueue(const pb_cu_ctx *c, bt_bufs *b, int n, int smax, bool top) {
    const pb_cu_model *g = c->g;
    const int d = g->hp.n_embd, V = g->hp.n_vocab;
    const pf_rowtab rt = {b->pos, b->S, b->cap, b->kc, b->vc, smax};
    pf_enqueue(c, b->p, 0, n, b->stream, &rt);
    pf_launch_mm(c, b->p, g->output, NULL, g->output.sw, b->p->xn, d, b->logits, V, n, g->hp.final_softcap, b->stream);
    if (top)
        k_argmax<<<dim3(am_blocks(V), n), AM_T, 0, b->stream>>>(b->logits, V, b->am_v, b->am_i, b->am_cnt, b->am_out);
}

// The rows through the batch scratch (g->bt_mu held, b made): tables up, the graph for n made if missing, launched,
// each row's logits into its context's buffer, top / logits back.
static int bt_step(pb_cu_ctx *const *cs, const int *pos, const int32_t *tokens, int n, float *logits, int32_t *top,
                   bt_bufs *b, char *err, size_t cap) {
    const pb_cu_model *g = cs[0]->g;
    const size_t B = PB_CU_BATCH_MAX, L = (size_t)g->hp.n_layer, V = (size_t)g->hp.n_vocab;
    int smax = 1;
    bool same = n == b->n_rows;
    for (int i = 0; i < n; i++) {
        CU(cudaStreamSynchronize(cs[i]->stream)); // nothing of the row's own is still running
        b->h_toks[i] = tokens[i], b->h_pos[i] = pos[i], b->h_S[i] = cs[i]->S;
        smax = cs[i]->S > smax ? cs[i]->S : smax;
        same = same && b->rows[i] == cs[i];
    }
    CU(cudaMemcpyAsync(b->toks, b->h_toks, 3 * B * sizeof(int), cudaMemcpyHostToDevice, b->stream));
    if (!same) { // other contexts than the last step's: their caches into the tables
        for (int i = 0; i < n; i++) {
            for (size_t il = 0; il < L; il++) {
                b->h_cap[il * B + i] = cs[i]->cap[il];
                b->h_kc[il * B + i] = cs[i]->kc[il], b->h_vc[il * B + i] = cs[i]->vc[il];
            }
            b->rows[i] = cs[i];
        }
        b->n_rows = n;
        CU(cudaMemcpyAsync(b->cap, b->h_cap, b->tab_bytes - 3 * B * sizeof(int), cudaMemcpyHostToDevice, b->stream));
    }
    const int t = top ? 1 : 0;
    cudaGraphExec_t *ge = &b->graph[t][n];
    if (*ge && b->gsmax[t][n] != smax) {
        CU(cudaGraphExecDestroy(*ge));
        *ge = NULL;
    }
    if (!*ge) {
        cudaGraph_t graph;
        CU(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
        bt_enqueue(cs[0], b, n, smax, top != NULL);
        CU(cudaStreamEndCapture(b->stream, &graph));
        cudaError_t e = cudaGraphInstantiate(ge, graph, 0);
        cudaGraphDestroy(graph);
        if (e != cudaSuccess) {
            *ge = NULL;
            return fail(err, cap, ST_INTERNAL, "cuda: batch graph instantiate: %s", cudaGetErrorString(e));
        }
        b->gsmax[t][n] = smax;
    }
    CU(cudaGraphLaunch(*ge, b->stream));
    for (int i = 0; i < n; i++) // each row's logits where pb_cu_logits_download finds them after a one-token step
        CU(cudaMemcpyAsync(cs[i]->logits, b->logits + (size_t)i * V, V * sizeof(float), cudaMemcpyDeviceToDevice,
                           b->stream));
    if (top) CU(cudaMemcpyAsync(b->h_top, b->am_out, (size_t)n * sizeof(int), cudaMemcpyDeviceToHost, b->stream));
    if (logits)
        CU(cudaMemcpyAsync(logits, b->logits, (size_t)n * V * sizeof(float), cudaMemcpyDeviceToHost, b->stream));
    CU(cudaStreamSynchronize(b->stream));
    CU(cudaGetLastError());
    if (top)
        for (int i = 0; i < n; i++) top[i] = b->h_top[i];
    cs[0]->g->bt_steps++;
    return ST_OK;
}

// Whether n rows take the batched step: PB_CUDA_BATCH=0 (read at each call, for A/B runs) keeps every row on its
// own one-token graph; PB_CUDA_BATCH_MIN=k (default 3: two rows measured faster on their own graphs, 921 vs 791
// tok/s on gemma-2-2b Q4_K_M, four about equal): batches of fewer rows do; PB_CUDA_G4_BATCH=0 (read at each call,
// pf_usable): Gemma 4 batches do (its batched step was written without a GPU: the way back if its parity fails).
static bool bt_usable(const pb_cu_ctx *c, int n) {
    const char *e = getenv("PB_CUDA_BATCH"), *m = getenv("PB_CUDA_BATCH_MIN");
    if (e && atoi(e) == 0) return false;
    const int mn = m && atoi(m) >= 1 ? atoi(m) : 3;
    return n >= mn && pf_usable(c, true);
}

// Each row's own one-token graph on its context's stream (the step before the batched one, kept for single rows and
// models the batched step does not take).
static int bt_rows_alone(pb_cu_ctx *const *cs, const int *pos, const int32_t *tokens, int n, float *logits,
                         int32_t *top, char *err, size_t cap) {
    int st;
    for (int i = 0; i < n; i++) { // graphs and argmax scratch, made once a context (before any row runs)
        pb_cu_ctx *c = cs[i];
        if (top && (st = argmax_ready(c, err, cap))) return st;
        if (!top && !c->graph_full && (st = capture(c, true, &c->graph_full, err, cap))) return st;
        CU(cudaStreamSynchronize(c->stream)); // its pinned staging is free
    }
    const size_t V = (size_t)cs[0]->g->hp.n_vocab;
    for (int i = 0; i < n; i++) {
        pb_cu_ctx *c = cs[i];
        c->h_params[0] = tokens[i];
        c->h_params[1] = pos[i];
        CU(cudaMemcpyAsync(c->params, c->h_params, 2 * sizeof(int), cudaMemcpyHostToDevice, c->stream));
        CU(cudaGraphLaunch(top ? c->graph_arg : c->graph_full, c->stream));
        if (top) CU(cudaMemcpyAsync(c->h_am, c->am_out, sizeof(int), cudaMemcpyDeviceToHost, c->stream));
        if (logits) CU(cudaMemcpyAsync(c->h_logits, c->logits, V * sizeof(float), cudaMemcpyDeviceToHost, c->stream));
    }
    for (int i = 0; i < n; i++) {
        pb_cu_ctx *c = cs[i];
        CU(cudaStreamSynchronize(c->stream));
        if (top) top[i] = *c->h_am;
        if (logits) memcpy(logits + (size_t)i * V, c->h_logits, V * sizeof(float));
    }
    CU(cudaGetLastError());
    return ST_OK;
}

extern "C" int pb_cu_forward_batch(pb_cu_ctx *const *cs, const int *pos, const int32_t *tokens, int n, float *logits,
                                   int32_t *top, char *err, size_t cap) {
    if (!cs || !pos || !tokens || n < 1 || n > PB_CU_BATCH_MAX)
        return fail(err, cap, ST_INVALID, "cuda: a batch of %d rows (1..%d)", n, (int)PB_CU_BATCH_MAX);
    for (int i = 0; i < n; i++) {
        const pb_cu_ctx *c = cs[i];
        if (!c) return fail(err, cap, ST_INVALID, "cuda: batch row %d has no context", i);
        if (c->g != cs[0]->g) return fail(err, cap, ST_INVALID, "cuda: batch row %d is of another model", i);
        for (int j = 0; j < i; j++)
            if (cs[j] == c) return fail(err, cap, ST_INVALID, "cuda: batch rows %d and %d share a context", j, i);
        if (pos[i] < 0 || pos[i] >= c->n_ctx)
            return fail(err, cap, ST_INVALID, "cuda: batch row %d at position %d of a %d-position context", i, pos[i],
                        c->n_ctx);
        if (tokens[i] < 0 || tokens[i] >= c->g->hp.n_vocab)
            return fail(err, cap, ST_INVALID, "cuda: batch row %d: token %d of %d", i, (int)tokens[i],
                        c->g->hp.n_vocab);
        if (top && c->no_argmax)
            return fail(err, cap, ST_INVALID, "cuda: the argmax on the device is off (PB_CUDA_ARGMAX=0)");
    }
    pb_cu_model *g = cs[0]->g;
    if (bt_usable(cs[0], n)) {
        pthread_mutex_lock(&g->bt_mu);
        int st = ST_OK;
        if (!g->bt && !g->bt_failed && bt_alloc(cs[0], &g->bt, err, cap)) {
            g->bt_failed = 1; // no room for the batch scratch: the rows step alone from now on (err says why)
            err[0] = 0;
        }
        if (g->bt) st = bt_step(cs, pos, tokens, n, logits, top, g->bt, err, cap);
        const bool done = g->bt != NULL;
        pthread_mutex_unlock(&g->bt_mu);
        if (done) return st;
    }
    return bt_rows_alone(cs, pos, tokens, n, logits, top, err, cap);
}

extern "C" long pb_cu_batch_steps(const pb_cu_ctx *c) {
    if (!c) return 0;
    pthread_mutex_lock(&c->g->bt_mu);
    const long k = c->g->bt_steps;
    pthread_mutex_unlock(&c->g->bt_mu);
    return k;
}
