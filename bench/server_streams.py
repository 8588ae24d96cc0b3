#!/usr/bin/env python3
# server_streams.py -- N streams at once against a running llama.cpp `llama-server` (its /completion endpoint):
# aggregate decode tok/s and per-stream p50 / p99 tok/s at each N, the numbers `pocketbrain bench --parallel` prints
# for our engine, so the two can stand side by side (docs/CUDA.md, "Batched decode"). Standard library only.
#   python3 bench/server_streams.py --url http://127.0.0.1:8080 --n 1,8,32 --tokens 128 [--reps 2] [--json]
# Each stream: one greedy request of --tokens tokens (ignore_eos) on a short prompt of its own; per-stream tok/s is
# the server's own decode rate for it (timings.predicted_per_second: from the first generated token to the last, as
# ours counts t_generate), aggregate = all streams' generated tokens / the wall time from the first request sent to
# the last answer (the prompts are ~20 tokens, so this is decode). p99 = the speed 99% of the streams reached.
import argparse
import json
import sys
import threading
import time
import urllib.request


def one(url, prompt, n, out, i):
    body = json.dumps({"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True,
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


def run(url, n, tokens):
    out = [None] * n
    th = [threading.Thread(target=one, args=(url, "Stream %d: tell me about the sea, the wind and the stars." % i,
                                             tokens, out, i)) for i in range(n)]
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
        runs = [run(a.url, n, a.tokens) for _ in range(a.reps)]
        best = sorted(runs, key=lambda r: r["aggregate"])[len(runs) // 2]  # the median run by aggregate
        res.append(best)
        if best["failed"]:
            print("n=%d: %d streams failed: %s" % (n, best["failed"], best["error"]), file=sys.stderr)
    if a.json:
        print(json.dumps({"url": a.url, "tokens": a.tokens, "reps": a.reps, "results": res}, indent=1))
    else:
        print("| streams | aggregate tok/s | per-stream p50 tok/s | per-stream p99 tok/s |")
        print("|---:|---:|---:|---:|")
        for r in res:
            print("| %d | %.1f | %.1f | %.1f |" % (r["n"], r["aggregate"], r["p50"], r["p99"]))
    return 1 if any(r["failed"] for r in res) else 0


if __name__ == "__main__":
    sys.exit(main())
