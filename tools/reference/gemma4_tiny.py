# gemma4_tiny.py -- tiny random Gemma 4 text models, their transformers logits, and a Gemma 4-layout BPE vocabulary
# with `tokenizers` reference ids (reference data only; runs where torch + transformers 5.17 + tokenizers are).
#
#   python3 tools/reference/gemma4_tiny.py OUT_DIR [CORPUS_JSONL_GZ]
#
# OUT_DIR/tokenizer/: tokenizer.json (BPE with merges, byte fallback, U+2581 for spaces, Gemma 4 control tokens
#   at their ids: <|tool> 46 .. <|"|> 52, <|think|> 98, <|channel> 100, <channel|> 101, <|turn> 105, <turn|> 106,
#   "\n" 107), tokenizer_config.json, ids.jsonl.gz (one line per corpus string, in corpus order:
#   {"ids": encode(text, add_special_tokens=False).ids} and "dec" when decode(ids) != text).
# OUT_DIR/<name>/ for name in gemma4_e2b, gemma4_keqv, gemma4_moe: config.json, model.safetensors (bf16 values,
#   tied embeddings), tokenizer.json + tokenizer_config.json, tokens.bin (int32 LE [N]), logits.f32.f32 (float32
#   LE [N, V], float32 run), logits.f64.f32 (float64 run, rounded), meta.json.
#   e2b: 4:1 sliding:full layers, PLE, KV sharing of the last 5 layers, double-wide MLP on them.
#   keqv: 5:1 layers, attention_k_eq_v full layers, 2 KV heads on sliding and 1 on full layers.
#   moe: MoE block beside the dense MLP (8 experts, top 2), k_eq_v full layers.
# Every model's sliding window (8) is shorter than the token sequence (40).
import gzip
import json
import math
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

V = 2048
N_TOK = 40
CONTROL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>", 46: "<|tool>", 47: "<tool|>",
           48: "<|tool_call>", 49: "<tool_call|>", 50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>',
           98: "<|think|>", 100: "<|channel>", 101: "<channel|>", 105: "<|turn>", 106: "<turn|>"}
NEWLINE_ID = 107
N_RESERVED = 108  # ids 0..107: control tokens, unused slots, "\n"

ROPE = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}}

SPECS = {
    "gemma4_e2b": dict(seed=401, L=10, d=32, H=4, Hkv=1, hd=16, ghd=32, ff=64,
                       types="SSSSF" * 2, extra=dict(hidden_size_per_layer_input=8, vocab_size_per_layer_input=V,
                                                     num_kv_shared_layers=5, use_double_wide_mlp=True)),
    "gemma4_keqv": dict(seed=402, L=6, d=32, H=4, Hkv=2, hd=16, ghd=32, ff=64, types="SSSSSF",
                        extra=dict(attention_k_eq_v=True, num_global_key_value_heads=1,
                                   hidden_size_per_layer_input=0, num_kv_shared_layers=0)),
    "gemma4_moe": dict(seed=403, L=4, d=32, H=4, Hkv=2, hd=16, ghd=32, ff=48, types="SSSF",
                       extra=dict(attention_k_eq_v=True, num_global_key_value_heads=1, hidden_size_per_layer_input=0,
                                  num_kv_shared_layers=0, enable_moe_block=True, num_experts=8, top_k_experts=2,
                                  num_local_experts=8, num_experts_per_tok=2, expert_intermediate_size=16,
                                  moe_intermediate_size=16)),
}


def log(*a):
    print(*a)
    sys.stdout.flush()


# --- tokenizer -------------------------------------------------------------------------------------------------

