"""Properties of the engine (continuous batching over the paged latent cache), checked on tiny
random DeepSeek V3, V3.2 and GLM-5 (DSA: a second cached row, top-k selection) models:
- batched greedy output equals each request run alone, whatever the token budget, block size and
  arrival steps; chunked prefill equals one-shot prefill;
- preemption (forced by a small cache) and prefix hits change nothing in the outputs;
- seeded sampling gives the same tokens whatever the batch;
- block accounting holds after every step (--check-invariants) and the pool is full at the end.
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from conftest import latent_generate, latent_logits, run_latent

NUM_PROMPTS = 50


def run_batch(model_dir, tmp_path, requests, *flags, name="requests"):
    """Runs `latent generate --prompts` with invariant checks; returns (results, summary)."""
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    proc = run_latent("generate", "--model", str(model_dir), "--prompts", str(path),
                      "--check-invariants", *flags)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    summary_lines = [l for l in proc.stderr.splitlines() if l.startswith("latent: summary ")]
    summary = json.loads(summary_lines[-1][len("latent: summary "):])
    assert [r["index"] for r in results] == list(range(len(requests)))
    assert summary["used_blocks_at_end"] == 0, "blocks leaked after every request ended"
    return results, summary


def eos_ids(model_dir) -> set[int]:
    """The checkpoint's EOS ids (its generation_config.json, which every preset writes)."""
    eos = json.loads((model_dir / "generation_config.json").read_text())["eos_token_id"]
    return set(eos) if isinstance(eos, list) else {eos}


@pytest.fixture(scope="module", params=["deepseek_v3", "deepseek_v32", "glm_moe_dsa", "mistral4", "minicpm3",
                                        "longcat_flash", "axk2", "mistral_large4",
                                        "hy_v4",
                                        "kimi_linear", "dots3_note", "glm5_next", "bailing_hybrid"])
def model_dir(tiny_models, request):
    return tiny_models.get(request.param)


@pytest.fixture(scope="module")
def workload(model_dir):
    """50 prompts of random lengths (1..300) arriving at random steps, and each one's output when
    run alone (no engine: one-shot prefill on a contiguous cache, then decode)."""
    rng = random.Random(1234)
    requests = []
    for i in range(NUM_PROMPTS):
        length = rng.choice([1, 2, 3]) if i < 5 else rng.randint(1, 300)
        requests.append({
            "ids": [rng.randint(2, 250) for _ in range(length)],
            "max_tokens": rng.randint(1, 10),
            "ignore_eos": i % 2 == 0,
            "arrival_step": rng.randint(0, 40),
        })
    alone = []
    for r in requests:
        ids = latent_generate(model_dir, r["ids"], r["max_tokens"], ignore_eos=r["ignore_eos"])
        alone.append(ids)
    # The workload must exercise early stops and full lengths both.
    assert any(len(a) < r["max_tokens"] for a, r in zip(alone, requests))
    return requests, alone


@pytest.mark.parametrize("block_tokens,budget", [(1, 1), (16, 1), (16, 7), (16, 64), (64, 33),
                                                 (64, 300), (1, 4096), (64, 4096)])
def test_batched_equals_alone(model_dir, workload, tmp_path, block_tokens, budget):
    requests, alone = workload
    results, summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", str(block_tokens),
                                 "--max-batch-tokens", str(budget))
    eos = eos_ids(model_dir)
    for r, a, req in zip(results, alone, requests):
        assert r["ids"] == a, f"request {r['index']} ({len(req['ids'])} prompt tokens)"
        expected = "length" if len(a) == req["max_tokens"] and (req["ignore_eos"] or a[-1] not in eos) else "stop"
        assert r["finish_reason"] == expected
    if budget < 300:
        # Chunked prefill really happened: more steps than the longest prompt needs in one go.
        assert summary["steps"] > max(len(r["ids"]) for r in requests) // budget


