"""Scoring through `latent serve`: /v1/completions with `echo`, `logprobs` over the prompt and
`max_tokens: 0`, as evaluation harnesses send it. Prompt logprobs (and their top-N alternatives)
equal transformers' log_softmax of the same prompt within 1e-4 on tiny DeepSeek V3 and V3.2
(DSA) models, for prompts longer than the step's token budget (chunked prefill) and after the
prompt's blocks are in the prefix cache (a scoring request does not take the hit: it recomputes,
since cached blocks have no logits); for token-id, text and list prompts, streamed and not, with
and without a completion after the prompt."""

from __future__ import annotations

import functools
import json
import random

import pytest
import torch

from conftest import load_reference, run_latent
from e2e_harness import MODEL_NAME, TOKENIZER_DIR, LatentServer, sse_events

C = "/v1/completions"
BUDGET = 64      # --max-batch-tokens: the scored prompts are longer, so they run in chunks.
LENGTH = 150
TOP = 5
TOLERANCE = 1e-4


@pytest.fixture(scope="module", params=["deepseek_v3", "deepseek_v32"])
def scoring(request, tiny_models, tmp_path_factory):
    """(server, model dir, transformers model) for a tiny model with the deepseek_v3 tokenizer."""
    model_dir = tiny_models.get(request.param, "--tokenizer", str(TOKENIZER_DIR))
    scratch = tmp_path_factory.mktemp("scoring")
    srv = LatentServer(model_dir, scratch / "serve.log", "--block-tokens", "16", "--num-blocks", "512",
                       "--max-batch-tokens", str(BUDGET), "--check-invariants")
    reference = load_reference(model_dir, scratch)
    yield srv, model_dir, (model_dir, reference, scratch)
    assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="module")
def hf_tokenizer(scoring):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(scoring[1])


