#!/usr/bin/env python3
"""Compares latent's named dump points (LATENT_DUMP) with transformers' forward hooks on the same
checkpoint, layer by layer: the first point that disagrees is where a new family's port is wrong.

    tools/compare_dump.py --model /tmp/tiny_v3 [--length 12] [--points attn_in,kv_latent,...]
        [--attention absorbed|expanded|auto] [--tolerance 1e-4] [--json]

Runs `latent logits` with LATENT_DUMP=<points> (f32 checkpoints give bit-comparable numbers) and
transformers in f32 with eager attention, then prints, per point and layer, the largest absolute
difference relative to the largest reference value. Exit status 1 when any exceeds --tolerance.

Points compared (latent name: transformers module output, per decoder layer l):
  embed      model.embed_tokens (layer -1)
  attn_in    layers[l].input_layernorm
  q_a        layers[l].self_attn.q_a_layernorm        (query LoRA models)
  q          layers[l].self_attn.q_b_proj / q_proj    (before rotary)
  kv_latent  layers[l].self_attn.kv_a_layernorm
  attn_out   layers[l].self_attn
  ffn_in     layers[l].post_attention_layernorm
  moe_out    layers[l].mlp                            (MoE layers)
  mlp_out    layers[l].mlp                            (dense layers)
  hidden     layers[l]
latent also prints q_pe, k_pe (rotated, in latent's pair order, which differs from transformers'
for interleaved layouts) and index_k (DSA); they are dumped but not compared here.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_POINTS = ["embed", "attn_in", "q_a", "q", "kv_latent", "attn_out", "ffn_in", "moe_out",
                  "mlp_out", "hidden"]


def parse_dump(stderr: str) -> dict[tuple[str, int], np.ndarray]:
    """LATENT_DUMP lines -> {(name, layer): array [rows, cols]} (the last pass wins)."""
    out: dict[tuple[str, int], np.ndarray] = {}
    for line in stderr.splitlines():
        if not line.startswith("LATENT_DUMP "):
            continue
        fields = line.split()
        name = fields[1]
        layer = int(fields[2].removeprefix("layer="))
        rows, cols = (int(v) for v in fields[3].removeprefix("shape=").split("x"))
        values = np.asarray(fields[4:], dtype=np.float64)
        if values.size != rows * cols:
            raise ValueError(f"dump line for {name} layer {layer}: {values.size} values, shape {rows}x{cols}")
        out[(name, layer)] = values.reshape(rows, cols)
    return out


def run_latent(latent: Path, model: Path, ids: list[int], points: list[str], form: str) -> dict:
    env = dict(os.environ, LATENT_DUMP=",".join(points))
    proc = subprocess.run([str(latent), "logits", "--model", str(model), "--ids", ",".join(map(str, ids)),
                           "--attention", form, "--precision", "f32"],  # transformers' f32 math
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"latent logits failed ({proc.returncode}):\n{proc.stderr}")
    return parse_dump(proc.stderr)


def reference_dir(model: Path, scratch: Path) -> Path:
    """A directory transformers loads: kimi_k2 as deepseek_v3, fp8 dequantized to f32."""
    config = json.loads((model / "config.json").read_text())
    if "quantization_config" in config:
        sys.path.insert(0, str(REPO / "tools"))
        from make_tiny_model import dequantize_fp8_checkpoint

        out = scratch / "dequantized"
        dequantize_fp8_checkpoint(model, out)
        model, config = out, json.loads((out / "config.json").read_text())
    if config.get("model_type") == "kimi_k2":
        out = scratch / "as-v3"
        shutil.copytree(model, out)
        config["model_type"] = "deepseek_v3"
        (out / "config.json").write_text(json.dumps(config))
        model = out
    return model


def run_transformers(model: Path, ids: list[int], points: list[str]) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as scratch:
        ref = AutoModelForCausalLM.from_pretrained(reference_dir(model, Path(scratch)), dtype=torch.float32,
                                                   attn_implementation="eager",
                                                   experts_implementation="eager")
    ref.eval()
    captured: dict[tuple[str, int], np.ndarray] = {}

    def hook(name: str, layer: int):
        def record(module, inputs, output):
            if isinstance(output, tuple):
                output = output[0]
            captured[(name, layer)] = output.detach().double().reshape(len(ids), -1).numpy()
        return record

    handles = []

    def watch(name: str, layer: int, module) -> None:
        if module is not None and name in points:
            handles.append(module.register_forward_hook(hook(name, layer)))

    decoder = ref.model
    watch("embed", -1, decoder.embed_tokens)
    config = ref.config
    for l, layer in enumerate(decoder.layers):
        attn = layer.self_attn
        watch("attn_in", l, layer.input_layernorm)
        watch("q_a", l, getattr(attn, "q_a_layernorm", None))
        watch("q", l, getattr(attn, "q_b_proj", None) or getattr(attn, "q_proj", None))
        watch("kv_latent", l, attn.kv_a_layernorm)
        watch("attn_out", l, attn)
        watch("ffn_in", l, layer.post_attention_layernorm)
        moe = hasattr(layer.mlp, "gate") and hasattr(layer.mlp, "experts")
        watch("moe_out" if moe else "mlp_out", l, layer.mlp)
        watch("hidden", l, layer)
    with torch.no_grad():
        ref(torch.tensor([ids]))
    for h in handles:
        h.remove()
    del config
    return captured


def compare(ours: dict, theirs: dict, tolerance: float) -> list[dict]:
    rows = []
    for key in sorted(theirs, key=lambda k: (k[1], DEFAULT_POINTS.index(k[0]))):
        name, layer = key
        ref = theirs[key]
        row = {"point": name, "layer": layer}
        if key not in ours:
            row.update(error="latent printed no such point")
        elif ours[key].shape != ref.shape:
            row.update(error=f"shape {ours[key].shape} vs transformers {ref.shape}")
        else:
            scale = max(np.abs(ref).max(), 1e-30)
            row.update(max_abs=float(np.abs(ours[key] - ref).max()), scale=float(scale))
            row["relative"] = row["max_abs"] / scale
        row["ok"] = bool("error" not in row and row["relative"] <= tolerance)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="checkpoint directory (a tiny model)")
    parser.add_argument("--ids", help="comma-separated prompt ids (default: --length ids from a fixed seed)")
    parser.add_argument("--length", type=int, default=12, help="prompt length when --ids is not given")
    parser.add_argument("--points", default=",".join(DEFAULT_POINTS), help="dump points to compare")
    parser.add_argument("--attention", default="auto", choices=["auto", "absorbed", "expanded"])
    parser.add_argument("--tolerance", type=float, default=1e-4, help="max |diff| / max |reference|")
    parser.add_argument("--latent", type=Path, default=REPO / "build" / "latent")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    args = parser.parse_args(argv)

    points = [p for p in args.points.split(",") if p]
    unknown = sorted(set(points) - set(DEFAULT_POINTS))
    if unknown:
        parser.error(f"unknown point(s) {', '.join(unknown)} (known: {', '.join(DEFAULT_POINTS)})")
    vocab = json.loads((args.model / "config.json").read_text())["vocab_size"]
    if args.ids:
        ids = [int(v) for v in args.ids.split(",")]
    else:
        ids = np.random.default_rng(1).integers(2, vocab, size=args.length).tolist()

    ours = run_latent(args.latent, args.model, ids, points, args.attention)
    theirs = run_transformers(args.model, ids, points)
    rows = compare(ours, theirs, args.tolerance)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        for r in rows:
            detail = r.get("error") or f"max |diff| {r['max_abs']:.3e} ({r['relative']:.2e} of {r['scale']:.3g})"
            print(f"{'ok ' if r['ok'] else 'BAD'} layer {r['layer']:>2} {r['point']:<10} {detail}")
    return 0 if rows and all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
