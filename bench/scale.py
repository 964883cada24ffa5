#!/usr/bin/env python3
"""bench/scale.py --model DIR [--ranks 1,2,4] [--batch 1,64] [--pp 128] [--tg 32]: latent over
1, 2, 4 MPI ranks on one checkpoint (docs/scale-out.md). Per rank count: each rank's weight bytes
(`latent info --ranks N`), decode tokens/s at each batch (`mpirun -np N latent bench`), and the
share of rank 0's time spent in collectives (waiting for the slowest rank included), over the
whole point and per kind of step: a prefill step and a decode step each, with the collectives' own
time (transfer: per call, the least time any rank spent in it) apart from waiting (`latent bench
--comm-detail`). On one small machine more ranks cannot be faster (they share the cores); the
point is that the routed experts' bytes per rank fall as 1/N and that communication stays a small
share of the step. Writes the figures as JSON to --out (default: print only)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LATENT = REPO / "build" / "latent"


def run(cmd: list[str], env: dict) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--batch", default="1,64")
    ap.add_argument("--pp", default="128")
    ap.add_argument("--tg", default="32")
    ap.add_argument("--threads", type=int, default=0,
                    help="compute threads per rank (default: the CPUs divided among the ranks)")
    ap.add_argument("--out", help="write the figures as JSON here")
    args = ap.parse_args()
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("mpirun is missing: `make setup` installs openmpi-bin")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    results = []
    for n in [int(x) for x in args.ranks.split(",")]:
        info = json.loads(run([str(LATENT), "info", "--model", args.model, "--json",
                               "--ranks", str(n)], env))
        weight_bytes = ([r["weight_bytes"] for r in info["ranks"]] if n > 1
                        else [info["weights"]["bytes"]])
        threads = args.threads or max(1, (os.cpu_count() or 1) // n)
        out = run([mpirun, "--oversubscribe", "--bind-to", "none", "-np", str(n), str(LATENT),
                   "--threads", str(threads), "bench", "--model", args.model, "--pp", args.pp,
                   "--tg", args.tg, "--batch", args.batch, "--json"]
                  + (["--comm-detail"] if n > 1 else []), env)
        for line in out.splitlines():
            if not line.startswith("{"):
                continue
            point = json.loads(line)
            row = {"ranks": n, "weight_bytes_per_rank": weight_bytes,
                   "batch": point["batch"],
                   "decode_tokens_per_s": point["decode_tokens_per_s"],
                   "comm_share": point.get("comm_share", 0.0),
                   "comm_bytes_rank0": point.get("comm_bytes_rank0", 0),
                   "steps": point.get("steps", {})}
            results.append(row)
            print(f"ranks {n}: batch {row['batch']}: decode {row['decode_tokens_per_s']:.1f} tok/s, "
                  f"{100 * row['comm_share']:.1f}% in collectives; weight bytes per rank "
                  f"{weight_bytes}")
            for kind, k in row["steps"].items():
                print(f"  {kind} step ({k['steps']} steps, {k['tokens']} tokens): "
                      f"{k['step_ms']:.2f} ms, collectives {k['collective_ms']:.2f} ms "
                      f"({100 * k['collective_share']:.1f}%), of which transfer "
                      f"{k['transfer_ms']:.2f} ms ({100 * k['transfer_share']:.1f}%)")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
