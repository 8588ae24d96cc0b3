# make_tiny_models.py -- builds tiny random Gemma 1/2/3 HF models and their transformers logits (reference data only).
#
# Runs where torch + transformers are installed (the team's GPU machine; CPU math is used for determinism):
#   python3 tools/reference/make_tiny_models.py OUT_DIR [TOKENIZER_DIR]
# For each architecture (gemma, gemma2, gemma3) it writes OUT_DIR/<arch>/:
#   config.json, model.safetensors (bf16 weights, tied embeddings), tokenizer.json, tokenizer_config.json
#   tokens.bin         int32 LE [N]           the fixed token sequence (BOS first)
#   logits.f32.f32     float32 LE [N, 4096]   transformers, eager attention, float32 weights+activations, CPU
#   logits.f64.f32     float32 LE [N, 4096]   same model run in float64 (HF keeps its float32 islands), rounded
#   meta.json          hparams, seeds, versions, f32-vs-f64 max|d|
# Weights are stored as bf16 so the files stay small; both runs upcast them exactly. The tests convert each
# folder with `pocketbrain convert` and compare our logits with logits.f32.f32.
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import save_file

VOCAB = 4096
N_TOK = 40

# Shapes vary head counts, GQA ratio and head_dim; windows are shorter than the sequence.
SPECS = {
    "gemma": dict(n_layer=3, d=32, ff=80, H=4, Hkv=1, hd=16, window=0, seed=101),
    "gemma2": dict(n_layer=4, d=32, ff=64, H=4, Hkv=2, hd=12, window=8, seed=202),
    "gemma3": dict(n_layer=7, d=48, ff=96, H=3, Hkv=1, hd=20, window=8, seed=303),
}


