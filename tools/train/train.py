#!/usr/bin/env python3
# train.py -- trains pocketbrain's default model (tokenizer + tiny Gemma 2) from scratch on the GPU machine.
"""Train the embedded default model end to end, in one call on one GPU, stopping by wall clock.

Steps (all seeded):
  1. SentencePiece BPE vocabulary (8192 pieces, byte fallback, Gemma's special ids and whitespace handling),
     plus a Hugging Face tokenizer.json / tokenizer_config.json (Gemma chat template) written from it here.
  2. transformers.Gemma2ForCausalLM from scratch (config in MODEL below), bf16 autocast, AdamW, cosine schedule
     over the wall-clock budget, packed 512-token sequences.
  3. Held-out perplexity with transformers in float32 (TF32 off), defined exactly like `pocketbrain perplexity`:
     the text is tokenized with special-token parsing and no BOS; it is cut into floor(n / ctx) non-overlapping
     chunks of ctx tokens; each chunk is fed as [BOS] + chunk[0 .. ctx-2], so position p predicts chunk[p];
     the second half (p = ctx/2 .. ctx-1) of every chunk is scored; ppl = exp(mean NLL).
  4. Greedy answers for the held-out questions (and a multi-turn follow-up), float32.
  Weights come back as float16 (model.safetensors): the eval above runs on exactly those rounded weights.

Outputs in --out (at most 8 files, each < 16 MiB): hf.tar.gz (config, tokenizer files), weights.partN (the
float16 model.safetensors split in pieces: `cat weights.part* > model.safetensors`), results.json, train.log,
ref_logits.f32 (float32 logits of a reference prompt, row-major [n_tokens][n_vocab]).

The tokenizer part runs without torch: `python3 train.py --tokenizer-only --out DIR` (for checks on a CPU).
"""
import argparse
import gzip
import io
import json
import math
import os
import random
import re
import sys
import tarfile
import time

T0 = time.time()
SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
PAD, EOS, BOS, UNK, SOT, EOT = range(6)
SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")
PLAIN_KINDS = ("wn_page", "jargon_text", "devil_text")

MODEL = dict(vocab_size=8192, hidden_size=512, intermediate_size=1024, num_hidden_layers=6, num_attention_heads=4,
             num_key_value_heads=2, head_dim=64, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=512,
             initializer_range=0.02, rms_norm_eps=1e-6, pad_token_id=PAD, eos_token_id=EOS, bos_token_id=BOS,
             tie_word_embeddings=True, attention_bias=False, attention_dropout=0.0, query_pre_attn_scalar=64,
             sliding_window=128, final_logit_softcapping=30.0, attn_logit_softcapping=50.0)

# Gemma's turn format; a system message is folded into the first user turn (written for this project).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages and messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] | trim + '\n\n' %}{% set msgs = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set msgs = messages %}{% endif %}"
    "{% for m in msgs %}"
    "{% if m['role'] == 'assistant' or m['role'] == 'model' %}{% set role = 'model' %}{% else %}{% set role = 'user' %}{% endif %}"
    "{% if loop.first %}{% set text = prefix + m['content'] | trim %}{% else %}{% set text = m['content'] | trim %}{% endif %}"
    "<start_of_turn>{{ role }}\n{{ text }}<end_of_turn>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def log(msg):
    line = f"[{time.time() - T0:7.1f}s] {msg}"
    print(line, flush=True)
    if LOG_FILE:
        with open(LOG_FILE, "a") as f:
            f.write(line + "\n")


LOG_FILE = None


# ---- data -----------------------------------------------------------------------------------------------------------

def read_corpus(path):
    docs = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            o = json.loads(line)
            docs.append((o["k"], o["t"]))
    return docs


# ---- tokenizer ------------------------------------------------------------------------------------------------------

