#!/usr/bin/env python3
"""Speculative decoding by prompt lookup (`--speculative-tokens`): decode tokens/s against the same
run without drafts, at a known acceptance, on one checkpoint.

    .venv/bin/python bench/speculative.py --model DIR [--batch 1,16] [--tokens 0,2,4,8]

A random-weight checkpoint says nothing that repeats, so each request is made to emit a chosen
text with `latent generate --debug-replay` (test-only: the engine runs every step as usual and
reads the replayed token instead of sampling it), in three kinds:
- repeating: a period of 8 tokens over and over: after the first period every draft is right;
- misleading: `a x1 a x2 a x3 ...`: at every `a` the last `a` recurs and the draft copies what
  followed it, which is wrong; the worst case, a wasted draft every other step;
- novel: no token recurs, so no draft is made (the cost of looking).
Each run decodes --max-tokens tokens per request after a 16-token prompt; the rate is generated
tokens over the engine's busy time (latent generate's summary), best of --rounds. Prints a table
and one JSON line per point.

With --prompts FILE (latent generate's JSONL requests, e.g. text prompts to a trained model) the
requests are run without a replay: the model's own output decides what repeats. A request without
"temperature" is run greedy ("temperature": 0 is added), as lines were by default before they took
generation_config.json's sampling defaults: the points in docs/performance.md are greedy, and a
sampled run's drafts depend on the draws. Every request the script makes states it too."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def replay_ids(kind: str, length: int, rng: random.Random) -> list[int]:
    pool = rng.sample(range(1000, 30000), 2 * length + 8)
    if kind == "repeating":
        return (pool[:8] * (length // 8 + 1))[:length]
    if kind == "misleading":
        a = pool[0]
        return [t for i in range(length // 2 + 1) for t in (a, pool[1 + i])][:length]
    return pool[:length]


def run(model: str, requests: Path, replay: Path | None, tokens: int, extra: list[str]) -> dict:
    replay_flags = ["--debug-replay", str(replay)] if replay else []
    proc = subprocess.run([str(REPO / "build" / "latent"), "generate", "--model", model, "--prompts",
                           str(requests), *replay_flags, "--speculative-tokens", str(tokens), *extra],
                          capture_output=True, text=True, check=True)
    line = [l for l in proc.stderr.splitlines() if l.startswith("latent: summary ")][-1]
    return json.loads(line[len("latent: summary "):])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--tokens", default="0,2,4,8", help="--speculative-tokens values (0: the baseline)")
    ap.add_argument("--kinds", default="repeating,misleading,novel")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--extra", default="", help="more latent generate flags, space-separated")
    ap.add_argument("--prompts", help="JSONL requests to run as they are (no replay, no --batch)")
    args = ap.parse_args()
    rng = random.Random(0)
    extra = args.extra.split()
    rows = []

    def point(kind, batch, requests, replay):
        base = None
        for tokens in map(int, args.tokens.split(",")):
            best = max((run(args.model, requests, replay, tokens, extra) for _ in range(args.rounds)),
                       key=lambda s: s["tokens_per_second"])
            rate = best["tokens_per_second"]
            base = rate if base is None else base
            row = {"kind": kind, "batch": batch, "speculative_tokens": tokens, "tokens_per_s": rate,
                   "vs_first": rate / base, "steps": best["steps"], "draft_tokens": best["draft_tokens"],
                   "accepted_draft_tokens": best["accepted_draft_tokens"]}
            rows.append(row)
            print(f"{kind:>10} B={batch:<3} k={tokens:<2} {rate:8.1f} tok/s  x{rate / base:5.2f}  "
                  f"steps {best['steps']:5d}  drafts {best['draft_tokens']:6d} "
                  f"accepted {best['accepted_draft_tokens']:6d}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        if args.prompts:
            given = [json.loads(line) for line in Path(args.prompts).read_text().splitlines()
                     if line.strip()]
            requests = Path(tmp) / "prompts.jsonl"
            requests.write_text("".join(json.dumps({"temperature": 0, **line}) + "\n"
                                        for line in given))
            point("prompts", len(given), requests, None)
        for kind in ([] if args.prompts else args.kinds.split(",")):
            replay = Path(tmp) / f"{kind}.json"
            replay.write_text(json.dumps(replay_ids(kind, args.max_tokens, rng)))
            for batch in map(int, args.batch.split(",")):
                requests = Path(tmp) / f"b{batch}.jsonl"
                requests.write_text("".join(
                    json.dumps({"ids": [rng.randrange(1000, 30000) for _ in range(16)],
                                "max_tokens": args.max_tokens, "ignore_eos": True,
                                "temperature": 0}) + "\n"
                    for _ in range(batch)))
                point(kind, batch, requests, replay)
    for row in rows:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