@pytest.mark.parametrize("chunk,block_tokens", [(1, 1), (7, 16), (64, 64), (100, 16)])
@pytest.mark.parametrize("form", ["absorbed", "expanded"])
def test_chunked_prefill_equals_one_shot(model_dir, chunk, block_tokens, form):
    ids = random.Random(chunk).sample(range(2, 250), 200)
    one_shot = latent_logits(model_dir, ids, form)
    chunked = np.asarray(json.loads(run_latent(
        "logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)), "--attention", form,
        "--chunk-tokens", str(chunk), "--block-tokens", str(block_tokens)).stdout)["logits"])
    err = np.abs(chunked - one_shot).max()
    assert err <= 1e-5 * np.abs(one_shot).max(), f"max |chunked - one-shot| {err}"


def test_preemption_loses_nothing(model_dir, workload, tmp_path):
    requests, alone = workload
    # 40 blocks of 16 tokens: enough for the longest request alone, far too few for all at once.
    results, summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16",
                                 "--num-blocks", "40", "--max-batch-tokens", "256")
    assert summary["preemptions"] > 0, "the small cache forced no preemption"
    assert [r["ids"] for r in results] == alone


def is_hybrid(model_dir) -> bool:
    """A model with linear-attention layers (per-sequence state): latent refuses prefix-cache hits
    on it, since no block holds the state at the end of a hit (kimi_linear: linear_attn_config;
    glm5_next: "linear_attention" layer_types in its text_config)."""
    config = json.loads((model_dir / "config.json").read_text())
    config = config.get("text_config", config)
    return "linear_attn_config" in config or "linear_attention" in config.get("layer_types", [])


def test_prefix_hits_equal_misses(model_dir, tmp_path):
    rng = random.Random(7)
    system = [rng.randint(2, 250) for _ in range(150)]
    # The first request computes the shared prefix; the others arrive once it is cached (a
    # sliding-window model runs chunks of its window where blocks are short: up to 12 steps), then
    # every 3 steps, each hitting all 144 tokens of the prefix's 9 full blocks.
    requests = [{"ids": system + [rng.randint(2, 250) for _ in range(rng.randint(1, 40))],
                 "max_tokens": 6, "ignore_eos": True, "arrival_step": 12 + 3 * i if i else 0}
                for i in range(12)]
    # One request equal to a prefix-aligned prompt: the match must stop before its last token.
    requests.append({"ids": system[:128], "max_tokens": 4, "ignore_eos": True, "arrival_step": 40})
    hits, hit_summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16", name="hits")
    misses, miss_summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16",
                                     "--no-prefix-cache", name="misses")
    if is_hybrid(model_dir):
        assert hit_summary["prefix_hit_tokens"] == 0, "a hybrid model took a prefix hit"
    else:
        assert hit_summary["prefix_hit_tokens"] >= 11 * 144
    assert miss_summary["prefix_hit_tokens"] == 0
    assert [r["ids"] for r in hits] == [r["ids"] for r in misses]
    # And preemption with prefix caching on: all at once, decodes long enough to need new blocks
    # in a cache that holds the shared prefix and a few requests' own blocks.
    crowd = [dict(r, arrival_step=0, max_tokens=40) for r in requests[:-1]]
    plain, _ = run_batch(model_dir, tmp_path, crowd, "--block-tokens", "16", "--no-prefix-cache",
                         name="crowd-plain")
    pressured, summary = run_batch(model_dir, tmp_path, crowd, "--block-tokens", "16",
                                   "--num-blocks", "20", name="crowd-pressured")
    if is_hybrid(model_dir):
        # No shared blocks, so the small cache admits one request at a time and never preempts
        # (test_preemption_loses_nothing preempts hybrid models); no hits either.
        assert summary["prefix_hit_tokens"] == 0
    else:
        assert summary["preemptions"] > 0 and summary["prefix_hit_tokens"] > 0
    assert [r["ids"] for r in pressured] == [r["ids"] for r in plain]