def train_tokenizer(docs, out_dir, seed, threads, max_lines):
    import sentencepiece as spm
    rng = random.Random(seed)
    lines = []
    for _, t in docs:
        for ln in SPECIAL_RE.sub("\n", t).split("\n"):
            if ln.strip():
                lines.append(ln)
    rng.shuffle(lines)
    lines = lines[:max_lines]
    log(f"tokenizer: training on {len(lines)} lines ({sum(len(l) for l in lines) / 1e6:.1f} MB)")
    prefix = os.path.join(out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=prefix, model_type="bpe", vocab_size=MODEL["vocab_size"],
        byte_fallback=True, pad_id=PAD, eos_id=EOS, bos_id=BOS, unk_id=UNK, pad_piece="<pad>", eos_piece="<eos>",
        bos_piece="<bos>", unk_piece="<unk>", control_symbols=["<start_of_turn>", "<end_of_turn>"],
        split_digits=True, add_dummy_prefix=False, remove_extra_whitespaces=False, allow_whitespace_only_pieces=True,
        normalization_rule_name="identity", character_coverage=0.9999, num_threads=threads,
        max_sentence_length=16384, shuffle_input_sentence=False, seed_sentencepiece_size=1000000,
        minloglevel=2)
    os.remove(prefix + ".vocab")
    os.replace(prefix + ".model", os.path.join(out_dir, "tokenizer.model"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out_dir, "tokenizer.model"))
    for i, s in enumerate(SPECIALS):
        assert sp.id_to_piece(i) == s, (i, sp.id_to_piece(i))
    assert sp.get_piece_size() == MODEL["vocab_size"]
    return sp


def write_hf_tokenizer(sp, out_dir):
    """tokenizer.json (BPE with byte fallback, merges derived from the SentencePiece scores) + tokenizer_config.json."""
    n = sp.get_piece_size()
    vocab = {sp.id_to_piece(i): i for i in range(n)}
    normal = [i for i in range(n) if not (sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i))]
    rank = {i: r for r, i in enumerate(sorted(normal, key=lambda i: (-sp.get_score(i), i)))}
    merges = []
    for i in normal:
        p = sp.id_to_piece(i)
        for k in range(1, len(p)):
            l, r = p[:k], p[k:]
            if l in vocab and r in vocab and vocab[l] in rank and vocab[r] in rank:
                merges.append((rank[i], vocab[l], vocab[r], l, r))
    merges.sort()
    added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, s in enumerate(SPECIALS)]
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": None,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<bos>", "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [BOS], "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[m[3], m[4]] for m in merges]}}
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    cfg = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
           "unk_token": "<unk>", "pad_token": "<pad>", "model_max_length": MODEL["max_position_embeddings"],
           "tokenizer_class": "GemmaTokenizer", "clean_up_tokenization_spaces": False,
           "spaces_between_special_tokens": False, "sp_model_kwargs": {}, "use_default_system_prompt": False,
           "added_tokens_decoder": {str(a["id"]): {k: v for k, v in a.items() if k != "id"} for a in added},
           "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"],
           "chat_template": CHAT_TEMPLATE}
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
                   "additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]}, f, indent=1)
    return len(merges)


def encode_texts(sp, texts, threads):
    """Tokenizes texts with special-token parsing (the markers become their ids), no BOS. Returns lists of ids."""
    segs, plan = [], []
    for t in texts:
        parts = SPECIAL_RE.split(t)
        p = []
        for k, s in enumerate(parts):
            if k % 2 == 1:
                p.append(SPECIALS.index(s))
            elif s:
                p.append(-1 - len(segs))
                segs.append(s)
        plan.append(p)
    try:
        enc = sp.encode(segs, num_threads=threads)
    except TypeError:
        enc = sp.encode(segs)
    out = []
    for p in plan:
        ids = []
        for x in p:
            if x >= 0:
                ids.append(x)
            else:
                ids.extend(enc[-1 - x])
        out.append(ids)
    return out


# ---- model ----------------------------------------------------------------------------------------------------------

