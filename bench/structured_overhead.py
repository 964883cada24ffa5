#!/usr/bin/env python3
"""Structured-output overhead: decode tokens/s of `latent serve` at CONCURRENCY concurrent chat
requests, without and with a JSON schema (response_format), on one checkpoint.

    .venv/bin/python bench/structured_overhead.py --model DIR [--concurrency 16] [--max-tokens 128]

Each round sends CONCURRENCY requests at once (--temperature, default 1, seeded, max_tokens each) and divides
the completion tokens by the round's wall time; the best of --rounds rounds is reported for each
mode. The schema (an array of at least 1000 objects of bounded fields) keeps every constrained
request generating until max_tokens, as the unconstrained ones do (ignore_eos), so both modes
decode the same number of tokens. Prints one JSON line."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai

REPO = Path(__file__).resolve().parents[1]
SCHEMA = {"type": "array", "minItems": 1000, "items": {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 999},
                   "kind": {"enum": ["cat", "dog", "bird"]},
                   "name": {"type": "string", "maxLength": 12},
                   "ok": {"type": "boolean"}},
    "required": ["id", "kind", "name", "ok"]}}


def start_server(model: str, port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([str(REPO / "build" / "latent"), "serve", "--model", model, "--host", "127.0.0.1",
                             "--port", str(port), "--served-model-name", "m"],
                            stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if re.search(r"listening on", log.read_text(errors="replace")):
            return proc
        if proc.poll() is not None:
            sys.exit(f"latent serve exited:\n{log.read_text()}")
        time.sleep(0.1)
    proc.kill()
    sys.exit("latent serve did not start")


def round_(client, n: int, max_tokens: int, schema: bool, seed0: int, temperature: float = 1.0) -> tuple[int, float]:
    tokens = [0] * n
    extra = {"ignore_eos": True}
    fmt = {"type": "json_schema", "json_schema": {"name": "pets", "schema": SCHEMA}} if schema else None

    def one(i: int):
        kwargs = {"response_format": fmt} if fmt else {}
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"List pets {i}."}],
                                           max_tokens=max_tokens, temperature=temperature, seed=seed0 + i,
                                           extra_body=extra, **kwargs)
        tokens[i] = r.usage.completion_tokens

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(tokens), time.monotonic() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=8650)
    ap.add_argument("--temperature", type=float, default=1.0,
                    help="0: greedy, which isolates the mask's cost (no sort of the vocabulary either way)")
    args = ap.parse_args()
    log = Path("/tmp") / f"structured_overhead_{args.port}.log"
    proc = start_server(args.model, args.port, log)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="x", timeout=600)
        round_(client, 2, 8, True, 0)  # warm-up: compiles the schema, builds the vocabulary
        result = {"model": args.model, "concurrency": args.concurrency, "max_tokens": args.max_tokens,
                  "temperature": args.temperature}
        for mode, schema in (("unconstrained", False), ("json_schema", True)):
            best = 0.0
            for r in range(args.rounds):
                tokens, seconds = round_(client, args.concurrency, args.max_tokens, schema, 100 * r,
                                        args.temperature)
                assert tokens == args.concurrency * args.max_tokens, tokens
                best = max(best, tokens / seconds)
            result[f"{mode}_tokens_per_s"] = round(best, 1)
        result["overhead_pct"] = round(100 * (1 - result["json_schema_tokens_per_s"] /
                                              result["unconstrained_tokens_per_s"]), 1)
        with open("/proc/loadavg") as f:
            result["loadavg"] = f.read().split()[:3]
        print(json.dumps(result))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
