"""Prompt logprobs through the engine (`latent generate --prompts` lines with "prompt_logprobs": N)
against transformers' log_softmax on tiny DeepSeek V3 and V3.2 (DSA) models: every prompt
token's logprob and its N best alternatives (token ids and logprobs), with chunked prefill, beside
other requests, after the prompt's blocks were cached (no hit is taken), and across a
preemption in the middle of the prompt (each token reported once, the same numbers)."""

from __future__ import annotations

import json
import random

import pytest
import torch

from conftest import REPO, load_reference, run_latent

TOP = 4
TOLERANCE = 1e-4


# The models of tests/e2e/test_serve_scoring.py (one pytest run makes them once).
TOKENIZER_DIR = REPO.parent / "shared" / "tokenizers" / "deepseek_v3"


@pytest.fixture(scope="module", params=["deepseek_v3", "deepseek_v32"])
def model(tiny_models, tmp_path_factory, request):
    model_dir = tiny_models.get(request.param, "--tokenizer", str(TOKENIZER_DIR))
    return model_dir, load_reference(model_dir, tmp_path_factory.mktemp("reference"))


def run_batch(model_dir, tmp_path, requests, *flags, name="requests"):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    proc = run_latent("generate", "--model", str(model_dir), "--prompts", str(path),
                      "--check-invariants", *flags)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    summary = json.loads([l for l in proc.stderr.splitlines() if l.startswith("latent: summary ")][-1]
                         [len("latent: summary "):])
    assert summary["used_blocks_at_end"] == 0
    return results, summary


def prompt(seed: int, length: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(2, 250) for _ in range(length)]


def one_shot_and_cut(model_dir, ids, expected, scratch):
    """latent's own logprobs of `ids` in one forward pass (`latent logits`, no engine) and how many
    leading positions agree with transformers' `expected` [len(ids), vocab]. DSA (V3.2) may break
    exact ties of index scores at the top-k boundary either way (see
    tests/parity/test_dsa_parity.py), and positions after such a tie diverge: transformers is the
    reference before it (at least a third of the prompt; all of it without DSA), the one-shot run
    everywhere."""
    import numpy as np

    out = scratch / "one_shot.f32"
    run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)), "--f32-out", str(out))
    logits = torch.from_numpy(np.fromfile(out, dtype=np.float32).reshape(len(ids), -1))
    one_shot = torch.log_softmax(logits, dim=-1)
    bad = torch.nonzero((one_shot - expected).abs().amax(dim=-1) > TOLERANCE)
    cut = int(bad[0]) if len(bad) else len(ids)
    is_dsa = "index_topk" in json.loads((model_dir / "config.json").read_text())
    assert cut >= (len(ids) // 3 if is_dsa else len(ids)), f"latent differs from transformers at {cut}"
    return one_shot, cut


def check(result: dict, ids: list[int], model, scratch) -> None:
    model_dir, reference = model
    with torch.no_grad():
        expected = torch.log_softmax(reference(torch.tensor([ids])).logits[0].float(), dim=-1)
    one_shot, cut = one_shot_and_cut(model_dir, ids, expected, scratch)
    got = result["prompt_logprobs"]
    assert len(got) == len(ids) and got[0] is None
    for i in range(1, len(ids)):
        row = expected[i - 1] if i - 1 < cut else one_shot[i - 1]
        assert got[i]["token"] == ids[i]
        assert abs(got[i]["logprob"] - row[ids[i]].item()) < TOLERANCE, f"token {i}"
        best = torch.topk(row, TOP)
        assert [a["token"] for a in got[i]["top_logprobs"]] == best.indices.tolist(), f"token {i}"
        for a, want in zip(got[i]["top_logprobs"], best.values.tolist()):
            assert abs(a["logprob"] - want) < TOLERANCE, f"token {i}"


def test_prompt_logprobs_equal_transformers(model, tmp_path):
    model_dir, _ = model
    long_ids, short_ids, cached_ids = prompt(1, 200), prompt(2, 9), prompt(3, 120)
    requests = [
        # Caches cached_ids' blocks before the scoring request for it arrives.
        {"ids": cached_ids, "max_tokens": 1},
        {"ids": long_ids, "prompt_logprobs": TOP, "max_tokens": 0, "arrival_step": 1},
        {"ids": short_ids, "prompt_logprobs": TOP, "max_tokens": 3, "ignore_eos": True,
         "arrival_step": 1},
        {"ids": prompt(4, 60), "max_tokens": 5, "arrival_step": 2},  # Beside them, asks nothing.
        {"ids": cached_ids, "prompt_logprobs": TOP, "max_tokens": 0, "arrival_step": 8},
    ]
    results, summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16",
                                 "--max-batch-tokens", "48")
    check(results[1], long_ids, model, tmp_path)
    assert results[1]["ids"] == [] and results[1]["finish_reason"] == "length"
    check(results[2], short_ids, model, tmp_path)
    assert len(results[2]["ids"]) == 3
    assert "prompt_logprobs" not in results[3]
    check(results[4], cached_ids, model, tmp_path)
    # Only the ordinary request's prompt could hit; the scoring one recomputed.
    assert summary["prefix_hit_tokens"] == 0
    # Generation after the prompt is what it is without prompt logprobs.
    plain, _ = run_batch(model_dir, tmp_path, [{"ids": short_ids, "max_tokens": 3, "ignore_eos": True}],
                         name="plain")
    assert results[2]["ids"] == plain[0]["ids"]


def test_prompt_logprobs_survive_preemption(model, tmp_path):
    """An older request decoding while a long prompt is scored in chunks: with 20 blocks of 16
    tokens the scored prompt is preempted mid-way and resumes (taking a prefix hit over the
    positions already reported only); every token is reported once, with the numbers of a run
    that had room."""
    model_dir, _ = model
    scored = prompt(5, 300)
    requests = [{"ids": prompt(6, 30), "max_tokens": 120, "ignore_eos": True},
                {"ids": scored, "prompt_logprobs": TOP, "max_tokens": 2, "ignore_eos": True,
                 "arrival_step": 1}]
    roomy, _ = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16",
                         "--max-batch-tokens", "32", name="roomy")
    pressured, summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16",
                                   "--max-batch-tokens", "32", "--num-blocks", "20", name="pressured")
    assert summary["preemptions"] > 0, "the small cache forced no preemption"
    assert pressured == roomy
    check(pressured[1], scored, model, tmp_path)