def make_model(torch):
    import transformers
    from transformers import Gemma2Config, Gemma2ForCausalLM
    kw = dict(MODEL)
    try:
        cfg = Gemma2Config(**kw, rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    except TypeError:
        cfg = Gemma2Config(**kw, rope_theta=10000.0)
    cfg.use_cache = False
    try:
        model = Gemma2ForCausalLM._from_config(cfg, attn_implementation="eager")
    except Exception as e:  # noqa: BLE001 - older/newer API spelling
        log(f"_from_config failed ({e}); setting _attn_implementation")
        cfg._attn_implementation = "eager"
        model = Gemma2ForCausalLM(cfg)
    log(f"transformers {transformers.__version__}, attn={getattr(model.config, '_attn_implementation', '?')}, "
        f"layer_types={getattr(model.config, 'layer_types', None)}")
    return model


def lr_at(frac, peak, warm_frac, final_ratio):
    if frac < warm_frac:
        return peak * frac / warm_frac
    f = min(1.0, (frac - warm_frac) / (1 - warm_frac))
    return peak * (final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * f)))


def perplexity(torch, model, tokens, ctx, batch, device):
    """See the module docstring. Returns (ppl, per-chunk [sum_nll, count] list, n_tokens_scored)."""
    n_chunks = len(tokens) // ctx
    first = ctx // 2
    chunks = []
    for c in range(n_chunks):
        toks = tokens[c * ctx:(c + 1) * ctx]
        chunks.append(([BOS] + toks[:-1], toks))
    per = []
    with torch.no_grad():
        for b in range(0, n_chunks, batch):
            inp = torch.tensor([x for x, _ in chunks[b:b + batch]], device=device)
            tgt = torch.tensor([y for _, y in chunks[b:b + batch]], device=device)
            logits = model(input_ids=inp, use_cache=False).logits.float()
            lp = torch.log_softmax(logits[:, first:, :], dim=-1)
            nll = -lp.gather(-1, tgt[:, first:, None])[..., 0]
            for row in nll.double().sum(dim=1).tolist():
                per.append([row, ctx - first])
    tot = sum(p[0] for p in per)
    cnt = sum(p[1] for p in per)
    return math.exp(tot / cnt), per, cnt


def greedy(torch, model, ids, max_new, device):
    out = []
    x = list(ids)
    with torch.no_grad():
        for _ in range(max_new):
            logits = model(input_ids=torch.tensor([x], device=device), use_cache=False).logits[0, -1].float()
            t = int(torch.argmax(logits))
            if t in (EOS, EOT):
                break
            out.append(t)
            x.append(t)
    return out


def package(hf, out, results):
    """Small files in a tarball, the float16 weights split into < 16 MiB parts."""
    with tarfile.open(os.path.join(out, "hf.tar.gz"), "w:gz") as tf:
        for name in sorted(os.listdir(hf)):
            if name != "model.safetensors":
                tf.add(os.path.join(hf, name), arcname="hf/" + name)
    blob = open(os.path.join(hf, "model.safetensors"), "rb").read()
    part = 15 * 1024 * 1024
    for k in range(0, len(blob), part):
        with open(os.path.join(out, f"weights.part{k // part}"), "wb") as f:
            f.write(blob[k:k + part])
    results["weights_bytes"] = len(blob)
    log(f"packaged: {sorted(os.listdir(out))}")


# ---- main -----------------------------------------------------------------------------------------------------------

