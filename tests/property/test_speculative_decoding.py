"""Speculative decoding by prompt lookup (`--speculative-tokens`) is exact: every request gives the
same tokens, logprobs and top logprobs, bit for bit, as decoding one token per step, with drafts
accepted and rejected, trimmed by the step's budget, under preemption, on prefix hits and with fp8
cache rows. The engine draws each draft token's row as that token's own step would (the kernels
give a row the same bits whatever else the step runs), so a draft changes the number of steps only.

Two kinds of check:
- tiny random models of every family that allows drafts (14), made to "say" a periodic text with
  breaks (`--debug-replay`): the drafts are often right and sometimes wrong, and every reported
  logprob and top logprob comes from a row that a draft step computed;
- the trained demo model (models/demo), which repeats itself under greedy decoding as small models
  do, decoding greedily and sampling (seeded, with penalties, n > 1).
Models whose linear-attention layers keep a per-sequence state refuse drafts with a clear error.
"""

from __future__ import annotations

import json
import random

import pytest

from conftest import REPO, run_latent
from test_engine_properties import run_batch as run

DEMO = REPO / "models" / "demo"

FAMILIES = ["deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa", "mistral4", "minicpm3",
            "longcat_flash", "axk1", "axk2", "mistral_large4", "hy_v4", "dots3_note", "youtu",
            "glm4_moe_lite"]
# Per-sequence linear-attention state: drafts refused.
STATEFUL = ["kimi_linear", "glm5_next", "bailing_hybrid"]


def outputs(results):
    """Everything a client sees of each request: ids, logprobs with their top alternatives, the
    finish reason, each sample's."""
    assert all("error" not in r for r in results), results
    return [{k: v for k, v in r.items() if k != "index"} for r in results]


def replay_text():
    """Periodic runs with breaks between them: a draft copied from the last period is right
    inside a run and wrong across a break."""
    rng = random.Random(11)
    ids = []
    for period, repeats in [(5, 6), (3, 5), (7, 4), (1, 6), (4, 5)]:
        unit = [rng.randint(2, 250) for _ in range(period)]
        ids += unit * repeats
    return ids


@pytest.fixture(scope="module")
def replay_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("replay") / "replay.json"
    path.write_text(json.dumps(replay_text()))
    return path


def replay_workload():
    rng = random.Random(3)
    text = replay_text()
    requests = []
    for i in range(14):
        # Some prompts already hold the text's first run, so a draft comes from the prompt at once.
        prompt = [rng.randint(2, 250) for _ in range(rng.choice([1, 4, 17, 40, 90]))]
        if i % 3 == 0:
            prompt += text[:10]
        requests.append({"ids": prompt, "max_tokens": rng.choice([1, 2, 9, 30, len(text) + 5]),
                         "logprobs": 2, "ignore_eos": True, "arrival_step": rng.randint(0, 12)})
    return requests


@pytest.mark.parametrize("family", FAMILIES)
def test_drafts_change_no_logprob(tiny_models, family, replay_file, tmp_path):
    model_dir = tiny_models.get(family)
    requests = replay_workload()
    replay = ["--debug-replay", str(replay_file)]
    plain, plain_summary = run(model_dir, tmp_path, requests, *replay, "--block-tokens", "16",
                               name="plain")
    flag_sets = [
        ["--speculative-tokens", "4", "--block-tokens", "16"],
        # A small budget trims drafts to what the step has left; 1-token blocks make a draft take
        # blocks of its own, which rejected tokens give back.
        ["--speculative-tokens", "7", "--max-batch-tokens", "11", "--block-tokens", "1"],
        # A cache too small for all at once: preemptions, and drafts only into blocks nobody
        # else needs.
        ["--speculative-tokens", "3", "--block-tokens", "16", "--num-blocks", "24",
         "--max-batch-tokens", "64", "--speculative-ngram-min", "2"],
    ]
    for i, flags in enumerate(flag_sets):
        drafted, summary = run(model_dir, tmp_path, requests, *replay, *flags, name="drafted")
        assert outputs(drafted) == outputs(plain), flags
        assert summary["accepted_draft_tokens"] > 0, "no draft was ever right"
        assert summary["draft_tokens"] > summary["accepted_draft_tokens"], "no draft was ever wrong"
        if i == 0:
            assert summary["steps"] < plain_summary["steps"]
        if "--num-blocks" in flags:
            assert summary["preemptions"] > 0, "the small cache forced no preemption"


@pytest.mark.parametrize("cache_dtype,attention", [("bf16", "auto"), ("fp8", "auto"),
                                                   ("bf16", "expanded"), ("bf16", "absorbed")])