def build_tokenizer(texts, out_dir):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, trainers
    os.makedirs(out_dir, exist_ok=True)
    # 1. learn merges on the corpus (whitespace as U+2581, no pre-splitting, as Gemma's SentencePiece-style BPE)
    tmp = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tmp.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(vocab_size=V - N_RESERVED - 256 + 200, special_tokens=[], limit_alphabet=150,
                                  show_progress=False, max_token_length=12)
    tmp.train_from_iterator([t for t in texts if t], trainer=trainer)
    tj = json.loads(tmp.to_str())
    learned_vocab = tj["model"]["vocab"]
    learned_merges = tj["model"]["merges"]
    # 2. Gemma 4 layout: control/unused ids, "\n", byte tokens, then learned pieces in rank order
    vocab = {}
    for i in range(N_RESERVED):
        vocab[CONTROL.get(i, "\n" if i == NEWLINE_ID else "<unused%d>" % i)] = i
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(learned_vocab.items(), key=lambda kv: kv[1]):
        if len(vocab) >= V:
            break
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = []
    for m in learned_merges:
        a, b = (m.split(" ", 1) if isinstance(m, str) else m)
        if a in vocab and b in vocab and (a + b) in vocab:
            merges.append((a, b))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    specials = [AddedToken(CONTROL[i], special=True, normalized=False) for i in sorted(CONTROL)]
    specials += [AddedToken("<unused%d>" % i, special=True, normalized=False)
                 for i in range(N_RESERVED) if i not in CONTROL and i != NEWLINE_ID]
    tok.add_special_tokens(specials)
    for i, s in CONTROL.items():
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s), i)
    assert tok.token_to_id("\n") == NEWLINE_ID
    assert tok.get_vocab_size() == V, tok.get_vocab_size()
    from tokenizers import processors
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    cfg = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>",
           "pad_token": "<pad>", "add_bos_token": True, "add_eos_token": False, "model_max_length": 8192,
           "chat_template": "{{ bos_token }}{% for m in messages %}{{ '<|turn>' + (m['role'] if m['role'] != "
                            "'assistant' else 'model') + '\\n' + m['content'] | trim + '<turn|>\\n' }}{% endfor %}"
                            "{% if add_generation_prompt %}{{ '<|turn>model\\n' }}{% endif %}"}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    n_dec = 0
    with gzip.open(os.path.join(out_dir, "ids.jsonl.gz"), "wt", encoding="utf-8") as f:
        for t in texts:
            ids = tok.encode(t, add_special_tokens=False).ids
            row = {"ids": ids}
            d = tok.decode(ids, skip_special_tokens=False)
            if d != t:
                row["dec"] = d
                n_dec += 1
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    log("tokenizer: %d pieces, %d merges, %d strings (%d decode differently)" % (tok.get_vocab_size(), len(merges),
                                                                               len(texts), n_dec))
    return tok


# --- models ----------------------------------------------------------------------------------------------------

def make_config(s):
    lt = ["sliding_attention" if c == "S" else "full_attention" for c in s["types"]]
    kw = dict(vocab_size=V, hidden_size=s["d"], intermediate_size=s["ff"], num_hidden_layers=s["L"],
              num_attention_heads=s["H"], num_key_value_heads=s["Hkv"], head_dim=s["hd"], global_head_dim=s["ghd"],
              hidden_activation="gelu_pytorch_tanh", max_position_embeddings=512, rms_norm_eps=1e-6,
              tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2, sliding_window=8,
              layer_types=lt, rope_parameters=ROPE, final_logit_softcapping=30.0, attention_bias=False)
    kw.update(s["extra"])
    return transformers.Gemma4TextConfig(**kw)


def init_weights(model, s):
    g = torch.Generator().manual_seed(s["seed"])

    def rnd(shape):
        return torch.randn(shape, generator=g, dtype=torch.float64)

    with torch.no_grad():
        named = list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if "layer_scalar" in n]
        for name, p in named:
            if "q_norm" in name or "k_norm" in name:  # scale 1.0 attention: gains ~0.35 keep scores moderate
                v = 0.35 * (1.0 + 0.1 * rnd(p.shape))
            elif "layer_scalar" in name or "per_expert_scale" in name:
                v = 0.6 + 0.8 * torch.rand(p.shape, generator=g, dtype=torch.float64)
            elif "norm" in name or name.endswith("router.scale"):  # Gemma 4 norms multiply by w itself
                v = 1.0 + 0.1 * rnd(p.shape)
                if name == "model.norm.weight":
                    v = v + 1.0
            elif "embed_tokens" in name:
                v = 0.7 * rnd(p.shape)
            elif p.dim() >= 2:
                v = rnd(p.shape) / math.sqrt(p.shape[-1])
            else:
                v = 0.1 * rnd(p.shape)
            p.copy_(v.to(torch.bfloat16).to(p.dtype))


