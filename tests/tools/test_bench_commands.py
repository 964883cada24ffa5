"""`latent bench` and `latent bench-step`: the JSON they print (what bench/compare reads) and
their errors. Timings are not checked here (performance lives in bench/)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from conftest import LATENT, run_latent


def json_lines(stdout: str) -> list[dict]:
    return [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]


def test_bench_sweep_points(tiny_models):
    model_dir = tiny_models.get("deepseek_v3")
    for form in ["auto", "absorbed", "expanded"]:
        out = run_latent("bench", "--model", str(model_dir), "--pp", "16,40", "--tg", "3",
                         "--batch", "1,3", "--attention", form, "--json").stdout
        points = json_lines(out)
        assert [(p["pp"], p["tg"], p["batch"]) for p in points] == [
            (16, 3, 1), (16, 3, 3), (40, 3, 1), (40, 3, 3)]
        for p in points:
            # The source the ranks of a scale-out job compare (engine::SourceState): one script
            # makes both, so the commit a result names is the one the rank check names.
            assert re.fullmatch(r"[0-9a-f]{12}( with uncommitted changes [0-9a-f]{12})?|unknown",
                                p["commit"]), p["commit"]
            assert p["flags"]["attention"] == form
            assert p["flags"]["threads"] >= 1
            assert p["flags"]["kernels"] in ("avx512-amx", "avx512-packed", "avx512",
                                             "avx2-packed", "avx2", "ref")
            assert p["prefill_tokens_per_s"] > 0 and p["decode_tokens_per_s"] > 0
            assert 0 < p["itl_ms_min"] <= p["itl_ms_p50"] <= p["itl_ms_p90"] <= p["itl_ms_p99"]
    bad = run_latent("bench", "--model", str(model_dir), "--attention", "sideways", check=False)
    assert bad.returncode != 0 and "--attention: unknown form 'sideways'" in bad.stderr


def test_bench_warmup_points_run_untimed(tiny_models):
    """`--warmup N` runs N untimed points (the first point's PP and batch, 2 tokens each) before
    the sweep, as llama-bench warms up: they add prefill steps (LATENT_PROFILE counts every
    step) but no JSON point."""
    model_dir = tiny_models.get("deepseek_v3")
    env = dict(os.environ, LATENT_PROFILE="1")
    prefill_steps = {}
    for warmup in ["0", "2"]:
        proc = subprocess.run([str(LATENT), "bench", "--model", str(model_dir), "--pp", "24",
                               "--tg", "3", "--batch", "1", "--warmup", warmup, "--json"],
                              capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        points = json_lines(proc.stdout)
        assert [(p["pp"], p["tg"], p["batch"]) for p in points] == [(24, 3, 1)]
        assert points[0]["flags"]["warmup_points"] == int(warmup)
        steps = re.search(r"^prefill\s+step \(forward\)\s+[\d.]+\s+(\d+)", proc.stderr, re.M)
        assert steps, proc.stderr
        prefill_steps[warmup] = int(steps.group(1))
    assert prefill_steps == {"0": 1, "2": 3}
    bad = run_latent("bench", "--model", str(model_dir), "--warmup", "-1", check=False)
    assert bad.returncode != 0 and "--warmup" in bad.stderr


def test_bench_repetitions_average_fresh_runs(tiny_models):
    """`--repetitions N` runs each point N times with fresh prompts (LATENT_PROFILE counts their
    prefill steps) and reports the mean of the runs' rates, listing each run's; `-r` in
    llama-bench does the same."""
    model_dir = tiny_models.get("deepseek_v3")
    env = dict(os.environ, LATENT_PROFILE="1")
    proc = subprocess.run([str(LATENT), "bench", "--model", str(model_dir), "--pp", "24",
                           "--tg", "3", "--batch", "1,2", "--warmup", "0", "--repetitions", "3",
                           "--json"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    points = json_lines(proc.stdout)
    assert [(p["batch"], p["repetitions"]) for p in points] == [(1, 3), (2, 3)]
    for p in points:
        assert p["flags"]["repetitions"] == 3
        for key in ["prefill_tokens_per_s", "decode_tokens_per_s"]:
            each = p[key + "_each"]
            assert len(each) == 3 and all(v > 0 for v in each)
            assert p[key] == pytest.approx(sum(each) / 3)
    # Fresh prompts every run: no run's prompt is found in the prefix cache, so every run
    # prefills: 3 runs of each point, one prefill step each (24 tokens fit one step's budget).
    steps = re.search(r"^prefill\s+step \(forward\)\s+[\d.]+\s+(\d+)", proc.stderr, re.M)
    assert steps and int(steps.group(1)) == 6, proc.stderr
    bad = run_latent("bench", "--model", str(model_dir), "--repetitions", "0", check=False)
    assert bad.returncode != 0 and "--repetitions" in bad.stderr


def test_bench_samples_when_asked(tiny_models):
    """`--temperature` and the filters make every request of a point sample (seeded per request),
    as a serving benchmark with sampling does; the JSON names them, and a bad value is refused
    by name."""
    model_dir = tiny_models.get("deepseek_v3")
    out = run_latent("bench", "--model", str(model_dir), "--pp", "16", "--tg", "4", "--batch",
                     "3", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "50", "--min-p",
                     "0.01", "--json").stdout
    (point,) = json_lines(out)
    assert point["flags"]["sampling"] == pytest.approx(
        {"temperature": 0.8, "top_k": 50, "top_p": 0.9, "min_p": 0.01})
    assert point["decode_tokens_per_s"] > 0
    greedy = json_lines(run_latent("bench", "--model", str(model_dir), "--pp", "16", "--tg", "2",
                                   "--batch", "1", "--json").stdout)[0]
    assert greedy["flags"]["sampling"]["temperature"] == 0
    bad = run_latent("bench", "--model", str(model_dir), "--top-p", "0", check=False)
    assert bad.returncode != 0 and "top_p must be in (0, 1]" in bad.stderr


def test_bench_step_points(tiny_models):
    for preset in ["deepseek_v3", "deepseek_v32"]:
        model_dir = tiny_models.get(preset)
        out = run_latent("bench-step", "--model", str(model_dir), "--context", "50,200",
                         "--attention", "absorbed,expanded", "--batch", "1,3", "--steps", "3",
                         "--json").stdout
        points = json_lines(out)
        assert [(p["context"], p["batch"], p["attention"]) for p in points] == [
            (c, b, a) for c in (50, 200) for b in (1, 3) for a in ("absorbed", "expanded")]
        for p in points:
            assert len(p["step_ms"]) == 3 and all(t > 0 for t in p["step_ms"])
            assert min(p["step_ms"]) == p["step_ms_min"] <= p["step_ms_p50"]
            # Each timed step's greedy token per sequence.
            assert [len(a) for a in p["argmax"]] == [p["batch"]] * 3
            assert (p["index_topk"] > 0) == (preset == "deepseek_v32")


def test_bench_step_errors(tiny_models):
    model_dir = tiny_models.get("deepseek_v3")
    max_pos = json.loads((model_dir / "config.json").read_text())["max_position_embeddings"]
    too_long = run_latent("bench-step", "--model", str(model_dir), "--context", str(max_pos),
                          check=False)
    assert too_long.returncode != 0 and "exceeds max_position_embeddings" in too_long.stderr
    for flag, value, message in [("--context", "0", "--context: '0' is not a positive integer"),
                                 ("--context", "12x", "--context: '12x' is not a positive integer"),
                                 ("--batch", "0", "--batch: '0' is not a positive integer"),
                                 ("--attention", "absorbed,nope", "unknown form 'nope'")]:
        proc = run_latent("bench-step", "--model", str(model_dir), flag, value, check=False)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
