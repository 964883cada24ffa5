"""SamplingParams.prompt_logprobs (RequestOutput.prompt_logprobs) and skip_special_tokens, on the
committed demo model: its tokenizer has special tokens (<|user|>, <|assistant|>, <|end|>), and
after a user turn its greedy reply starts with <|assistant|>. A few seconds."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from conftest import BUILD_PYTHON, REPO, run_latent

try:
    import latent
except ImportError as e:
    raise RuntimeError(f"{BUILD_PYTHON}/latent is missing or broken ({e}): run `make build` with nanobind "
                       "in .venv (requirements-dev.txt)") from e

DEMO = REPO / "models" / "demo"
# Longer than two 16-token blocks, so that a repeat could hit the prefix cache.
PROMPT = ("ROMEO.\nBut soft, what light through yonder window breaks?\n"
          "It is the east, and Juliet is the sun.\n")
TOP = 5
ASSISTANT = "<|assistant|>"
USER_TURN = "<|user|>What say you, my lord?<|end|>"


@pytest.fixture(scope="module")
def llm():
    # f32 math and cache: the arithmetic of `latent logits --precision f32`, the reference below.
    with latent.LLM(str(DEMO), precision="f32", cache_dtype="f32", block_tokens=16, check_invariants=True) as llm:
        yield llm


def reference_logprobs(ids: list[int], tmp_path) -> np.ndarray:
    """log_softmax of the model's logits at every position (`latent logits`, a forward pass of
    its own, not the engine's prefill)."""
    out = tmp_path / "logits.f32"
    meta = json.loads(run_latent("logits", "--model", str(DEMO), "--ids", ",".join(map(str, ids)),
                                 "--f32-out", str(out), "--precision", "f32").stdout)
    logits = np.fromfile(out, dtype="<f4").reshape(meta["tokens"], meta["vocab"]).astype(np.float64)
    logits -= logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def assert_model_logprobs(prompt_logprobs, ids: list[int], reference: np.ndarray) -> None:
    assert len(prompt_logprobs) == len(ids)
    assert prompt_logprobs[0] is None
    for i, entry in enumerate(prompt_logprobs[1:], start=1):
        row = reference[i - 1]  # The distribution over token i, given tokens [0, i).
        assert entry.token_id == ids[i]
        assert entry.logprob == pytest.approx(row[ids[i]], abs=1e-4), i
        best = np.argsort(-row, kind="stable")[:TOP]
        assert [t for t, _ in entry.top_logprobs] == best.tolist(), i
        assert [lp for _, lp in entry.top_logprobs] == pytest.approx(row[best].tolist(), abs=1e-4)


def test_prompt_logprobs_are_the_models(llm, tmp_path):
    ids = llm.encode(PROMPT)
    assert len(ids) > 32
    reference = reference_logprobs(ids, tmp_path)
    params = latent.SamplingParams(temperature=0.8, seed=5, n=2, max_tokens=3, prompt_logprobs=TOP)
    result = llm.generate(PROMPT, params)[0]
    assert result.prompt_token_ids == ids
    assert len(result.outputs) == 2  # n: the prompt's logprobs are the request's, reported once
    assert_model_logprobs(result.prompt_logprobs, ids, reference)
    # The same numbers as generating after a prefix reports for its next token's alternatives.
    for i in (1, len(ids) // 2, len(ids) - 1):
        step = llm.generate([ids[:i]], latent.SamplingParams(temperature=0, max_tokens=1, logprobs=TOP))
        top = step[0].outputs[0].logprobs[0].top_logprobs
        assert [t for t, _ in top] == [t for t, _ in result.prompt_logprobs[i].top_logprobs]
        assert [lp for _, lp in top] == pytest.approx(
            [lp for _, lp in result.prompt_logprobs[i].top_logprobs], abs=1e-4)
    # Not asked for: None.
    assert llm.generate(PROMPT, latent.SamplingParams(max_tokens=1))[0].prompt_logprobs is None


def test_prompt_logprobs_are_whole_after_the_prompt_was_cached(llm, tmp_path):
    """A request asking for prompt logprobs computes every position even when the prefix cache
    holds the prompt's blocks (they have no logits): a repeat gives the same list."""
    prompt = "JULIET.\n" + PROMPT
    ids = llm.encode(prompt)
    plain = latent.SamplingParams(temperature=0, max_tokens=2)
    llm.generate(prompt, plain)
    hits = llm.metrics()["prefix_hit_tokens"]
    llm.generate(prompt, plain)
    assert llm.metrics()["prefix_hit_tokens"] > hits  # the blocks are cached
    params = latent.SamplingParams(temperature=0, max_tokens=2, prompt_logprobs=0)
    first = llm.generate(prompt, params)[0].prompt_logprobs
    second = llm.generate(prompt, params)[0].prompt_logprobs
    assert first == second
    assert len(first) == len(ids) and first[0] is None
    assert all(entry.top_logprobs == [] for entry in first[1:])  # 0: the token's own only
    reference = reference_logprobs(ids, tmp_path)
    for i, entry in enumerate(first[1:], start=1):
        assert entry.logprob == pytest.approx(reference[i - 1][ids[i]], abs=1e-4), i


def test_skip_special_tokens_false_keeps_their_text(llm):
    params = latent.SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    kept = dataclasses.replace(params, skip_special_tokens=False)
    skipped = llm.generate(USER_TURN, params)[0].outputs[0]
    out = llm.generate(USER_TURN, kept)[0].outputs[0]
    assert out.token_ids == skipped.token_ids
    assert llm.decode(out.token_ids[:1], skip_special_tokens=False) == ASSISTANT
    assert not skipped.text.startswith(ASSISTANT)
    assert out.text == llm.decode(out.token_ids, skip_special_tokens=False)
    assert out.text == ASSISTANT + skipped.text
    # The streamed text, and the text matched against stop strings, decode it the same way.
    streamed = "".join(chunk.text for chunk in llm.stream(USER_TURN, kept))
    assert streamed == out.text
    with_stop = llm.generate(USER_TURN, dataclasses.replace(kept, stop=["never in the text"]))
    assert with_stop[0].outputs[0].text == out.text
    stopped = llm.generate(USER_TURN, dataclasses.replace(kept, stop=[ASSISTANT[2:]]))[0].outputs[0]
    assert stopped.text == "<|" and stopped.stop_reason == ASSISTANT[2:]
