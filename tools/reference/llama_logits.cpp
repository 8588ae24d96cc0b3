// llama_logits.cpp -- all-position logits of a token file with libllama (reference data for the Gemma 4 quantization test).
// Built under /tmp by gemma4_llama_quant.sh against a llama.cpp build; never built into the repo.
#include "llama.h"
#include <cstdio>
#include <vector>
int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: dump MODEL TOKENS.bin OUT.f32\n"); return 2; }
    FILE *f = fopen(argv[2], "rb"); std::vector<int32_t> t(4096); size_t n = fread(t.data(), 4, t.size(), f); fclose(f); t.resize(n);
    llama_backend_init();
    auto mp = llama_model_default_params(); mp.n_gpu_layers = 0;
    llama_model *m = llama_model_load_from_file(argv[1], mp); if (!m) return 1;
    auto cp = llama_context_default_params(); cp.n_ctx = 512; cp.n_batch = 512; cp.n_ubatch = 512; cp.n_threads = 2; cp.n_threads_batch = 2;
    llama_context *c = llama_init_from_model(m, cp); if (!c) return 1;
    llama_batch b = llama_batch_init((int)n, 0, 1);
    for (size_t i = 0; i < n; i++) { b.token[i] = t[i]; b.pos[i] = (int)i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1; }
    b.n_tokens = (int)n;
    if (llama_decode(c, b)) return 1;
    int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *o = fopen(argv[3], "wb");
    for (size_t i = 0; i < n; i++) fwrite(llama_get_logits_ith(c, (int)i), 4, V, o);
    fclose(o); fprintf(stderr, "wrote %zu x %d\n", n, V);
    llama_batch_free(b); llama_free(c); llama_model_free(m); return 0;
}