def test_seeded_sampling_is_independent_of_the_batch(model_dir, tmp_path):
    rng = random.Random(5)
    sampled = [{"ids": [rng.randint(2, 250) for _ in range(rng.randint(1, 80))], "max_tokens": 12,
                "temperature": 0.9, "top_k": 50, "top_p": 0.95, "min_p": 0.01, "seed": 100 + i,
                "repetition_penalty": 1.1, "presence_penalty": 0.3, "frequency_penalty": 0.2,
                "ignore_eos": True} for i in range(10)]
    sampled.append({"ids": [5, 6, 7], "max_tokens": 8, "temperature": 1.0, "seed": 9, "n": 4,
                    "ignore_eos": True})
    # logit_bias and allowed_token_ids: greedy (off the raw row's fast path, which the unbiased
    # noise around it takes) and sampled with penalties and logprobs.
    steered = [
        {"ids": [rng.randint(2, 250) for _ in range(30)], "max_tokens": 6, "ignore_eos": True,
         "logit_bias": {"11": 100}},
        {"ids": [rng.randint(2, 250) for _ in range(50)], "max_tokens": 12, "temperature": 1.0,
         "seed": 3, "top_k": 40, "repetition_penalty": 1.1, "ignore_eos": True, "logprobs": 2,
         "logit_bias": {**{str(t): 4.0 for t in (4, 8, 15, 16, 23, 42)}, "2": -100}},
        {"ids": [rng.randint(2, 250) for _ in range(20)], "max_tokens": 12, "temperature": 1.2,
         "seed": 4, "ignore_eos": True, "logprobs": 1, "allowed_token_ids": [3, 9, 27, 81, 243],
         "logit_bias": {"9": -100}},
    ]
    sampled += steered
    noise = [{"ids": [rng.randint(2, 250) for _ in range(rng.randint(1, 200))], "max_tokens": 8,
              "arrival_step": rng.randint(0, 10)} for _ in range(20)]
    alone = [run_batch(model_dir, tmp_path, [r], name=f"alone{i}")[0][0] for i, r in enumerate(sampled)]
    mixed, _ = run_batch(model_dir, tmp_path, noise[:10] + sampled + noise[10:], "--max-batch-tokens",
                         "50", "--block-tokens", "16", "--num-blocks", "60", name="mixed")
    together = mixed[10:10 + len(sampled)]
    for a, t in zip(alone, together):
        assert {k: v for k, v in a.items() if k != "index"} == {k: v for k, v in t.items() if k != "index"}
    # Sampling is really random: different seeds give different tokens, n samples differ.
    assert len({tuple(a["ids"]) for a in alone[:10]}) == 10
    assert len({tuple(s["ids"]) for s in alone[10]["samples"]}) > 1
    # And the steering is real: forced, biased towards, restricted.
    assert alone[11]["ids"] == [11] * 6, alone[11]
    assert 2 not in alone[12]["ids"] and set(alone[12]["ids"]) & {4, 8, 15, 16, 23, 42}, alone[12]
    assert set(alone[13]["ids"]) <= {3, 27, 81, 243}, alone[13]


def test_samples_go_on_when_the_first_ends_on_its_first_token(model_dir, tmp_path):
    """n > 1 samples fork from sample 0 once it has computed the prompt. With max_tokens 1 sample
    0 ends on the token it draws in that step; its siblings must still fork from its blocks (and
    linear-attention state), not from blocks it has just given back: with prefix caching off and
    two identical prompts in one step, freed blocks are reused at once. Each request gives what
    it gives alone, and no block is left held."""
    prompt = list(range(5, 45))  # 2 full blocks of 16 and a partial one
    requests = [{"ids": prompt, "max_tokens": 1, "n": 3, "temperature": 1.0, "seed": 70 + i}
                for i in range(3)]
    for flags in (["--no-prefix-cache"], []):
        results, summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16", *flags,
                                     name="forks")
        assert summary["used_blocks_at_end"] == 0
        for i, r in enumerate(requests):
            alone, _ = run_batch(model_dir, tmp_path, [r], "--block-tokens", "16", *flags,
                                 name=f"fork-alone{i}")
            assert [s["ids"] for s in results[i]["samples"]] == \
                [s["ids"] for s in alone[0]["samples"]]
            assert all(len(s["ids"]) == 1 for s in results[i]["samples"])


