#!/usr/bin/env python3
"""Decode throughput of an OpenAI-compatible server (seedctl serve, vLLM,
SGLang) at several concurrency levels. Python's standard library only.

    python3 decode_bench.py --url http://127.0.0.1:8000 --model NAME \
        --concurrency 1,64 --max-tokens 64

For each level N, N requests run at once, each a fresh completion of
--max-tokens tokens (ignore_eos, temperature 1), --rounds times; reported
per level: completion tokens/s over the level's wall time, the median
request's seconds per token, and errors. Prints one JSON object.
"""
import argparse
import json
import sys
import threading
import time
import urllib.request


def one(url, model, prompt, max_tokens, seed, out, i):
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 1.0,
                       "seed": seed, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            resp = json.load(r)
        n = resp.get("usage", {}).get("completion_tokens", 0)
        out[i] = (n, time.perf_counter() - t0, None)
    except Exception as e:  # noqa: BLE001 - reported, not raised
        out[i] = (0, time.perf_counter() - t0, str(e))


def level(a, n):
    toks, per_tok, errors, wall = 0, [], [], 0.0
    for r in range(a.rounds):
        out = [None] * n
        ths = [threading.Thread(target=one, args=(a.url, a.model, a.prompt, a.max_tokens, 1000 * r + i, out, i))
               for i in range(n)]
        t0 = time.perf_counter()
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        wall += time.perf_counter() - t0
        for k, s, e in out:
            toks += k
            if e:
                errors.append(e)
            elif k:
                per_tok.append(s / k)
    per_tok.sort()
    return {"concurrency": n, "completion_tokens": toks, "seconds": wall,
            "tokens_per_s": toks / wall if wall else 0.0,
            "median_request_seconds_per_token": per_tok[len(per_tok) // 2] if per_tok else None,
            "errors": len(errors), "first_error": errors[0] if errors else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", default="1,64")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prompt", default="You are in the kitchen. Your task is to put a clean mug in the coffee machine.\n>")
    a = ap.parse_args()
    levels = [level(a, int(n)) for n in a.concurrency.split(",")]
    res = {"levels": levels}
    if len(levels) > 1 and levels[0]["tokens_per_s"]:
        res["speedup"] = levels[-1]["tokens_per_s"] / levels[0]["tokens_per_s"]
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
