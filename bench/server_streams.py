#!/usr/bin/env python3
# server_streams.py -- N streams at once against a running server: aggregate decode tok/s and per-stream p50 / p99
# tok/s at each N, the numbers `pocketbrain bench --parallel` prints for our engine, so the two can stand side by side
# (docs/CUDA.md, "Batched decode"). Standard library only.
#   python3 bench/server_streams.py --url http://127.0.0.1:8080 --n 1,8,32 --tokens 128 [--reps 2] [--json]
#       [--api llama|openai] [--temperature 0] [--ignore-eos]
# --api llama (default): llama.cpp's `llama-server` /completion, one request a stream (greedy unless --temperature,
# ignore_eos); per-stream tok/s is the server's own decode rate (timings.predicted_per_second: from the first
# generated token to the last, as ours counts t_generate).
# --api openai: POST /v1/completions with "stream": true (any OpenAI-compatible server: `pocketbrain serve`, and
# llama-server too, so both are measured the same way, by the client): per-stream tok/s = (completion tokens - 1) /
# the time from the first streamed token to the last (usage.completion_tokens, from stream_options.include_usage, else
# the count of chunks with text);
# --ignore-eos adds llama-server's "ignore_eos" (pocketbrain has no such field and the random synth models' <eos> is
# 1 token of 256,000). aggregate = all streams' generated tokens / the wall time from the first request sent to the
# last answer (the prompts are ~20 tokens, so this is decode). p99 = the speed 99% of the streams reached.
import argparse
import json
import sys
import threading
import time
import urllib.request


def one_openai(url, prompt, n, out, i, temp, ignore_eos):
    req_body = {"prompt": prompt, "max_tokens": n, "temperature": temp, "stream": True,
                "stream_options": {"include_usage": True}}
    if ignore_eos:
        req_body["ignore_eos"] = True
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(req_body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        t_first = t_last = None
        n_gen = n_chunks = 0
        with urllib.request.urlopen(req, timeout=600) as r:
            for line in r:
                line = line.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                j = json.loads(data)
                if j.get("usage"):
                    n_gen = int(j["usage"].get("completion_tokens", 0))
                if any(c.get("text") for c in j.get("choices", [])):
                    n_chunks += 1
                    t_last = time.monotonic()
                    if t_first is None:
                        t_first = t_last
        if n_gen == 0:  # no usage in the stream: one token a chunk (llama-server streams so)
            n_gen = n_chunks
        rate = (n_gen - 1) / (t_last - t_first) if t_first is not None and t_last > t_first and n_gen > 1 else 0.0
        out[i] = (n_gen, rate, None if n_gen > 0 else "no tokens in the stream")
    except Exception as e:  # a failed stream is reported, not counted
        out[i] = (0, 0.0, str(e))


def one(url, prompt, n, out, i, temp, ignore_eos):
    body = json.dumps({"prompt": prompt, "n_predict": n, "temperature": temp, "ignore_eos": True,
                       "cache_prompt": False}).encode()
    req = urllib.request.Request(url + "/completion", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            j = json.load(r)
        t = j.get("timings", {})
        out[i] = (int(t.get("predicted_n", 0)), float(t.get("predicted_per_second", 0.0)), None)
    except Exception as e:  # a failed stream is reported, not counted
        out[i] = (0, 0.0, str(e))


def quantile(v, q):
    v = sorted(v)
    k = int(q * (len(v) - 1) + 0.5)
    return v[min(max(k, 0), len(v) - 1)] if v else 0.0


def run(url, n, tokens, api="llama", temp=0.0, ignore_eos=False):
    out = [None] * n
    fn = one_openai if api == "openai" else one
    th = [threading.Thread(target=fn, args=(url, "Stream %d: tell me about the sea, the wind and the stars." % i,
                                            tokens, out, i, temp, ignore_eos)) for i in range(n)]
    t0 = time.monotonic()
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    errs = [o[2] for o in out if o[2]]
    rates = [o[1] for o in out if not o[2]]
    gen = sum(o[0] for o in out if not o[2])
    return {"n": n, "aggregate": gen / wall if wall > 0 else 0.0, "p50": quantile(rates, 0.5),
            "p99": quantile(rates, 0.01), "failed": len(errs), "error": errs[0] if errs else None}


def main():
    ap = argparse.ArgumentParser(description="N streams at once against a llama-server: aggregate and per-stream tok/s")
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--n", default="1,8,32")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--api", choices=["llama", "openai"], default="llama")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true")
    a = ap.parse_args()
    try:
        ns = [int(x) for x in a.n.split(",")]
        if any(x < 1 for x in ns) or a.tokens < 1 or a.reps < 1:
            raise ValueError
    except ValueError:
        print("server_streams.py: --n takes positive integers (1,8,32); --tokens and --reps positive", file=sys.stderr)
        return 2
    res = []
    for n in ns:
        runs = [run(a.url, n, a.tokens, a.api, a.temperature, a.ignore_eos) for _ in range(a.reps)]
        best = sorted(runs, key=lambda r: r["aggregate"])[len(runs) // 2]  # the median run by aggregate
        res.append(best)
        if best["failed"]:
            print("n=%d: %d streams failed: %s" % (n, best["failed"], best["error"]), file=sys.stderr)
    if a.json:
        print(json.dumps({"url": a.url, "api": a.api, "temperature": a.temperature, "tokens": a.tokens,
                          "reps": a.reps, "results": res}, indent=1))
    else:
        print("| streams | aggregate tok/s | per-stream p50 tok/s | per-stream p99 tok/s |")
        print("|---:|---:|---:|---:|")
        for r in res:
            print("| %d | %.1f | %.1f | %.1f |" % (r["n"], r["aggregate"], r["p50"], r["p99"]))
    return 1 if any(r["failed"] for r in res) else 0


if __name__ == "__main__":
    sys.exit(main())
