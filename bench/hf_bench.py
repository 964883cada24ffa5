#!/usr/bin/env python3
"""Hugging Face transformers on CPU, for bench/compare.py: a llama-batched-bench-style sweep.

For every batch size B: B prompts of PP random token ids (the same seed scheme for every size,
all the same length, so no padding is needed; the tokenizer is never used), greedy `generate`
with max_new_tokens = min_new_tokens = TG (EOS ignored), the whole batch in one call. A logits
processor stamps the time of every step: prefill ends at the first stamp (the first generated
token comes with the prefill), decode is the TG - 1 steps after it, as `latent bench` counts.

With --cb it also tries `generate_batch` (transformers' continuous batching) at the largest
batch and records what happens (tokens/s, or the error).

Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--pp", type=int, default=128)
    p.add_argument("--tg", type=int, default=32)
    p.add_argument("--batch", default="1,4,16,64")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--experts", default=None, help="experts_implementation (default: transformers' choice)")
    p.add_argument("--cb", action="store_true", help="also try generate_batch (continuous batching)")
    p.add_argument("--budget-s", type=float, default=1e9, help="skip points once this much time is spent")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    started = time.perf_counter()
    kwargs = {"dtype": dtype}
    if args.experts:
        kwargs["experts_implementation"] = args.experts
    model = AutoModelForCausalLM.from_pretrained(args.model, **kwargs)
    model.eval()
    load_s = time.perf_counter() - started
    vocab = model.config.vocab_size
    out = {
        "system": "transformers",
        "version": transformers.__version__,
        "torch": torch.__version__,
        "threads": args.threads,
        "dtype": args.dtype,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "experts_implementation": getattr(model.config, "_experts_implementation", None),
        "load_s": load_s,
        "points": [],
        "skipped": [],
    }

    class Stamps(LogitsProcessor):
        def __init__(self):
            self.times = []

        def __call__(self, input_ids, scores):
            self.times.append(time.perf_counter())
            return scores

    def prompts(b: int, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        return torch.randint(2, vocab, (b, args.pp), generator=g)

    def run_generate(b: int, seed: int, tg: int):
        ids = prompts(b, seed)
        stamps = Stamps()
        with torch.inference_mode():
            t0 = time.perf_counter()
            model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=tg,
                min_new_tokens=tg,
                do_sample=False,
                logits_processor=LogitsProcessorList([stamps]),
                pad_token_id=model.config.eos_token_id if model.config.pad_token_id is None else model.config.pad_token_id,
            )
            t1 = time.perf_counter()
        return t0, t1, stamps.times

    # Warm-up: one short generate (first-call allocations, oneDNN primitive creation).
    run_generate(1, 12345, 2)
    batches = [int(x) for x in args.batch.split(",")]
    bench_start = time.perf_counter()
    for i, b in enumerate(batches):
        spent = time.perf_counter() - bench_start
        if spent > args.budget_s:
            out["skipped"].append({"batch": b, "reason": f"time budget {args.budget_s:.0f} s spent"})
            continue
        t0, t1, times = run_generate(b, args.seed + i, args.tg)
        prefill_s = times[0] - t0
        decode_s = times[-1] - times[0]
        out["points"].append(
            {
                "pp": args.pp,
                "tg": args.tg,
                "batch": b,
                "total_s": t1 - t0,
                "prefill_tokens_per_s": b * args.pp / prefill_s,
                "decode_tokens_per_s": b * (args.tg - 1) / decode_s if decode_s > 0 else None,
                "tokens_per_s": b * (args.pp + args.tg) / (t1 - t0),
                "ttft_ms": 1e3 * prefill_s,
                "itl_ms_mean": 1e3 * decode_s / max(1, args.tg - 1),
            }
        )
        print(json.dumps(out["points"][-1]), file=sys.stderr, flush=True)

    if args.cb:
        b = max(batches)
        cb = {"batch": b, "pp": args.pp, "tg": args.tg}
        import logging

        class Errors(logging.Handler):
            def __init__(self):
                super().__init__(logging.ERROR)
                self.messages = []

            def emit(self, record):
                text = record.getMessage()
                if record.exc_info and record.exc_info[1] is not None:
                    text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
                self.messages.append(text[:1000])

        errors = Errors()
        logging.getLogger("ContinuousBatchingLogger").addHandler(errors)
        logging.getLogger("transformers").addHandler(errors)
        try:
            from transformers import GenerationConfig
            from transformers.generation.configuration_utils import ContinuousBatchingConfig

            # Sized for this workload (the default sizes the cache from free memory).
            cb_config = ContinuousBatchingConfig(num_blocks=b * ((args.pp + args.tg) // 256 + 2), max_batch_tokens=2048)

            ids = prompts(b, args.seed + 100).tolist()
            gen = GenerationConfig(max_new_tokens=args.tg, min_new_tokens=args.tg, do_sample=False,
                                   eos_token_id=-1, pad_token_id=0)
            t0 = time.perf_counter()
            with torch.inference_mode():
                res = model.generate_batch(inputs=ids, generation_config=gen,
                                           continuous_batching_config=cb_config, max_new_tokens=args.tg, warmup=False)
            t1 = time.perf_counter()
            generated = sum(len(r.generated_tokens) for r in res.values())
            cb.update({"ok": generated == b * args.tg, "errors_logged": errors.messages[:5], "total_s": t1 - t0, "generated_tokens": generated,
                       "tokens_per_s": (b * args.pp + generated) / (t1 - t0),
                       "generated_tokens_per_s": generated / (t1 - t0)})
        except Exception as e:  # recorded, not fatal: the point is whether it runs
            cb.update({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000], "errors_logged": errors.messages[:5],
                       "traceback_tail": traceback.format_exc().splitlines()[-6:]})
        if not cb["ok"] and "error" not in cb:
            useful = [m for m in errors.messages if "generation loop" in m] or errors.messages
            cb["error"] = (useful or [f"{cb.get('generated_tokens')} of {b * args.tg} tokens generated"])[0]
        out["continuous_batching"] = cb
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