def test_drafts_with_prefix_hits_cache_dtypes_and_forms(tiny_models, replay_file, tmp_path,
                                                        cache_dtype, attention):
    model_dir = tiny_models.get("deepseek_v3")
    rng = random.Random(8)
    shared = [rng.randint(2, 250) for _ in range(48)]
    # One after another, so that each hits the shared prefix's 3 full blocks, which the first
    # request registered.
    requests = [{"ids": shared + [rng.randint(2, 250) for _ in range(rng.randint(1, 20))],
                 "max_tokens": 40, "logprobs": 1, "ignore_eos": True, "arrival_step": 30 * i}
                for i in range(5)]
    # Then second turns: an earlier request's prompt and output (what the replay makes it say)
    # and more. Their prefix hits cover blocks whose rows draft steps wrote, so a block
    # registered with the row of a rejected draft token would change their logprobs.
    said = replay_text()[:40]
    requests += [{"ids": r["ids"] + said + [rng.randint(2, 250) for _ in range(5)],
                  "max_tokens": 20, "logprobs": 1, "ignore_eos": True, "arrival_step": 200 + 30 * i}
                 for i, r in enumerate(requests[:3])]
    flags = ["--debug-replay", str(replay_file), "--cache-dtype", cache_dtype, "--block-tokens", "16",
             "--attention", attention]
    plain, _ = run(model_dir, tmp_path, requests, *flags, "--no-prefix-cache", name="plain")
    drafted, summary = run(model_dir, tmp_path, requests, *flags, "--speculative-tokens", "5",
                           name="drafted")
    # The shared prefix 4 times, and each second turn's first turn: at least 80 of its 88 or more
    # tokens in one form; under auto only its prompt's blocks, which the first turn computed
    # expanded, as the second turn does (its generated tokens ran absorbed, which the second turn
    # computes expanded: blocks of one form never serve the other).
    first_turn = 48 if attention == "auto" else 80
    assert summary["prefix_hit_tokens"] >= 4 * 48 + 3 * first_turn, summary
    assert summary["accepted_draft_tokens"] > 0
    assert summary["draft_tokens"] > summary["accepted_draft_tokens"]
    assert outputs(drafted) == outputs(plain)


@pytest.mark.parametrize("draft_tokens", [3, 7])
def test_dsa_drafts_at_a_context_far_past_their_selections(tiny_models, replay_file, tmp_path,
                                                           draft_tokens):
    """A verify run reads the union of its tokens' DSA selections (ops/mla_attention.cc,
    SelectionUnion): by marks over the context where they cover a good share of it, by a sort
    where they are sparse. DeepSeek V3.2 (index_topk 8) at contexts of 300-480 tokens: a run of
    4 tokens selects at most 32 positions (sparse: sorted), one of 8 at most 64 (marks). Both
    give every logprob bit for bit as one token per step."""
    model_dir = tiny_models.get("deepseek_v32")
    rng = random.Random(19)
    requests = [{"ids": [rng.randint(2, 250) for _ in range(n)] + replay_text()[:10],
                 "max_tokens": 30, "logprobs": 1, "ignore_eos": True}
                for n in (290, 380, 440)]
    flags = ["--debug-replay", str(replay_file), "--block-tokens", "16", "--no-prefix-cache"]
    plain, _ = run(model_dir, tmp_path, requests, *flags, name="plain")
    drafted, summary = run(model_dir, tmp_path, requests, *flags, "--speculative-tokens",
                           str(draft_tokens), name="drafted")
    assert summary["accepted_draft_tokens"] > 0
    assert outputs(drafted) == outputs(plain)


def demo_prompts(count):
    """Prompts of 4 lines each of the demo model's held-out text."""
    lines = [l for l in (DEMO / "heldout.txt").read_text(encoding="utf-8").splitlines() if l.strip()]
    return ["\n".join(lines[4 * i:4 * i + 4]) + "\n" for i in range(count)]


def demo_workload():
    prompts = demo_prompts(10)
    # A prompt that repeats itself, as a quoted passage or an edited file does.
    prompts.append(prompts[0] * 3)
    requests = [{"prompt": p, "max_tokens": 48, "logprobs": 3} for p in prompts]
    sampled = [{"prompt": p, "max_tokens": 32, "logprobs": 1, "temperature": 0.7, "top_p": 0.9,
                "seed": 40 + i, "repetition_penalty": 1.05, "frequency_penalty": 0.1}
               for i, p in enumerate(prompts[:5])]
    sampled.append({"prompt": prompts[-1], "max_tokens": 24, "temperature": 0.3, "seed": 7, "n": 3})
    return requests + sampled


