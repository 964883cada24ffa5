"""A request's output must not depend on the load (issue 18, point 3): the same seeded request gives
the same tokens and the same logprobs, bit for bit, alone, in a full batch, chunked any way, after
a preemption and on a prefix hit, with the default `--attention auto`.

The model is the tiny DeepSeek V3 with the real 129k vocabulary (128,815 ids), where sampling at temperature 1
over a nearly flat distribution turns any difference in the last bits of the logits into another
token. Its MLA dims make the expanded form pay from prompts of 20 tokens on, so prompts on both
sides of that line run here: `auto` must pick the form per token (expanded for the prompt of a long
prompt, absorbed otherwise), never per chunk, and prefix-cache blocks computed in one form must
never serve a sequence that computes those positions in the other.

It runs twice: on the checkpoint's float weights, and on its fp8 copy (`--fp8`: e4m3 codes with
16 x 16 block scales, the form DeepSeek V3 ships), whose linears run the fp8 kernels with their
own packed layouts, decode tiles and staged batches.
"""

from __future__ import annotations

import json
import random

import pytest

from conftest import REPO, run_latent

TOKENIZER = REPO.parent / "shared" / "tokenizers" / "deepseek_v3"


@pytest.fixture(scope="module", params=["float", "fp8"])
def model_dir(tiny_models, request):
    fp8 = ["--fp8"] if request.param == "fp8" else []
    return tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER), *fp8)


@pytest.fixture(scope="module")
def vocab(model_dir):
    size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    assert size > 128000, "the real DeepSeek V3 vocabulary"
    return size


def run(model_dir, tmp_path, requests, *flags, name):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    proc = run_latent("generate", "--model", str(model_dir), "--prompts", str(path),
                      "--check-invariants", *flags)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    summary = json.loads([l for l in proc.stderr.splitlines()
                          if l.startswith("latent: summary ")][-1][len("latent: summary "):])
    assert summary["used_blocks_at_end"] == 0
    assert [r["index"] for r in results] == list(range(len(requests)))
    return results, summary


def outputs(results):
    """What must not change: the sampled ids and every logprob (floats compared exactly)."""
    return [(r["ids"], [(lp["token"], lp["logprob"]) for lp in r["logprobs"]]) for r in results]


