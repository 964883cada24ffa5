"""SamplingParams' fields as the server and vLLM take them: truncate_prompt_tokens, seed=-1 (no
seed), float fields checked on their doubles (and no bools), n > 1 refused with temperature 0,
errors at construction naming the field, logprobs=True, float logit_bias keys, TokenLogprob's
rank and decoded_token, and stream() checking its arguments when called. On the committed demo
model (max_position_embeddings 1024, vocabulary 2048). A few seconds."""

from __future__ import annotations

import re

import pytest

from conftest import BUILD_PYTHON, REPO

try:
    import latent
except ImportError as e:
    raise RuntimeError(f"{BUILD_PYTHON}/latent is missing or broken ({e}): run `make build` with "
                       "nanobind in .venv (requirements-dev.txt)") from e

DEMO = REPO / "models" / "demo"
CONTEXT = 1024
GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def llm():
    with latent.LLM(str(DEMO), block_tokens=16) as llm:
        assert llm.config["max_position_embeddings"] == CONTEXT
        yield llm


def ids_of(out) -> list[int]:
    return out.outputs[0].token_ids


# -- truncate_prompt_tokens ------------------------------------------------------------------

def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens(llm):
    prompt = [5 + i % 300 for i in range(40)]
    cut = llm.generate([prompt], latent.SamplingParams(max_tokens=6, truncate_prompt_tokens=7,
                                                       **GREEDY))[0]
    alone = llm.generate([prompt[-7:]], latent.SamplingParams(max_tokens=6, **GREEDY))[0]
    assert cut.prompt_token_ids == prompt[-7:]
    assert ids_of(cut) == ids_of(alone)
    # A prompt shorter than k is whole.
    short = llm.generate([prompt[:5]], latent.SamplingParams(max_tokens=2, truncate_prompt_tokens=7,
                                                             **GREEDY))[0]
    assert short.prompt_token_ids == prompt[:5]


def test_truncate_prompt_tokens_minus_one_is_the_room_beside_max_tokens(llm):
    """The server's rule: -1 keeps what the context leaves beside max_tokens."""
    prompt = [5 + i % 300 for i in range(CONTEXT + 50)]
    out = llm.generate([prompt], latent.SamplingParams(max_tokens=24, truncate_prompt_tokens=-1,
                                                       **GREEDY))[0]
    assert out.prompt_token_ids == prompt[-(CONTEXT - 24):]
    assert len(ids_of(out)) == 24


def test_truncate_prompt_tokens_past_the_room_is_refused_by_name(llm):
    params = latent.SamplingParams(max_tokens=100, truncate_prompt_tokens=CONTEXT - 99)
    with pytest.raises(latent.LatentError,
                       match=re.escape(f"truncate_prompt_tokens' is {CONTEXT - 99}, more than the "
                                       f"{CONTEXT - 100} tokens this model's context ({CONTEXT}) "
                                       "leaves beside max_tokens (100)")):
        llm.generate([[5, 6, 7]], params)


@pytest.mark.parametrize("k", [0, -2])
def test_truncate_prompt_tokens_range_when_made(k):
    with pytest.raises(ValueError, match=re.escape(
            "truncate_prompt_tokens' must be -1 (as many as the context leaves) or a positive "
            f"number of tokens, got {k}")):
        latent.SamplingParams(truncate_prompt_tokens=k)


# -- seed ----------------------------------------------------------------------------------------

def test_seed_minus_one_is_no_seed(llm):
    """vLLM maps seed=-1 to None: unseeded draws, which differ from run to run (latent took it as
    the seed 2**64 - 1, the same every time). -2 stays a seed."""
    def run(seed):
        params = latent.SamplingParams(temperature=1.5, max_tokens=24, ignore_eos=True, seed=seed)
        return [ids_of(llm.generate([[5, 6, 7]], params)[0]) for _ in range(4)]

    unseeded = run(-1)
    assert len({tuple(ids) for ids in unseeded}) > 1, unseeded
    seeded = run(-2)
    assert len({tuple(ids) for ids in seeded}) == 1, seeded


# -- float fields ----------------------------------------------------------------------------

@pytest.mark.parametrize("fields, message", [
    ({"top_p": 1.0000000001}, "top_p' must be in (0, 1], got 1.0000000001"),
    ({"presence_penalty": 2.00000001}, "presence_penalty' must be in [-2, 2], got 2.00000001"),
    ({"repetition_penalty": 100.000001},
     "repetition_penalty' must be in [0.01, 100], got 100.000001"),
    ({"temperature": 1e300}, "temperature' is 1e+300, outside the range of a 32-bit float"),
    ({"temperature": 1e-50}, "temperature' is 1e-50, outside the range of a 32-bit float"),
    ({"min_p": -1e-9}, "min_p' must be in [0, 1], got -1e-09"),
])
def test_float_fields_are_checked_on_their_doubles(fields, message):
    """As the server checks them (the same code): a value out of range by less than a float's
    rounding is refused, naming the field and the value as given."""
    with pytest.raises(ValueError, match=re.escape(message)):
        latent.SamplingParams(**fields)


