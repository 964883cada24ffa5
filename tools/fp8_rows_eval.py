#!/usr/bin/env python3
"""Accuracy cost of fp8 cache rows (`--cache-dtype fp8`: FlashMLA's layout, the latent in e4m3
with an f32 scale per 128 values, the rotary key in bf16) against bf16 rows, with the built latent
binary.

Runs `latent logits --cache-dtype {f32,bf16,fp8}` (one chunk through the paged cache, the
checkpoint's default --precision unless given) on one long text and reports, for fp8 against bf16
rows (and bf16 against f32 rows, for scale):

  * KL(p_bf16 || p_fp8) of the next-token distributions, mean and max over positions,
  * top-1 agreement: positions where both pick the same most likely token,
  * perplexity of each over the text (position i predicts token i + 1), max |logit difference|.

The text: --text-file (default models/demo/heldout.txt, Twelfth Night, held out of the demo
model's training) encoded by `latent tokenize` with the model's tokenizer, cut to --tokens and to
the model's max_position_embeddings.

  .venv/bin/python tools/fp8_rows_eval.py [--model models/demo] [--tokens 1024] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_LATENT = REPO / "build" / "latent"
DEFAULT_MODEL = REPO / "models" / "demo"


def run(latent: Path, *args: str) -> str:
    proc = subprocess.run([str(latent), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"fp8_rows_eval: latent {' '.join(args[:3])} ... failed:\n{proc.stderr}")
    return proc.stdout


def logits(args: argparse.Namespace, ids: list[int], cache_dtype: str) -> tuple[np.ndarray, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.f32"
        extra = ["--precision", args.precision] if args.precision else []
        start = time.perf_counter()
        meta = json.loads(run(args.latent, "logits", "--model", str(args.model), "--ids",
                              ",".join(map(str, ids)), "--cache-dtype", cache_dtype,
                              "--attention", args.attention, "--f32-out", str(out), *extra))
        seconds = time.perf_counter() - start
        values = np.fromfile(out, dtype="<f4").reshape(meta["tokens"], meta["vocab"])
    return values, seconds


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def compare(ids: list[int], ref: np.ndarray, other: np.ndarray) -> dict:
    lp, lq = log_softmax(ref), log_softmax(other)
    targets = np.asarray(ids[1:])
    rows = np.arange(len(targets))
    kl = (np.exp(lp) * (lp - lq)).sum(axis=-1)  # KL(p_ref || p_other) per position
    return {
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "top1_agreement": float((ref.argmax(axis=-1) == other.argmax(axis=-1)).mean()),
        "ppl_ref": float(np.exp(-lp[:-1][rows, targets].mean())),
        "ppl_other": float(np.exp(-lq[:-1][rows, targets].mean())),
        "max_abs_logit_diff": float(np.abs(ref - other).max()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default=str(DEFAULT_MODEL), help="checkpoint directory (default: %(default)s)")
    p.add_argument("--latent", type=Path, default=DEFAULT_LATENT, help="the latent binary")
    p.add_argument("--tokenizer", help="tokenizer directory (default: --model)")
    p.add_argument("--text-file", help="text to evaluate on (default: MODEL/heldout.txt)")
    p.add_argument("--tokens", type=int, default=1024, help="at most this many tokens (default 1024)")
    p.add_argument("--attention", default="auto", help="latent --attention (default auto)")
    p.add_argument("--precision", help="latent --precision (default: the checkpoint's)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)

    model = Path(args.model)
    config = json.loads((model / "config.json").read_text())
    config = config.get("text_config", config)
    text_file = Path(args.text_file) if args.text_file else model / "heldout.txt"
    tok_dir = Path(args.tokenizer) if args.tokenizer else model
    ids = json.loads(run(args.latent, "tokenize", "--tokenizer", str(tok_dir), "--text",
                         text_file.read_text(encoding="utf-8")))["ids"]
    ids = ids[: min(args.tokens, config.get("max_position_embeddings", args.tokens))]
    if len(ids) < 2:
        sys.exit(f"fp8_rows_eval: {text_file} gives {len(ids)} tokens")

    f32, t_f32 = logits(args, ids, "f32")
    bf16, t_bf16 = logits(args, ids, "bf16")
    fp8, t_fp8 = logits(args, ids, "fp8")
    result = {
        "model": str(model), "text": str(text_file), "tokens": len(ids),
        "kv_lora_rank": config.get("kv_lora_rank"), "qk_rope_head_dim": config.get("qk_rope_head_dim"),
        "fp8_vs_bf16": compare(ids, bf16, fp8),
        "bf16_vs_f32": compare(ids, f32, bf16),
        "seconds": {"f32": t_f32, "bf16": t_bf16, "fp8": t_fp8},
    }
    if args.json:
        print(json.dumps(result))
        return 0
    a, b = result["fp8_vs_bf16"], result["bf16_vs_f32"]
    print(f"model:     {model} (kv_lora_rank {result['kv_lora_rank']}, rope {result['qk_rope_head_dim']})")
    print(f"text:      {len(ids)} tokens of {text_file}")
    print(f"perplexity: f32 rows {b['ppl_ref']:.4f}, bf16 rows {a['ppl_ref']:.4f}, fp8 rows {a['ppl_other']:.4f}")
    print(f"fp8 vs bf16 rows: KL(bf16 || fp8) mean {a['kl_mean']:.3e} max {a['kl_max']:.3e} nats, "
          f"top-1 agreement {100 * a['top1_agreement']:.2f}%, max |dlogit| {a['max_abs_logit_diff']:.4g}")
    print(f"bf16 vs f32 rows: KL(f32 || bf16) mean {b['kl_mean']:.3e} max {b['kl_max']:.3e} nats, "
          f"top-1 agreement {100 * b['top1_agreement']:.2f}%, max |dlogit| {b['max_abs_logit_diff']:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