def test_demo_model_outputs_are_unchanged(tmp_path):
    requests = demo_workload()
    plain, plain_summary = run(DEMO, tmp_path, requests, name="plain")
    greedy = len(requests) - 6
    for flags in (["--speculative-tokens", "4"],
                  ["--speculative-tokens", "8", "--speculative-ngram-max", "2",
                   "--max-batch-tokens", "24"]):
        drafted, summary = run(DEMO, tmp_path, requests, *flags, name="drafted")
        assert outputs(drafted) == outputs(plain), flags
        assert summary["generated_tokens"] == plain_summary["generated_tokens"]
    # The greedy requests alone: the model repeats itself, most drafts are right and the steps
    # are far fewer.
    plain, plain_summary = run(DEMO, tmp_path, requests[:greedy], name="greedy-plain")
    drafted, summary = run(DEMO, tmp_path, requests[:greedy], "--speculative-tokens", "4",
                           name="greedy-drafted")
    assert outputs(drafted) == outputs(plain)
    # Stop strings that end a request inside an accepted draft (the tokens after it in the same
    # step are dropped): the middle half of what the model says, which, as it loops, first
    # appears only once several periods of the loop have been drafted.
    stops = [dict(r, stop=[p["text"][len(p["text"]) // 4:3 * len(p["text"]) // 4]])
             for r, p in zip(requests[:3], plain)]
    plain_stops, _ = run(DEMO, tmp_path, stops, name="stops-plain")
    drafted_stops, stop_summary = run(DEMO, tmp_path, stops, "--speculative-tokens", "4",
                                      name="stops-drafted")
    assert all(r["finish_reason"] == "stop" and r["stop_reason"] for r in plain_stops), plain_stops
    assert outputs(drafted_stops) == outputs(plain_stops)
    assert stop_summary["accepted_draft_tokens"] > 0
    # (About 0.9 and 0.4 on the machines measured; loose bounds, as another CPU's bf16 rounding
    # may make the model say other words.)
    assert summary["accepted_draft_tokens"] >= 0.3 * summary["draft_tokens"] > 0, summary
    assert summary["steps"] < plain_summary["steps"], (summary, plain_summary)


def test_sampled_drafts_that_prove_right_change_nothing(tmp_path):
    """Sampled requests alone, cool enough that the demo model's loops make drafts right: each
    draft row's draw reads the tokens before it (penalties) and their count (the seeded
    generator), which the draft tokens stand in for while DrawRows draws them side by side."""
    requests = [{"prompt": prompt, "max_tokens": 48, "logprobs": 2, "temperature": 0.3,
                 "seed": 90 + i, "repetition_penalty": 1.02, "presence_penalty": 0.1,
                 "frequency_penalty": 0.05} for i, prompt in enumerate(demo_prompts(6))]
    # A draft row's draw takes the request's logit_bias and allowed_token_ids as its own step's
    # would: a forced token (every draft of it right), a mild bias, a restricted vocabulary.
    prompts = demo_prompts(8)
    requests += [
        {"prompt": prompts[6], "max_tokens": 24, "logprobs": 2, "logit_bias": {"100": 100}},
        {"prompt": prompts[7], "max_tokens": 40, "logprobs": 2, "temperature": 0.3, "seed": 5,
         "logit_bias": {"100": 2.0, "101": -100, "50": 1.5}},
        {"prompt": prompts[0], "max_tokens": 32, "logprobs": 1,
         "allowed_token_ids": list(range(40, 400))},
    ]
    plain, _ = run(DEMO, tmp_path, requests, name="plain")
    drafted, summary = run(DEMO, tmp_path, requests, "--speculative-tokens", "4", name="drafted")
    assert summary["accepted_draft_tokens"] > 0, summary
    assert outputs(drafted) == outputs(plain)
    assert plain[6]["ids"] == [100] * 24, plain[6]
    assert set(plain[8]["ids"]) <= set(range(40, 400)), plain[8]


def refusal(model_dir, tmp_path, *flags) -> str:
    """Runs one request with `flags`, which must be refused; returns the message."""
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"ids": [5, 6, 7], "max_tokens": 4}) + "\n")
    proc = run_latent("generate", "--model", str(model_dir), "--prompts", str(path), *flags,
                      check=False)
    assert proc.returncode != 0
    return proc.stderr


@pytest.mark.parametrize("family", STATEFUL)
def test_stateful_models_refuse_drafts(tiny_models, family, tmp_path):
    message = refusal(tiny_models.get(family), tmp_path, "--speculative-tokens", "2")
    assert f"speculative decoding is not supported for {family}" in message, message
    assert "per-sequence state" in message


def test_bad_ngram_sizes_are_refused(tmp_path):
    message = refusal(DEMO, tmp_path, "--speculative-tokens", "2", "--speculative-ngram-min", "4",
                      "--speculative-ngram-max", "2")
    assert "speculative n-gram sizes must satisfy 1 <= min <= max, got min 4 and max 2" in message


def test_generate_ids_refuses_engine_only_flags():
    # --ids decodes one sequence without the engine: its drafts would silently do nothing.
    proc = run_latent("generate", "--model", str(DEMO), "--ids", "5,6,7", "--speculative-tokens",
                      "2", check=False)
    assert proc.returncode != 0
    assert "--speculative-tokens and --debug-replay need --prompts or --prompt" in proc.stderr