@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "repetition_penalty",
                                  "presence_penalty", "frequency_penalty"])
@pytest.mark.parametrize("value", [True, "1"])
def test_float_fields_refuse_bools_and_strings(name, value):
    with pytest.raises(TypeError, match=f"SamplingParams: {name} must be a number"):
        latent.SamplingParams(**{name: value})


# -- errors at construction, naming the field --------------------------------------------------

def test_logprobs_out_of_range_names_logprobs():
    with pytest.raises(ValueError, match=re.escape("logprobs' must be in [0, 20], got 21")):
        latent.SamplingParams(logprobs=21)


def test_structured_outputs_must_be_the_object():
    with pytest.raises(TypeError, match=re.escape(
            "structured_outputs must be a StructuredOutputsParams, not dict")):
        latent.SamplingParams(structured_outputs={"regex": "a+"})


@pytest.mark.parametrize("bias", [[1, 2], "5", 5])
def test_logit_bias_must_be_a_dict(bias):
    with pytest.raises(TypeError, match="logit_bias must be a dict of token ids to biases"):
        latent.SamplingParams(logit_bias=bias)


@pytest.mark.parametrize("fields", [{"ignore_eos": "no"}, {"skip_special_tokens": "yes"},
                                    {"include_stop_str_in_output": 1}])
def test_flags_must_be_bools_when_made(fields):
    (name,) = fields
    with pytest.raises(TypeError, match=f"SamplingParams: {name} must be a bool"):
        latent.SamplingParams(**fields)


# -- n > 1 with greedy decoding ----------------------------------------------------------------

def test_several_greedy_samples_are_refused():
    """vLLM's _verify_greedy_sampling, in its words."""
    greedy = re.escape("n must be 1 when using greedy sampling, got 3.")
    with pytest.raises(ValueError, match=greedy):
        latent.SamplingParams(temperature=0, n=3)
    assert latent.SamplingParams(temperature=0.5, n=3).n == 3


# -- small vLLM parities -------------------------------------------------------------------------

def test_logprobs_true_is_one(llm):
    params = latent.SamplingParams(max_tokens=3, logprobs=True, prompt_logprobs=True, **GREEDY)
    assert (params.logprobs, params.prompt_logprobs) == (1, 1)
    out = llm.generate([[5, 6, 7]], params)[0]
    assert all(len(t.top_logprobs) == 1 for t in out.outputs[0].logprobs)
    assert all(len(t.top_logprobs) == 1 for t in out.prompt_logprobs[1:])


def test_logit_bias_keys_as_vllms_int(llm):
    forced = latent.SamplingParams(max_tokens=3, logit_bias={77.0: 100}, **GREEDY)
    assert ids_of(llm.generate([[5, 6, 7]], forced)[0]) == [77, 77, 77]
    with pytest.raises(ValueError, match=re.escape("logit_bias key 77.5 is not a token id")):
        latent.SamplingParams(logit_bias={77.5: 1})


def test_token_logprob_rank_and_decoded_token(llm):
    params = latent.SamplingParams(max_tokens=4, logprobs=3, prompt_logprobs=3, **GREEDY)
    out = llm.generate(["To be, or not"], params)[0]
    for t in out.outputs[0].logprobs:
        assert t.decoded_token == llm.decode([t.token_id], skip_special_tokens=False)
        assert t.rank is None  # the engine ranks prompt tokens only
    for t in out.prompt_logprobs[1:]:
        assert t.decoded_token == llm.decode([t.token_id], skip_special_tokens=False)
        listed = [token for token, _ in t.top_logprobs]
        # Ranked as the server's prompt_logprobs: 1 + the tokens more likely than it.
        assert t.rank >= 1
        if t.token_id in listed:
            assert t.rank == listed.index(t.token_id) + 1
        else:
            assert t.rank > len(listed)


def test_stream_checks_its_arguments_when_called(llm):
    with pytest.raises(ValueError, match="stream\\(\\) generates one sample"):
        llm.stream("x", latent.SamplingParams(n=2, temperature=1.0))
    with pytest.raises(TypeError, match="prompt"):
        llm.stream(3.5, latent.SamplingParams())
    chunks = list(llm.stream([5, 6, 7], latent.SamplingParams(max_tokens=3, logprobs=0, **GREEDY)))
    assert sum(len(c.token_ids) for c in chunks) == 3
    assert all(t.decoded_token is not None for c in chunks for t in c.logprobs)
