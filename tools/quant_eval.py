#!/usr/bin/env python3
"""Quality of `--quantize int8` and `w8a8` against the unquantized weights, with the built latent
binary.

Runs `latent logits --precision f32` on one token sequence with `--quantize none` (the
checkpoint's own weights: bf16, f32 or fp8) and with each mode of --modes (default int8,w8a8), and reports for each mode

  * perplexity of each over the sequence (position i predicts token i + 1),
  * KL(p_none || p_mode) of the next-token distributions, mean and max over positions,
  * top-1 agreement: positions where both pick the same most likely token,
  * max |logit difference|,
  * routing: the tokens every MoE layer sends to the same experts in both runs (a flipped
    near-tie changes a token's output discretely), and the mean KL over those tokens.

The sequence: --ids, or text (--text / --text-file, default docs/architecture.md) encoded by
`latent tokenize` with the model's tokenizer (or --tokenizer), cut to --tokens; random ids
(--seed) when there is no tokenizer or its ids do not fit the model's vocabulary.

  .venv/bin/python tools/quant_eval.py --model DIR [--tokens 256] [--modes int8,w8a8] [--json]

--json prints one object: the int8 figures at the top level (as before w8a8 existed) when int8 is
among the modes, and every mode's under "modes": {"int8": {...}, "w8a8": {...}}.
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
DEFAULT_TEXT = REPO / "docs" / "architecture.md"


def run(latent: Path, *args: str) -> str:
    proc = subprocess.run([str(latent), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"quant_eval: latent {' '.join(args[:3])} ... failed:\n{proc.stderr}")
    return proc.stdout


def token_ids(args: argparse.Namespace, vocab: int) -> tuple[list[int], str]:
    if args.ids:
        return [int(t) for t in args.ids.split(",")], "--ids"
    tok_dir = Path(args.tokenizer) if args.tokenizer else Path(args.model)
    if (tok_dir / "tokenizer.json").is_file():
        text = args.text if args.text is not None else Path(args.text_file).read_text(encoding="utf-8")
        ids = json.loads(run(args.latent, "tokenize", "--tokenizer", str(tok_dir), "--text", text))["ids"]
        ids = ids[: args.tokens]
        if len(ids) >= 2 and max(ids) < vocab:
            source = "--text" if args.text is not None else str(args.text_file)
            return ids, f"{source} ({tok_dir} tokenizer)"
    rng = np.random.default_rng(args.seed)
    return rng.integers(2, vocab, size=args.tokens).tolist(), f"random ids (seed {args.seed})"


def logits(args: argparse.Namespace, ids: list[int], quantize: str) -> tuple[np.ndarray, list, float]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "logits.f32"
        extra = ["--threads", str(args.threads)] if args.threads else []
        start = time.perf_counter()
        meta = json.loads(run(args.latent, *extra, "logits", "--model", str(args.model), "--ids",
                              ",".join(map(str, ids)), "--quantize", quantize, "--f32-out", str(out),
                              "--experts", "--precision", "f32"))  # f32 math: the modes' own error
        seconds = time.perf_counter() - start
        values = np.fromfile(out, dtype="<f4").reshape(meta["tokens"], meta["vocab"])
    return values, meta["experts"], seconds


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def compare(ids: list[int], ref: np.ndarray, quant: np.ndarray, ref_experts: list,
            quant_experts: list) -> dict:
    """Figures for `quant` against `ref` (both [T, V] logits of the sequence `ids`, with the
    experts `latent logits --experts` reports)."""
    lp, lq = log_softmax(ref), log_softmax(quant)
    targets = np.asarray(ids[1:])
    rows = np.arange(len(targets))

    def ppl(lx: np.ndarray) -> float:
        return float(np.exp(-lx[rows, targets].mean()))

    kl = (np.exp(lp) * (lp - lq)).sum(axis=-1)  # KL(p_ref || p_quant) per position
    top1 = ref.argmax(axis=-1) == quant.argmax(axis=-1)
    same = np.array([all(sorted(a[t]) == sorted(b[t]) for a, b in zip(ref_experts, quant_experts)
                         if a is not None) for t in range(len(ids))])
    return {
        "tokens": len(ids),
        "ppl_none": ppl(lp[:-1]),
        "ppl_quant": ppl(lq[:-1]),
        "kl_mean": float(kl.mean()),
        "kl_max": float(kl.max()),
        "top1_agreement": float(top1.mean()),
        "max_abs_logit_diff": float(np.abs(ref - quant).max()),
        "same_routing": float(same.mean()),
        "kl_mean_same_routing": float(kl[same].mean()) if same.any() else float("nan"),
        "logit_std_none": float(ref.std(axis=-1).mean()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="checkpoint directory")
    p.add_argument("--latent", type=Path, default=DEFAULT_LATENT, help="the latent binary")
    p.add_argument("--tokenizer", help="tokenizer directory (default: --model)")
    p.add_argument("--text", help="text to evaluate on")
    p.add_argument("--text-file", default=str(DEFAULT_TEXT), help="file of text (default: %(default)s)")
    p.add_argument("--ids", help="token ids to evaluate on, e.g. 1,2,3 (instead of text)")
    p.add_argument("--tokens", type=int, default=256, help="at most this many tokens (default 256)")
    p.add_argument("--seed", type=int, default=0, help="seed of random ids (no tokenizer)")
    p.add_argument("--threads", type=int, default=0, help="latent --threads (default: all)")
    p.add_argument("--modes", default="int8,w8a8",
                   help="--quantize modes to compare with none (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)

    vocab = json.loads((Path(args.model) / "config.json").read_text())["vocab_size"]
    ids, source = token_ids(args, vocab)
    modes = [m for m in args.modes.split(",") if m]
    ref, ref_experts, t_ref = logits(args, ids, "none")
    per_mode = {}
    for mode in modes:
        quant, quant_experts, t_quant = logits(args, ids, mode)
        per_mode[mode] = {**compare(ids, ref, quant, ref_experts, quant_experts),
                          "seconds": t_quant}
    if args.json:
        result = {"model": str(args.model), "source": source, "seconds_none": t_ref}
        if "int8" in per_mode:  # the keys of the int8-only version
            int8 = dict(per_mode["int8"])
            int8["ppl_int8"] = int8.pop("ppl_quant")
            int8["seconds_int8"] = int8.pop("seconds")
            result.update(int8)
        result["modes"] = per_mode
        print(json.dumps(result))
        return 0
    first = next(iter(per_mode.values()))
    print(f"model:              {args.model}")
    print(f"sequence:           {first['tokens']} tokens, {source}")
    print(f"perplexity none:    {first['ppl_none']:.4f} (mean logit std {first['logit_std_none']:.3g})")
    for mode, r in per_mode.items():
        print(f"--quantize {mode}:")
        print(f"  perplexity:         {r['ppl_quant']:.4f}")
        print(f"  KL(none || {mode}):   mean {r['kl_mean']:.3e}   max {r['kl_max']:.3e} nats")
        print(f"  top-1 agreement:    {100 * r['top1_agreement']:.1f}%")
        print(f"  max |dlogit|:       {r['max_abs_logit_diff']:.4g}")
        print(f"  same routing:       {100 * r['same_routing']:.1f}% of tokens in every MoE layer; "
              f"KL mean over them {r['kl_mean_same_routing']:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