@functools.cache
def tokenizer_of(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def reference_logprobs(reference, ids: list[int]) -> torch.Tensor:
    """[len(ids), vocab]: row i is log p(. | ids[:i + 1]) under transformers (f32)."""
    with torch.no_grad():
        logits = reference(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits, dim=-1)


def random_prompt(seed: int, length: int = LENGTH) -> list[int]:
    rng = random.Random(seed)
    return [rng.randint(100, 20000) for _ in range(length)]


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


def check_prompt_logprobs(logprobs: dict, ids: list[int], reference, top: int = TOP) -> None:
    """The first len(ids) entries of a completions `logprobs` object score `ids` as transformers
    does: token 0 null, token i log p(ids[i] | ids[:i]), and in top_logprobs token i itself with
    the `top` best alternatives
    (`reference`: model dir, transformers model, scratch dir)."""
    model_dir, model, scratch = reference
    decode = tokenizer_of(model_dir).decode
    expected = reference_logprobs(model, ids)
    one_shot, cut = one_shot_and_cut(model_dir, ids, expected, scratch)
    assert logprobs["token_logprobs"][0] is None and logprobs["top_logprobs"][0] is None
    for i in range(1, len(ids)):
        row = expected[i - 1] if i - 1 < cut else one_shot[i - 1]
        got = logprobs["token_logprobs"][i]
        assert abs(got - row[ids[i]].item()) < TOLERANCE, f"token {i}: {got} vs {row[ids[i]].item()}"
        # The prompt token and its `top` best alternatives (OpenAI's up to logprobs + 1 entries),
        # keyed by token text: ids of one text (byte pieces shown as U+FFFD) merge into one key,
        # which keeps the better logprob.
        listed = [ids[i]] + torch.topk(row, top).indices.tolist()
        want: dict[str, float] = {}
        for t in listed:
            text = decode([t])
            want[text] = max(want.get(text, -float("inf")), row[t].item())
        alternatives = logprobs["top_logprobs"][i]
        assert set(alternatives) == set(want), f"token {i}: {alternatives} vs {want}"
        for text, want_lp in want.items():
            assert abs(alternatives[text] - want_lp) < TOLERANCE, \
                f"token {i} {text!r}: {alternatives[text]} vs {want_lp}"


def score(srv, prompt, **fields):
    body = {"model": MODEL_NAME, "prompt": prompt, "echo": True, "logprobs": TOP, "max_tokens": 0,
            "temperature": 0, **fields}
    status, resp = srv.post(C, body)
    assert status == 200, resp
    return resp


def test_score_token_ids_chunked(scoring, hf_tokenizer):
    srv, _, reference = scoring
    ids = random_prompt(1)
    resp = score(srv, ids)
    choice = resp["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["text"] == hf_tokenizer.decode(ids, skip_special_tokens=True)
    logprobs = choice["logprobs"]
    assert len(logprobs["tokens"]) == len(ids)
    assert logprobs["tokens"] == [hf_tokenizer.decode([t]) for t in ids]
    offsets = logprobs["text_offset"]
    # Character offsets into the text, as for generated tokens.
    assert offsets[0] == 0 and offsets == sorted(offsets) and offsets[-1] < len(choice["text"])
    check_prompt_logprobs(logprobs, ids, reference)
    assert resp["usage"]["prompt_tokens"] == len(ids)
    assert resp["usage"]["completion_tokens"] == 0


def test_score_after_a_prefix_hit(scoring):
    """The prompt's blocks are cached by an ordinary request first; scoring it still gives every
    position's logprob (it takes no hit), and a later ordinary request does hit the blocks the
    scoring request computed."""
    srv, _, reference = scoring
    ids = random_prompt(2)
    status, warm = srv.post(C, {"model": MODEL_NAME, "prompt": ids, "max_tokens": 1, "temperature": 0})
    assert status == 200, warm
    resp = score(srv, ids)
    check_prompt_logprobs(resp["choices"][0]["logprobs"], ids, reference)
    assert resp["usage"]["prompt_tokens_details"]["cached_tokens"] == 0

    scored_first = random_prompt(3)
    score(srv, scored_first)
    status, after = srv.post(C, {"model": MODEL_NAME, "prompt": scored_first, "max_tokens": 1,
                                 "temperature": 0})
    assert status == 200, after
    assert after["usage"]["prompt_tokens_details"]["cached_tokens"] >= LENGTH - 16


def test_echo_with_a_completion(scoring):
    """echo + logprobs + max_tokens 3: the prompt's entries, then the generated tokens' as without
    echo, and the text is the prompt's then the completion's."""
    srv, _, reference = scoring
    ids = random_prompt(4, 90)
    plain = srv.post(C, {"model": MODEL_NAME, "prompt": ids, "max_tokens": 3, "temperature": 0,
                         "logprobs": TOP, "ignore_eos": True})[1]["choices"][0]
    resp = score(srv, ids, max_tokens=3, ignore_eos=True)
    choice = resp["choices"][0]
    echoed = srv.post(C, {"model": MODEL_NAME, "prompt": ids, "echo": True, "max_tokens": 0})[1]
    prompt_text = echoed["choices"][0]["text"]
    assert echoed["choices"][0]["logprobs"] is None
    assert choice["text"] == prompt_text + plain["text"]
    logprobs = choice["logprobs"]
    check_prompt_logprobs(logprobs, ids, reference)
    for key in ("tokens", "token_logprobs", "top_logprobs"):
        assert logprobs[key][len(ids):] == plain["logprobs"][key]
    prompt_chars = len(prompt_text)
    offsets = [o - prompt_chars for o in logprobs["text_offset"][len(ids):]]
    assert offsets == plain["logprobs"]["text_offset"]
    assert resp["usage"]["completion_tokens"] == 3


def test_stream_equals_non_stream(scoring):
    srv, _, _ = scoring
    ids = random_prompt(5, 100)
    for max_tokens in (0, 2):
        whole = score(srv, ids, max_tokens=max_tokens, ignore_eos=True)["choices"][0]
        status, raw = srv.request("POST", C, {"model": MODEL_NAME, "prompt": ids, "echo": True,
                                              "logprobs": TOP, "max_tokens": max_tokens,
                                              "temperature": 0, "ignore_eos": True, "stream": True})
        assert status == 200
        events = sse_events(raw)
        assert events[-1] == "[DONE]"
        chunks = [json.loads(e)["choices"][0] for e in events[:-1]]
        assert "".join(c["text"] for c in chunks) == whole["text"]
        for key in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            streamed = [v for c in chunks if c["logprobs"] for v in c["logprobs"][key]]
            assert streamed == whole["logprobs"][key], key
        assert chunks[-1]["finish_reason"] == "length"


def test_text_and_list_prompts(scoring, hf_tokenizer):
    """A list of prompts (text, and token ids) with n = 2: every choice starts with its own
    prompt's text and logprobs."""
    srv, _, reference = scoring
    text = "The capital of France is Paris, and the capital of Italy is Rome."
    # n > 1 needs a temperature (vLLM's rule); the one token generated is not looked at.
    resp = score(srv, [text, "Hello"], n=2, temperature=1.0, seed=0, return_token_ids=True,
                 max_tokens=1)
    choices = sorted(resp["choices"], key=lambda c: c["index"])
    assert len(choices) == 4
    # Each choice carries its own prompt's ids (vLLM's choices[i].prompt_token_ids).
    prompt_ids = [choices[0]["prompt_token_ids"], choices[2]["prompt_token_ids"]]
    assert [c["prompt_token_ids"] for c in choices] == [prompt_ids[0]] * 2 + [prompt_ids[1]] * 2
    assert prompt_ids[0] == hf_tokenizer(text)["input_ids"]
    assert "prompt_token_ids" not in resp
    for c in choices:
        p = c["index"] // 2
        assert c["text"].startswith([text, "Hello"][p])
        check_prompt_logprobs(c["logprobs"], prompt_ids[p], reference)
    resp = score(srv, [random_prompt(6, 20), random_prompt(7, 70)])
    for c in resp["choices"]:
        check_prompt_logprobs(c["logprobs"], [random_prompt(6, 20), random_prompt(7, 70)][c["index"]],
                              reference)


def test_prompt_logprobs(scoring, hf_tokenizer):
    """vLLM's prompt_logprobs: null for the first token, then each token's own logprob, rank (the
    tokens at least as likely, itself included) and text, followed by its k best alternatives ranked 1..k, as
    transformers scores them; in the completions choice beside echo's logprobs (the engine
    computes the larger count once), at the top level of a chat response."""
    srv, model_dir, reference = scoring
    _, model, scratch = reference
    ids = random_prompt(8, 40)
    k = 3
    resp = score(srv, ids, logprobs=1, prompt_logprobs=k)
    (choice,) = resp["choices"]
    check_prompt_logprobs(choice["logprobs"], ids, reference, top=1)
    listed = choice["prompt_logprobs"]
    assert len(listed) == len(ids) and listed[0] is None
    expected = reference_logprobs(model, ids)
    one_shot, cut = one_shot_and_cut(model_dir, ids, expected, scratch)
    for i in range(1, len(ids)):
        row = expected[i - 1] if i - 1 < cut else one_shot[i - 1]
        best = torch.topk(row, k).indices.tolist()
        entry = listed[i]
        assert list(entry) == [str(t) for t in [ids[i]] + [t for t in best if t != ids[i]]], i
        own = entry[str(ids[i])]
        lp = row[ids[i]].item()
        assert abs(own["logprob"] - lp) < TOLERANCE, (i, own, lp)
        # Tokens within the tolerance of it may order either way.
        least, most = int((row > lp + TOLERANCE).sum()) + 1, int((row > lp - TOLERANCE).sum())
        assert least <= own["rank"] <= most, (i, own, least, most)
        for r, t in enumerate(best, start=1):
            alt = entry[str(t)]
            assert abs(alt["logprob"] - row[t].item()) < TOLERANCE, (i, t, alt)
            assert alt["rank"] == r or t == ids[i], (i, t, alt)
            assert alt["decoded_token"] == hf_tokenizer.decode([t]), (i, t, alt)
    # Chat: at the top level, one entry per prompt token.
    status, resp = srv.post("/v1/chat/completions", {
        "model": MODEL_NAME, "messages": [{"role": "user", "content": "Score me."}],
        "max_tokens": 1, "prompt_logprobs": 0, "return_token_ids": True})
    assert status == 200, resp
    prompt_ids = resp["prompt_token_ids"]
    assert "prompt_logprobs" not in resp["choices"][0]
    assert resp["prompt_logprobs"][0] is None and len(resp["prompt_logprobs"]) == len(prompt_ids)
    for token, entry in zip(prompt_ids[1:], resp["prompt_logprobs"][1:]):
        assert list(entry) == [str(token)] and entry[str(token)]["rank"] >= 1


def test_one_token_prompt_and_refusals(scoring):
    srv, _, _ = scoring
    one = score(srv, [123])["choices"][0]
    assert one["logprobs"]["token_logprobs"] == [None] and one["logprobs"]["top_logprobs"] == [None]
    assert one["finish_reason"] == "length"
    status, err = srv.post(C, {"model": MODEL_NAME, "prompt": [1, 2], "max_tokens": 0})
    assert status == 400 and err["error"]["param"] == "max_tokens" and "echo" in err["error"]["message"]
    status, err = srv.post("/v1/chat/completions", {"model": MODEL_NAME, "echo": True,
                                                    "messages": [{"role": "user", "content": "x"}]})
    assert status == 400 and err["error"]["param"] == "echo"