def main():
    global LOG_FILE
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=".carry-train/corpus.jsonl.gz")
    ap.add_argument("--heldout", default="tests/data/train/heldout.txt")
    ap.add_argument("--questions", default="tests/data/train/questions.txt")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/train-out"))
    ap.add_argument("--work", default="/tmp/pb-train")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 4)
    ap.add_argument("--tok-lines", type=int, default=600000)
    ap.add_argument("--train-until", type=float, default=500.0, help="stop training at this many s after start")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--ctx", type=int, default=256, help="perplexity chunk size")
    ap.add_argument("--tokenizer-only", action="store_true")
    ap.add_argument("--max-steps", type=int, default=0, help="0 = by wall clock only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    hf = os.path.join(args.work, "hf")
    os.makedirs(hf, exist_ok=True)
    LOG_FILE = os.path.join(args.out, "train.log")
    results = {"model": MODEL, "seed": args.seed}

    def save_results():
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)

    docs = read_corpus(args.data)
    log(f"corpus: {len(docs)} documents")
    sp = train_tokenizer(docs, hf, args.seed, args.threads, args.tok_lines)
    n_merges = write_hf_tokenizer(sp, hf)
    results["tokenizer"] = {"pieces": sp.get_piece_size(), "merges": n_merges,
                            "first_ids": [sp.id_to_piece(i) for i in range(8)],
                            "byte_0x0A": sp.piece_to_id("<0x0A>")}
    log(f"tokenizer: {results['tokenizer']}")
    heldout_text = open(args.heldout, encoding="utf-8").read()
    held_tokens = encode_texts(sp, [heldout_text], args.threads)[0]
    results["heldout_tokens"] = len(held_tokens)

    # tokenizer.json must give the same ids as SentencePiece (checked on every held-out segment).
    try:
        from tokenizers import Tokenizer
        tk = Tokenizer.from_file(os.path.join(hf, "tokenizer.json"))
        segs = [s for s in SPECIAL_RE.split(heldout_text) if s and s not in SPECIALS]
        bad = 0
        for s in segs:
            if tk.encode(s, add_special_tokens=False).ids != sp.encode(s):
                bad += 1
        results["tokenizer_json_check"] = {"segments": len(segs), "mismatches": bad}
        log(f"tokenizer.json vs sentencepiece: {bad} mismatches in {len(segs)} segments")
    except Exception as e:  # noqa: BLE001
        results["tokenizer_json_check"] = {"error": repr(e)}
        log(f"tokenizer.json check failed: {e!r}")
    save_results()
    if args.tokenizer_only:
        with tarfile.open(os.path.join(args.out, "hf.tar.gz"), "w:gz") as tf:
            tf.add(hf, arcname="hf")
        return 0

    import numpy as np
    import torch
    import torch.nn.functional as F
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    device = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    ids = encode_texts(sp, [t for _, t in docs], args.threads)
    stream = []
    for (kind, _), x in zip(docs, ids):
        stream.append(BOS)
        stream.extend(x)
        if kind in PLAIN_KINDS:
            stream.append(EOS)
    data = np.asarray(stream, dtype=np.int32)
    n_seq = len(data) // args.seq
    data = torch.from_numpy(data[: n_seq * args.seq].reshape(n_seq, args.seq).astype(np.int64))
    results["train_tokens"] = int(len(stream))
    log(f"data: {len(stream)} tokens, {n_seq} sequences of {args.seq}")
    data = data.to(device)

    model = make_model(torch).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    results["n_params"] = n_params
    log(f"model: {n_params / 1e6:.2f}M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    g = torch.Generator(device="cpu")
    g.manual_seed(args.seed)
    perm = torch.randperm(n_seq, generator=g)
    pos, epoch, step = 0, 0, 0
    t_start = time.time()
    budget = args.train_until - (t_start - T0)
    log(f"training: budget {budget:.0f}s")
    model.train()
    loss_ema = None
    while True:
        frac = (time.time() - t_start) / budget
        if frac >= 1.0 or (args.max_steps and step >= args.max_steps):
            break
        lr = lr_at(frac, args.lr, 0.03, 0.1)
        for grp in opt.param_groups:
            grp["lr"] = lr
        if pos + args.batch > n_seq:
            perm = torch.randperm(n_seq, generator=g)
            pos, epoch = 0, epoch + 1
        batch = data[perm[pos:pos + args.batch].to(device)]
        pos += args.batch
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=batch[:, :-1], use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 50 == 0 or step == 1:
            lv = loss.item()
            loss_ema = lv if loss_ema is None else 0.9 * loss_ema + 0.1 * lv
            el = time.time() - t_start
            log(f"step {step} epoch {epoch} loss {lv:.4f} lr {lr:.2e} "
                f"{step * args.batch * (args.seq - 1) / el / 1e3:.0f}k tok/s")
    torch.cuda.synchronize()
    train_s = time.time() - t_start
    results.update(steps=step, epochs=epoch + pos / n_seq, train_seconds=round(train_s, 1),
                   tokens_seen=step * args.batch * (args.seq - 1), final_loss=loss.item(),
                   gpu=torch.cuda.get_device_name(0), torch=torch.__version__)
    log(f"trained {step} steps in {train_s:.0f}s, last loss {loss.item():.4f}")
    save_results()

    # Round to float16 (what comes back), evaluate those weights in float32.
    model.eval()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.half().float())
    model.config.use_cache = False
    model.half().save_pretrained(hf, safe_serialization=True)
    model.float()
    package(hf, args.out, results)
    save_results()
    ppl, per, cnt = perplexity(torch, model, held_tokens, args.ctx, 64, device)
    results["heldout_ppl"] = {"ctx": args.ctx, "scored": "second half of each chunk", "ppl": ppl,
                              "tokens_scored": cnt, "chunks": len(per), "per_chunk": per}
    log(f"held-out perplexity (transformers, float32, ctx {args.ctx}): {ppl:.4f} over {cnt} tokens")
    save_results()

    # Reference logits for parity checks of the C forward pass.
    prompt = "<start_of_turn>user\nWhat does 'harbor' mean?<end_of_turn>\n<start_of_turn>model\n"
    pids = [BOS] + encode_texts(sp, [prompt], 1)[0]
    with torch.no_grad():
        lg = model(input_ids=torch.tensor([pids], device=device), use_cache=False).logits[0].float().cpu()
    lg.numpy().astype("<f4").tofile(os.path.join(args.out, "ref_logits.f32"))
    results["ref_logits"] = {"prompt": prompt, "ids": pids, "shape": list(lg.shape)}

    samples = []
    qs = [q.strip() for q in open(args.questions, encoding="utf-8") if q.strip()]
    for q in ["What does 'harbor' mean?"] + qs:
        p1 = [BOS] + encode_texts(sp, [f"<start_of_turn>user\n{q}<end_of_turn>\n<start_of_turn>model\n"], 1)[0]
        a1 = greedy(torch, model, p1, 96, device)
        p2 = p1 + a1 + encode_texts(sp, ["<end_of_turn>\n<start_of_turn>user\nUse it in a sentence.<end_of_turn>\n"
                                         "<start_of_turn>model\n"], 1)[0]
        a2 = greedy(torch, model, p2, 64, device)
        samples.append({"q": q, "a": sp.decode(a1), "follow_up": "Use it in a sentence.", "a2": sp.decode(a2)})
        log(f"Q: {q}\nA: {samples[-1]['a']}\n  > {samples[-1]['a2']}")
    results["samples"] = samples

    # transformers' own tokenizer + chat template, as a cross-check of the files we ship.
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(hf)
        msgs = [{"role": "user", "content": "What does 'harbor' mean?"}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        hids = tok(text, add_special_tokens=False)["input_ids"]
        results["hf_tokenizer_check"] = {"class": type(tok).__name__, "template": text, "ids_equal": hids == pids}
        log(f"AutoTokenizer: {results['hf_tokenizer_check']}")
    except Exception as e:  # noqa: BLE001
        results["hf_tokenizer_check"] = {"error": repr(e)}
        log(f"AutoTokenizer check failed: {e!r}")
    save_results()

    results["total_seconds"] = round(time.time() - T0, 1)
    save_results()
    log(f"done in {time.time() - T0:.0f}s; out: {sorted(os.listdir(args.out))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