def test_cancellation_frees_blocks(model_dir, tmp_path):
    requests = [{"ids": list(range(2, 2 + 100)), "max_tokens": 50, "ignore_eos": True,
                 "cancel_step": 5},
                {"ids": list(range(3, 3 + 60)), "max_tokens": 5, "ignore_eos": True}]
    results, summary = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16")
    assert results[0]["finish_reason"] == "cancelled" and len(results[0]["ids"]) < 50
    assert results[1]["finish_reason"] == "length" and len(results[1]["ids"]) == 5


def test_requests_that_can_never_fit_fail_alone(model_dir, tmp_path):
    requests = [{"ids": [5] * 100, "max_tokens": 2},
                {"ids": [5] * 400, "max_tokens": 200},  # beyond max_position_embeddings (512)
                {"ids": [5] * 300, "max_tokens": 10},   # beyond the cache (16 blocks of 16)
                {"ids": [], "max_tokens": 2},
                {"ids": [5, 99999]},
                {"ids": [5], "temperature": -1},
                {"ids": "nope"}]
    results, _ = run_batch(model_dir, tmp_path, requests, "--block-tokens", "16", "--num-blocks", "16")
    assert len(results[0]["ids"]) == 2
    assert "max_position_embeddings" in results[1]["error"]
    assert "can never fit in the cache" in results[2]["error"]
    assert "prompt is empty" in results[3]["error"]
    assert "outside the vocabulary" in results[4]["error"]
    assert "temperature" in results[5]["error"]
    assert "'ids'" in results[6]["error"]


@pytest.mark.parametrize("cache_dtype,size", [("f32", 4), ("bf16", 2)])
def test_reported_cache_bytes_per_token(model_dir, tmp_path, cache_dtype, size):
    config = json.loads((model_dir / "config.json").read_text())
    config = config.get("text_config", config)  # a vision-language wrapper's language model
    _, summary = run_batch(model_dir, tmp_path, [{"ids": [5, 6], "max_tokens": 1}], "--cache-dtype",
                           cache_dtype)
    layers = config["num_hidden_layers"]
    # A layer caches its latent unless it reads another layer's (KV sharing); NoPE layers
    # (no_rope_layers 0) have no rotary part in it.
    rope = config.get("no_rope_layers", [1] * layers)
    source = config.get("kv_source_layers", list(range(layers)))
    # Linear-attention (KDA) layers cache no rows, only per-sequence state.
    layer_types = config.get("layer_types", ["full_attention"] * layers)
    mla = [t != "linear_attention" for t in layer_types]
    # dots3_note: each layer its own MLA shape (per_layer_config, keyed by layer index); its
    # sliding-window layers have no indexer.
    shapes = config.get("per_layer_config") or {}
    shape = [shapes.get(str(l), config) for l in range(layers)]
    expected = sum(shape[l]["kv_lora_rank"] + shape[l]["qk_rope_head_dim"] * rope[l]
                   for l in range(layers) if source[l] == l and mla[l]) * size
    if "index_topk" in config:  # DSA: plus the indexer key row of every MLA layer with an indexer
        kinds = config.get("indexer_types", ["full"] * layers)
        indexers = sum(kinds[l] == "full" and mla[l] and layer_types[l] != "sliding_attention"
                       for l in range(layers))
        # GLM-5-Next's KPool row packs each token's key and gate score: twice the values.
        width = 2 if "index_kpool" in config else 1
        expected += indexers * width * config["index_head_dim"] * size
    assert summary["cache_bytes_per_token"] == expected
