#!/usr/bin/env python3
"""Encode throughput of latent's tokenizer against HF `tokenizers`, both on one thread, over the
same >= 10 MB of text: Python sources and docstrings (English prose and code, from the installed
transformers package) and seeded multilingual text (tests/tokenizer/tokenizer_corpus.py), cut into
documents of a few KB. Prints one JSON object per tokenizer with MB/s of each and the ratio.

    .venv/bin/python bench/tokenizer_bench.py [--tokenizers ../shared/tokenizers] [--mb 12]
        [--names deepseek_v3,qwen3,llama2] [--latent build/latent] [--repeat 3]

latent runs `latent tokenize --bench FILE` (one thread, best of --repeat passes); HF runs
Tokenizer.encode_batch with TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1 (best of
--repeat). Both encode without special tokens, and the token totals are checked to agree.
Throughput is reported from wall time and from CPU time (the latter holds up on a busy machine).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# One thread for HF: set before `tokenizers` is imported.
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "tokenizer"))


def make_documents(megabytes: float, seed: int = 0) -> list[str]:
    """~`megabytes` MB of documents (70% code and prose, 30% multilingual), deterministic for a
    given transformers install."""
    import transformers
    import tokenizer_corpus

    target = int(megabytes * 1e6)
    docs: list[str] = []
    size = 0
    root = Path(transformers.__file__).parent
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        for start in range(0, len(text), 4000):
            doc = text[start:start + 4000]
            docs.append(doc)
            size += len(doc.encode())
        if size >= 0.7 * target:
            break
    rng = random.Random(seed)
    while size < target:
        doc = tokenizer_corpus._sentence(rng, rng.randint(50, 400))
        docs.append(doc)
        size += len(doc.encode())
    return docs


def bench_hf(tokenizer_json: Path, docs: list[str], repeat: int) -> tuple[float, float, int]:
    """Best wall and CPU seconds over `repeat` passes, and the token count."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    best = best_cpu = float("inf")
    tokens = 0
    for _ in range(repeat):
        start, cpu_start = time.perf_counter(), time.process_time()
        encodings = tok.encode_batch(docs, add_special_tokens=False)
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - cpu_start)
        tokens = sum(len(e.ids) for e in encodings)
    return best, best_cpu, tokens


def bench_latent(latent: Path, tokenizer_dir: Path, docs_file: Path, repeat: int) -> dict:
    proc = subprocess.run([str(latent), "tokenize", "--tokenizer", str(tokenizer_dir), "--bench",
                           str(docs_file), "--repeat", str(repeat), "--no-special-tokens"],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokenizers", type=Path, default=REPO.parent / "shared" / "tokenizers")
    parser.add_argument("--names", default="deepseek_v3,qwen3,llama2")
    parser.add_argument("--latent", type=Path, default=REPO / "build" / "latent")
    parser.add_argument("--mb", type=float, default=12.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    docs = make_documents(args.mb)
    total = sum(len(d.encode()) for d in docs)
    with tempfile.TemporaryDirectory() as tmp:
        docs_file = Path(tmp) / "docs.jsonl"
        docs_file.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
        for name in args.names.split(","):
            tok_dir = args.tokenizers / name
            ours = bench_latent(args.latent, tok_dir, docs_file, args.repeat)
            hf_seconds, hf_cpu, hf_tokens = bench_hf(tok_dir / "tokenizer.json", docs, args.repeat)
            mb = total / 1e6
            result = {
                "tokenizer": name,
                "bytes": total,
                "documents": len(docs),
                "tokens": ours["tokens"],
                "tokens_agree": ours["tokens"] == hf_tokens,
                "latent_mb_per_s": round(ours["mb_per_s"], 2),
                "hf_tokenizers_mb_per_s": round(mb / hf_seconds, 2),
                "ratio": round(ours["mb_per_s"] / (mb / hf_seconds), 2),
                # The same from CPU time, which other work on the machine disturbs less.
                "latent_cpu_mb_per_s": round(ours["cpu_mb_per_s"], 2),
                "hf_tokenizers_cpu_mb_per_s": round(mb / hf_cpu, 2),
                "cpu_ratio": round(ours["cpu_mb_per_s"] / (mb / hf_cpu), 2),
                "threads": 1,
            }
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