def sampled(ids, seed, max_tokens=12):
    return {"ids": ids, "max_tokens": max_tokens, "temperature": 1.0, "top_p": 0.95, "seed": seed,
            "logprobs": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def workload(vocab):
    """Prompts of 1 to 120 tokens (both forms), and prompts sharing a 32-token prefix whose own
    length puts them on either side of the expanded form's threshold."""
    rng = random.Random(31)
    requests = [sampled([rng.randrange(2, vocab) for _ in range(rng.choice([1, 5, 12, 19, 20, 21, 40, 77, 120]))],
                        seed=1000 + i) for i in range(18)]
    shared = [rng.randrange(2, vocab) for _ in range(16)]
    for i in range(10):
        # 17 to 19 tokens: absorbed; 24 to 60: expanded. Both register and hit the shared block.
        own = rng.choice([1, 2, 3, 8, 20, 44])
        requests.append(sampled(shared + [rng.randrange(2, vocab) for _ in range(own)], seed=2000 + i))
    return requests


@pytest.fixture(scope="module")
def alone(model_dir, workload, tmp_path_factory):
    """Each request alone (one sequence per step, its prompt in one chunk, no prefix cache)."""
    results, _ = run(model_dir, tmp_path_factory.mktemp("alone"), workload, "--max-seqs", "1",
                     "--no-prefix-cache", name="alone")
    return outputs(results)


@pytest.mark.parametrize("budget,block_tokens", [(7, 16), (13, 1), (33, 16), (4096, 16)])
def test_batched_and_chunked_equal_alone(model_dir, workload, alone, tmp_path, budget, block_tokens):
    arriving = [dict(r, arrival_step=i % 7) for i, r in enumerate(workload)]
    results, summary = run(model_dir, tmp_path, arriving, "--max-batch-tokens", str(budget),
                           "--block-tokens", str(block_tokens), "--no-prefix-cache",
                           name=f"batched{budget}")
    assert outputs(results) == alone


def test_preemption_equals_alone(model_dir, workload, alone, tmp_path):
    results, summary = run(model_dir, tmp_path, workload, "--block-tokens", "16", "--num-blocks", "14",
                           "--max-batch-tokens", "64", "--no-prefix-cache", name="preempted")
    assert summary["preemptions"] > 0, "the small cache forced no preemption"
    assert outputs(results) == alone


def test_prefix_hits_equal_alone(model_dir, workload, alone, tmp_path):
    # In arrival order, one at a time, so that every later request can hit the blocks of earlier
    # ones; and then all at once under cache pressure.
    one_by_one = [dict(r, arrival_step=3 * i) for i, r in enumerate(workload)]
    results, summary = run(model_dir, tmp_path, one_by_one, "--block-tokens", "16", name="hits")
    assert summary["prefix_hit_tokens"] >= 16 * 4
    assert outputs(results) == alone
    results, summary = run(model_dir, tmp_path, workload, "--block-tokens", "16", "--num-blocks", "14",
                           "--max-batch-tokens", "48", name="hits-pressured")
    assert summary["preemptions"] > 0
    assert outputs(results) == alone


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def window_model(tiny_models, request):
    """dots3_note's sliding-window layers with a window of 100: wider than the attention kernels'
    64-position blocks, so a window starts inside a block and spans several. In f32 and in bf16
    (bf16 compute: the prefill attention on bf16 position pairs where the CPU has AVX512-BF16)."""
    return tiny_models.get("dots3_note", "--dtype", request.param,
                           config={"sliding_window": 100, "max_position_embeddings": 512})


@pytest.mark.parametrize("budget", [7, 13, 64])
def test_window_prefill_bits_do_not_depend_on_the_chunking(window_model, tmp_path, budget):
    """A sliding-window token's expanded prefill attends its window in one attention_queries call
    with the other tokens of its chunk. Its bits must not depend on where that chunk starts: the
    same seeded requests, their prompts (30 to 250 tokens) run expanded in chunks of the budget
    and batched, give the same tokens and logprobs as each alone (one sequence a step: chunks as
    long as the budget allows, past the window)."""
    rng = random.Random(37)
    requests = [sampled([rng.randrange(2, 257) for _ in range(n)], seed=3000 + i, max_tokens=6)
                for i, n in enumerate([30, 101, 130, 177, 250])]
    flags = ("--attention", "expanded", "--no-prefix-cache")
    alone, _ = run(window_model, tmp_path, requests, "--max-seqs", "1", *flags, name="alone")
    chunked, _ = run(window_model, tmp_path, [dict(r, arrival_step=i) for i, r in enumerate(requests)],
                     "--max-batch-tokens", str(budget), *flags, name=f"chunked{budget}")
    assert outputs(chunked) == outputs(alone)


@pytest.fixture(scope="module")
def dsa_window_model(tiny_models):
    """dots3_note with DSA layers (index_topk 32) and sliding-window layers (window 16). Under
    `--attention auto` a prompt past 24 tokens runs expanded, but the DSA layers switch to the
    absorbed form at position 32, where their selection starts, while the window layers keep the
    whole prompt expanded: two bounds per sequence (cache::RegimeBounds), both in every
    prefix-cache block's identity."""
    return tiny_models.get("dots3_note", "--dtype", "bfloat16",
                           config={"index_topk": 32, "max_position_embeddings": 512})


def test_dsa_and_window_bounds_equal_alone(dsa_window_model, tmp_path):
    """The same seeded requests, with prompts on both sides of each bound and sharing a 32-token
    prefix, give the same tokens and logprobs alone, batched and chunked, after preemptions and
    on prefix hits. The last one is a second turn: the first turn's prompt (40 tokens) and reply,
    then more. Its block of positions 32-47 holds the same tokens as the first turn's, with
    selecting-layer rows computed the same way (absorbed) but window-layer rows not (expanded
    for its 60 positions against 8 expanded in the first turn), so only the second bound keeps
    the hit off that block."""
    vocab = json.loads((dsa_window_model / "config.json").read_text())["vocab_size"]
    rng = random.Random(41)
    requests = [sampled([rng.randrange(2, vocab) for _ in range(n)], seed=4000 + i, max_tokens=9)
                for i, n in enumerate([5, 20, 26, 31, 32, 33, 40, 64, 90, 120])]
    shared = [rng.randrange(2, vocab) for _ in range(32)]
    requests += [sampled(shared + [rng.randrange(2, vocab) for _ in range(own)], seed=5000 + i,
                         max_tokens=9) for i, own in enumerate([1, 3, 17, 40, 60])]
    first_turn = requests[6]
    assert len(first_turn["ids"]) == 40
    alone, _ = run(dsa_window_model, tmp_path, requests, "--max-seqs", "1", "--no-prefix-cache",
                   name="alone")
    reply = alone[6]["ids"]
    assert len(reply) == 9  # its rows up to position 47 computed: the block of 32-47 is full
    second_turn = sampled(first_turn["ids"] + reply + [rng.randrange(2, vocab) for _ in range(11)],
                          seed=6000, max_tokens=9)
    second_alone, _ = run(dsa_window_model, tmp_path, [second_turn], "--no-prefix-cache",
                          name="second-alone")
    requests.append(second_turn)
    alone = outputs(alone) + outputs(second_alone)
    for budget, block_tokens in [(7, 16), (13, 1)]:
        arriving = [dict(r, arrival_step=i % 5) for i, r in enumerate(requests)]
        batched, _ = run(dsa_window_model, tmp_path, arriving, "--max-batch-tokens", str(budget),
                         "--block-tokens", str(block_tokens), "--no-prefix-cache",
                         name=f"batched{budget}")
        assert outputs(batched) == alone, f"budget {budget}, blocks of {block_tokens}"
    preempted, summary = run(dsa_window_model, tmp_path, requests, "--block-tokens", "16",
                             "--num-blocks", "24", "--max-batch-tokens", "64",
                             "--no-prefix-cache", name="preempted")
    assert summary["preemptions"] > 0, "the small cache forced no preemption"
    assert outputs(preempted) == alone
    # One at a time, so that every later request can hit the blocks of earlier ones; the second
    # turn well after the first has ended.
    one_by_one = [dict(r, arrival_step=3 * i) for i, r in enumerate(requests)]
    one_by_one[-1]["arrival_step"] = 3 * len(requests) + 40
    hits, summary = run(dsa_window_model, tmp_path, one_by_one, "--block-tokens", "16", name="hits")
    assert summary["prefix_hit_tokens"] >= 32 * 4 + 32, "the shared prefixes' blocks were not hit"
    assert outputs(hits) == alone