def load_model(cfg, d, dtype):
    torch.manual_seed(0)
    m = transformers.Gemma4ForCausalLM(cfg).to(torch.float32)
    sd = {k: v.to(torch.float32) for k, v in load_file(os.path.join(d, "model.safetensors")).items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
    m.tie_weights()
    m = m.to(dtype).eval()
    if dtype == torch.float64 and hasattr(m, "set_experts_implementation"):
        m.set_experts_implementation("eager")
    return m


def run_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].to(torch.float64).numpy()


def build_model(name, s, tok_dir, out_dir, rng):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    cfg = make_config(s)
    cfg._attn_implementation = "eager"
    torch.manual_seed(s["seed"])
    model = transformers.Gemma4ForCausalLM(cfg).to(torch.float32).eval()
    init_weights(model, s)
    model.save_pretrained(d, safe_serialization=True)
    sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    cj["torch_dtype"] = "bfloat16"
    cj["dtype"] = "bfloat16"
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cj, f, indent=2)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        with open(os.path.join(tok_dir, fn), "rb") as src, open(os.path.join(d, fn), "wb") as dst:
            dst.write(src.read())
    ids = [2] + [int(x) for x in rng.integers(N_RESERVED + 256, V, size=N_TOK - 13)]
    ids += ids[5:17]
    assert len(ids) == N_TOK
    np.asarray(ids, dtype="<i4").tofile(os.path.join(d, "tokens.bin"))
    m32 = load_model(cfg, d, torch.float32)
    l32 = run_logits(m32, ids)
    m64 = load_model(cfg, d, torch.float64)
    l64 = run_logits(m64, ids)
    l32.astype("<f4").tofile(os.path.join(d, "logits.f32.f32"))
    l64.astype("<f4").tofile(os.path.join(d, "logits.f64.f32"))
    seq_max = None
    try:
        with torch.no_grad():
            past, seq = None, []
            for t in ids:
                o = m64(input_ids=torch.tensor([[t]]), past_key_values=past, use_cache=True)
                past = o.past_key_values
                seq.append(o.logits[0, -1].to(torch.float64).numpy())
        seq_max = float(np.abs(np.stack(seq) - l64).max())
    except Exception as e:  # noqa: BLE001 -- the cache path is a sanity check only
        log(name, "cached decode failed:", repr(e))
    meta = dict(name=name, spec={k: v for k, v in s.items()}, n_tokens=N_TOK, vocab=V,
                transformers=transformers.__version__, torch=torch.__version__,
                f32_vs_f64_max=float(np.abs(l32 - l64).max()), seq_vs_batch_f64_max=seq_max,
                top1_f32_f64=int((l32.argmax(1) == l64.argmax(1)).sum()),
                logit_range=[float(l64.min()), float(l64.max())], logit_std=float(l64.std()),
                params=sorted(k for k in sd), layer_types=cfg.layer_types)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
    log(name, json.dumps({k: v for k, v in meta.items() if k != "params"}))
    log(name, "tensors:", ", ".join("%s%s" % (k, list(v.shape)) for k, v in sd.items() if ".layers.0." in k
                                   or ".layers." not in k or ".layers.9." in k or ".layers.5." in k))
    return d


def main():
    out_dir = sys.argv[1]
    corpus = sys.argv[2] if len(sys.argv) > 2 else "tests/data/tokenizer/corpus.jsonl.gz"
    torch.set_num_threads(8)
    texts = []
    with gzip.open(corpus, "rt", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            if "text" in o:
                texts.append(o["text"])
    tok_dir = os.path.join(out_dir, "tokenizer")
    build_tokenizer(texts, tok_dir)
    rng = np.random.default_rng(20261202)
    only = sys.argv[3].split(",") if len(sys.argv) > 3 else list(SPECS)
    for name in only:
        try:
            build_model(name, SPECS[name], tok_dir, out_dir, rng)
        except Exception as e:  # noqa: BLE001 -- report and go on with the next model
            import traceback
            traceback.print_exc()
            log(name, "FAILED:", repr(e))


if __name__ == "__main__":
    main()