def make_config(arch, s):
    common = dict(
        vocab_size=VOCAB, hidden_size=s["d"], intermediate_size=s["ff"], num_hidden_layers=s["n_layer"],
        num_attention_heads=s["H"], num_key_value_heads=s["Hkv"], head_dim=s["hd"],
        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=512, rms_norm_eps=1e-6,
        tie_word_embeddings=True, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    if arch == "gemma":
        return transformers.GemmaConfig(rope_theta=10000.0, **common)
    if arch == "gemma2":
        lt = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(s["n_layer"])]
        return transformers.Gemma2Config(rope_theta=10000.0, query_pre_attn_scalar=s["hd"],
                                         sliding_window=s["window"], layer_types=lt,
                                         attn_logit_softcapping=50.0, final_logit_softcapping=30.0, **common)
    lt = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(s["n_layer"])]
    extra = dict(query_pre_attn_scalar=s["hd"], sliding_window=s["window"], layer_types=lt,
                 attn_logit_softcapping=None, final_logit_softcapping=None)
    try:  # transformers 5: per-layer-type rope parameters
        cfg = transformers.Gemma3TextConfig(rope_parameters={
            "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 8.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, **extra, **common)
    except TypeError:  # transformers 4 names
        cfg = transformers.Gemma3TextConfig(rope_theta=1000000.0, rope_local_base_freq=10000.0,
                                            rope_scaling={"rope_type": "linear", "factor": 8.0}, **extra, **common)
    return cfg


def model_class(arch):
    return {"gemma": transformers.GemmaForCausalLM, "gemma2": transformers.Gemma2ForCausalLM,
            "gemma3": transformers.Gemma3ForCausalLM}[arch]


def init_weights(model, s):
    """Random weights with a scale that makes attention, softcaps and top-1 meaningful (HF's 0.02 init gives
    near-uniform logits). Values are rounded to bf16 (stored dtype)."""
    g = torch.Generator().manual_seed(s["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.1  # HF stores w, used as 1 + w
                if name == "model.norm.weight":
                    v = v + 1.0  # final norm gain ~2 -> logits std ~ 2*sqrt(d)
            elif "embed_tokens" in name:
                v = torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.7
            else:
                fan_in = p.shape[1]
                gain = 1.6 if ("q_proj" in name or "k_proj" in name) else 1.0
                v = torch.randn(p.shape, generator=g, dtype=torch.float64) * (gain / math.sqrt(fan_in))
            p.copy_(v.to(torch.bfloat16).to(p.dtype))


def describe_rope(model):
    out = {}
    for name, buf in model.named_buffers():
        if "inv_freq" in name:
            out[name] = [float(x) for x in buf.flatten()[:3]]
    return out


def run_logits(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].to(torch.float64).numpy()


def main():
    out_dir = sys.argv[1]
    tok_dir = sys.argv[2] if len(sys.argv) > 2 else None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(4)
    rng = np.random.default_rng(20261129)
    summary = {}
    for arch, s in SPECS.items():
        d = os.path.join(out_dir, arch)
        os.makedirs(d, exist_ok=True)
        cfg = make_config(arch, s)
        cfg._attn_implementation = "eager"
        torch.manual_seed(s["seed"])
        model = model_class(arch)(cfg).to(torch.float32).eval()
        init_weights(model, s)
        model.save_pretrained(d, safe_serialization=True)
        # Store bf16 (exact: values are on the bf16 grid) to keep the folder small.
        sd = {k: v.to(torch.bfloat16).contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
        save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(d, "config.json")) as f:
            cj = json.load(f)
        cj["torch_dtype"] = "bfloat16"
        cj["dtype"] = "bfloat16"
        if arch == "gemma3":  # also the legacy (transformers 4 / hub checkpoint) rope keys for converters
            cj.setdefault("rope_theta", 1000000.0)
            cj.setdefault("rope_local_base_freq", 10000.0)
            cj.setdefault("rope_scaling", {"rope_type": "linear", "factor": 8.0})
            cj.setdefault("sliding_window_pattern", 6)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cj, f, indent=2)
        gc = os.path.join(d, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
        if tok_dir:
            for fn in ("tokenizer.json", "tokenizer_config.json"):
                if os.path.exists(os.path.join(tok_dir, fn)):
                    shutil.copy(os.path.join(tok_dir, fn), os.path.join(d, fn))

        # Fixed tokens: BOS, random ids, then a repeat of an earlier span (gives sharp attention).
        ids = [2] + [int(x) for x in rng.integers(4, VOCAB, size=N_TOK - 13)]
        ids += ids[5:17]
        assert len(ids) == N_TOK
        np.asarray(ids, dtype="<i4").tofile(os.path.join(d, "tokens.bin"))

        # Reload the saved weights into a fresh float32 model (what the converter sees), eager attention.
        from safetensors.torch import load_file

        def load(dtype):
            torch.manual_seed(0)
            m = model_class(arch)(cfg).to(torch.float32)
            missing, unexpected = m.load_state_dict(
                {k: v.to(torch.float32) for k, v in load_file(os.path.join(d, "model.safetensors")).items()},
                strict=False)
            assert not unexpected and all("lm_head" in k for k in missing), (missing, unexpected)
            m.tie_weights()
            m = m.to(dtype).eval()
            assert next(m.parameters()).dtype == dtype
            assert torch.equal(m.lm_head.weight, m.model.embed_tokens.weight)
            return m

        m32 = load(torch.float32)
        l32 = run_logits(m32, ids)
        m64 = load(torch.float64)
        l64 = run_logits(m64, ids)
        l32.astype("<f4").tofile(os.path.join(d, "logits.f32.f32"))
        l64.astype("<f4").tofile(os.path.join(d, "logits.f64.f32"))
        # One token at a time through HF's cache (sanity of HF itself).
        with torch.no_grad():
            past = None
            seq = []
            for i, t in enumerate(ids):
                o = m32(input_ids=torch.tensor([[t]]), past_key_values=past, use_cache=True)
                past = o.past_key_values
                seq.append(o.logits[0, -1].to(torch.float64).numpy())
            seq = np.stack(seq)
        meta = dict(arch=arch, spec=s, n_tokens=N_TOK, vocab=VOCAB, transformers=transformers.__version__,
                    torch=torch.__version__, attn_implementation=m32.config._attn_implementation,
                    f32_vs_f64_max=float(np.abs(l32 - l64).max()), f32_vs_f64_mean=float(np.abs(l32 - l64).mean()),
                    seq_vs_batch_max=float(np.abs(seq - l32).max()),
                    top1_f32_f64=int((l32.argmax(1) == l64.argmax(1)).sum()),
                    logit_range=[float(l32.min()), float(l32.max())], logit_std=float(l32.std()),
                    rope=describe_rope(m32),
                    rope_cfg=str(getattr(m32.config, "rope_parameters", None) or getattr(m32.config, "rope_scaling", None)),
                    layer_types=getattr(m32.config, "layer_types", None))
        with open(os.path.join(d, "meta.json"), "w") as f:
            json.dump(meta, f, indent=2)
        summary[arch] = meta
        print(arch, json.dumps(meta))
        sys.stdout.flush()
    # Without rounding to bf16 storage f32 == f32; nothing else to do.
    return summary


if __name__ == "__main__":
    main()
