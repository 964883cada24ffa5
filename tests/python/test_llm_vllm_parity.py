"""Code written for vLLM's offline API runs on latent.LLM: max_tokens=None (up to the context),
use_tqdm, RequestOutput.num_cached_tokens and a chat's rendered prompt; and what latent refuses
(a SamplingParams out of range, a value that is not a prompt, an engine option out of range) it
refuses by name, when made or before anything is submitted. On the committed demo model
(max_position_embeddings 1024, vocabulary 2048). A few seconds."""

from __future__ import annotations

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
CONTEXT = 1024
VOCAB = 2048
GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def llm():
    with latent.LLM(str(DEMO), block_tokens=16, check_invariants=True) as llm:
        assert llm.config["max_position_embeddings"] == CONTEXT
        assert llm.config["vocab_size"] == VOCAB
        yield llm


def usable(llm) -> None:
    out = llm.generate([[5, 6, 7]], latent.SamplingParams(max_tokens=2, **GREEDY))[0].outputs[0]
    assert len(out.token_ids) == 2


# -- max_tokens=None ------------------------------------------------------------------------------


def conversation(repeats: int) -> list[dict]:
    return [{"role": "user", "content": "my lord " * repeats}]


def test_max_tokens_none_generates_up_to_the_context(llm):
    """vLLM's None: as many as max_model_len leaves after the prompt, per prompt."""
    params = latent.SamplingParams(max_tokens=None, **GREEDY)
    short, long = llm.generate([[5] * 1000, [7] * 1010], params)
    assert len(short.outputs[0].token_ids) == CONTEXT - 1000
    assert len(long.outputs[0].token_ids) == CONTEXT - 1010
    assert short.outputs[0].finish_reason == "length"
    chunks = list(llm.stream([9] * 1016, params))
    assert sum(len(c.token_ids) for c in chunks) == CONTEXT - 1016
    assert chunks[-1].finish_reason == "length"
    # A conversation whose rendered prompt is a little under the context.
    repeats = 1000
    while len(llm.encode(llm.apply_chat_template(conversation(repeats)), False)) > 1016:
        repeats -= 10
    chat = llm.chat(conversation(repeats), params)[0]
    assert len(chat.prompt_token_ids) > 900
    assert len(chat.prompt_token_ids) + len(chat.outputs[0].token_ids) == CONTEXT


def test_max_tokens_none_refuses_a_prompt_that_leaves_no_room(llm):
    with pytest.raises(latent.LatentError, match="max_tokens=None: the prompt is 1024 tokens.*1024"):
        llm.generate([[5] * CONTEXT], latent.SamplingParams(max_tokens=None))
    usable(llm)


@pytest.mark.parametrize("max_tokens", [100, None])
def test_min_tokens_past_the_room_left_ends_the_output_at_the_context(llm, max_tokens):
    """latent lets the context's end win over min_tokens on purpose: a min_tokens the room left
    cannot hold ends the output there (it failed the whole call with "min_tokens must be in
    [0, max_tokens (24)]"). vLLM since PR #26317 checks min_tokens first in check_stop."""
    params = latent.SamplingParams(max_tokens=max_tokens, min_tokens=50, temperature=0)
    long, short = llm.generate([[5] * 1000, "ROMEO."], params)
    assert len(long.outputs[0].token_ids) == CONTEXT - 1000
    assert long.outputs[0].finish_reason == "length"
    assert len(short.outputs[0].token_ids) >= 50
    chunks = list(llm.stream([9] * 1016, params))
    assert sum(len(c.token_ids) for c in chunks) == CONTEXT - 1016


def test_max_tokens_past_the_context_ends_the_output_there(llm, tmp_path):
    """As vLLM's LLM.generate: a max_tokens longer than the context leaves ends the sample at the
    context's end with finish_reason "length" (it failed the whole call, every prompt's results
    lost); only a prompt that leaves no room is refused. `latent generate` lines keep the server's
    rule: such a line gets its own error and the others run."""
    params = latent.SamplingParams(max_tokens=100, **GREEDY)
    long, short = llm.generate([[5] * 1000, "ROMEO."], params)
    assert len(long.outputs[0].token_ids) == CONTEXT - 1000
    assert long.outputs[0].finish_reason == "length"
    assert len(short.outputs[0].token_ids) == 100
    chunks = list(llm.stream([9] * 1016, params))
    assert sum(len(c.token_ids) for c in chunks) == CONTEXT - 1016
    assert chunks[-1].finish_reason == "length"
    with pytest.raises(latent.LatentError,
                       match="prompt 0: the prompt is 1024 tokens, which leaves no room"):
        llm.generate([[5] * CONTEXT], params)
    usable(llm)
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps({"ids": [5] * 1000, "max_tokens": 100}) + "\n")
    proc = run_latent("generate", "--model", str(DEMO), "--prompts", str(lines), check=False)
    assert proc.returncode == 2, proc.stderr  # its only line failed
    out = json.loads(proc.stdout)
    assert ("max_tokens (100) exceeds the model's max_position_embeddings (1024)"
            in out["error"]), out


def test_max_tokens_none_fits_a_sliding_window_cache(tiny_models):
    """On a model with sliding-window rows the cache holds back the window blocks of two windows
    (CacheManager::capacity_tokens): None sizes the room by what Engine::Submit takes, not by
    the blocks' tokens, or every None request on a cache smaller than the context would be
    refused as one that can never fit."""
    model = tiny_models.get("dots3_note", config={"max_position_embeddings": 512})  # window 16
    with latent.LLM(str(model), block_tokens=16, num_blocks=8) as window_llm:
        # 8 blocks of 16 tokens, less 3 for two windows and 1 more: 4 blocks, 64 tokens.
        params = latent.SamplingParams(max_tokens=None, **GREEDY)
        outs = window_llm.generate([[5] * 10, [6] * 60], params)
        assert [len(o.outputs[0].token_ids) for o in outs] == [54, 4]
        assert [o.outputs[0].finish_reason for o in outs] == ["length", "length"]
        with pytest.raises(latent.LatentError, match="the prompt is 64 tokens.*the cache holds 64"):
            window_llm.generate([[5] * 64], params)


@pytest.mark.parametrize("value,message", [
    (5.5, "field 'max_tokens' must be an integer, not 5.5"),
    ("5", "field 'max_tokens' has the wrong type"),
    (True, "field 'max_tokens' has the wrong type"),
])
def test_max_tokens_that_is_not_an_int_is_refused_when_made(value, message):
    with pytest.raises(ValueError, match=message):
        latent.SamplingParams(max_tokens=value)


# -- SamplingParams checked when made -------------------------------------------------------------


@pytest.mark.parametrize("fields,message", [
    ({"max_tokens": -1}, "max_tokens must be at least 0, got -1"),
    ({"min_tokens": -1}, "min_tokens must be in \\[0, max_tokens \\(16\\)\\], got -1"),
    ({"min_tokens": 20, "max_tokens": 5}, "min_tokens must be in \\[0, max_tokens \\(5\\)\\], got 20"),
    ({"min_tokens": -1, "max_tokens": None}, "min_tokens must be in"),
    ({"min_tokens": 1.5}, "field 'min_tokens' must be an integer"),
    ({"stop": 5}, "field 'stop' must be a string or a list of strings: 5"),
    ({"stop": [5]}, "field 'stop' must be a string or a list of strings"),
    ({"stop": [""]}, "field 'stop' holds an empty string"),
    ({"stop": ""}, "field 'stop' holds an empty string"),
    ({"stop_token_ids": [-1]}, "stop_token_ids token id -1 is outside the vocabulary"),
    ({"stop_token_ids": 5}, "field 'stop_token_ids' has the wrong type"),
    ({"stop_token_ids": ["5"]}, "field 'stop_token_ids' has the wrong type"),
    ({"stop_token_ids": "56"}, "field 'stop_token_ids' has the wrong type: \"56\""),
    ({"stop_token_ids": {1.5}}, "field 'stop_token_ids' must be an integer, not 1.5"),
    ({"allowed_token_ids": "ab"}, "field 'allowed_token_ids' has the wrong type: \"ab\""),
    ({"allowed_token_ids": 5}, "field 'allowed_token_ids' has the wrong type: 5"),
    ({"allowed_token_ids": {True}}, "field 'allowed_token_ids' has the wrong type: true"),
])
def test_length_and_stop_fields_are_checked_when_made(fields, message):
    """README: a SamplingParams out of range raises ValueError when made, as vLLM's does; by the
    rules ParseRequestLine and Engine::Submit apply."""
    with pytest.raises(ValueError, match=message):
        latent.SamplingParams(**fields)


@pytest.mark.parametrize("fields,message", [
    ({"stop_token_ids": b"\x05"}, "stop_token_ids must be an iterable of int token ids, not bytes"),
    ({"allowed_token_ids": bytearray(b"ab")}, "allowed_token_ids must be an iterable of int token ids"),
    ({"stop": b"ab"}, "stop must be a str or a list of str, not bytes b'ab'"),
])
def test_bytes_are_not_token_ids(fields, message):
    with pytest.raises(TypeError, match=f"SamplingParams: {message}"):
        latent.SamplingParams(**fields)


def test_max_tokens_zero_is_kept_for_scoring(llm):
    """max_tokens=0 scores the prompt (prompt_logprobs) without generating, as request lines do."""
    out = llm.generate([[5, 6, 7, 8]], latent.SamplingParams(max_tokens=0, prompt_logprobs=0))[0]
    assert out.outputs[0].token_ids == []
    assert len(out.prompt_logprobs) == 4
    assert latent.SamplingParams(stop=[], stop_token_ids=[], max_tokens=0).max_tokens == 0


@pytest.mark.parametrize("name", ["n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                                  "presence_penalty", "frequency_penalty", "min_tokens"])
def test_none_is_refused_where_it_means_nothing(name):
    """vLLM's SamplingParams takes no None for these (only its from_optional() maps None to the
    default); latent's took temperature=None as greedy without a word."""
    with pytest.raises(TypeError, match=f"SamplingParams: {name} must not be None"):
        latent.SamplingParams(**{name: None})


@pytest.mark.parametrize("n", [2.0, "2", True])
def test_n_must_be_an_int(n):
    """vLLM's _verify_args refuses an n that is not an int; 2.0 went through as the number 2."""
    with pytest.raises(ValueError, match="SamplingParams: n must be an int, but is of type"):
        latent.SamplingParams(n=n)
    assert latent.SamplingParams(n=3).n == 3


def test_none_is_the_default_where_it_means_none():
    params = latent.SamplingParams(seed=None, stop=None, stop_token_ids=None, logprobs=None,
                                   prompt_logprobs=None, logit_bias=None, allowed_token_ids=None,
                                   structured_outputs=None, max_tokens=None)
    assert "stop" not in params._line() and params._line()["max_tokens"] is None


def test_none_is_false_for_the_flags(llm):
    """vLLM reads ignore_eos, skip_special_tokens and include_stop_str_in_output by truth value:
    None is False there (skip_special_tokens=None keeps the special tokens in the text)."""
    flags = ("ignore_eos", "skip_special_tokens", "include_stop_str_in_output")
    params = latent.SamplingParams(max_tokens=3, temperature=0, **{name: None for name in flags})
    line = params._line()
    assert [line[name] for name in flags] == [False, False, False]
    want = latent.SamplingParams(max_tokens=3, temperature=0, **{name: False for name in flags})
    got, expected = llm.generate([[5, 6], [8]], [params, want]), llm.generate([[5, 6], [8]], want)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    for name in flags:  # what is neither a bool nor None is refused by name, when made
        with pytest.raises(TypeError, match=f"SamplingParams: {name} must be a bool .* str 'yes'"):
            latent.SamplingParams(max_tokens=1, **{name: "yes"})
        params = latent.SamplingParams(max_tokens=1)
        setattr(params, name, "yes")  # or when submitted, set after
        with pytest.raises(latent.LatentError, match=f"SamplingParams: {name} must be a bool"):
            llm.generate([[5, 6]], params)


# -- id lists: any iterable of ints, as vLLM's list(...) --------------------------------------------


@pytest.mark.parametrize("ids", [
    lambda: {7}, lambda: frozenset({7}), lambda: range(7, 8), lambda: {7: 1}.keys(), lambda: (7,),
    lambda: iter([7]), lambda: np.array([7]), lambda: [np.int64(7)],
], ids=["set", "frozenset", "range", "dict_keys", "tuple", "iterator", "ndarray", "np_int64"])
def test_id_lists_take_any_iterable_of_ints(llm, ids):
    """stop_token_ids and allowed_token_ids as vLLM takes them (it calls list() on them): main
    did, then a set or a range raised "Object of type set is not JSON serializable"."""
    allowed = latent.SamplingParams(max_tokens=3, temperature=0, ignore_eos=True, allowed_token_ids=ids())
    assert allowed._line()["allowed_token_ids"] == [7]
    assert llm.generate([[5, 6]], allowed)[0].outputs[0].token_ids == [7, 7, 7]
    stop = latent.SamplingParams(max_tokens=3, temperature=0, allowed_token_ids=[7], stop_token_ids=ids())
    out = llm.generate([[5, 6]], stop)[0].outputs[0]
    assert (out.token_ids, out.finish_reason, out.stop_reason) == ([7], "stop", 7)
    assert latent.SamplingParams(stop_token_ids=range(5, 9))._line()["stop_token_ids"] == [5, 6, 7, 8]
    assert latent.SamplingParams(stop={"ab"})._line()["stop"] == ["ab"]


# -- use_tqdm, num_cached_tokens, a chat's prompt --------------------------------------------------


def test_use_tqdm_is_accepted_and_changes_nothing(llm):
    params = latent.SamplingParams(max_tokens=3, **GREEDY)
    want = llm.generate([[5, 6]], params)[0].outputs[0].token_ids
    assert llm.generate([[5, 6]], params, use_tqdm=False)[0].outputs[0].token_ids == want
    # latent's also takes it third positionally; current vLLM's is keyword-only (in old vLLM the
    # third positional argument was prompt_token_ids).
    assert llm.generate([[5, 6]], params, False)[0].outputs[0].token_ids == want
    assert llm.generate([[5, 6]], params, use_tqdm=lambda *a, **k: iter(()))[0].outputs[0].token_ids == want
    messages = [{"role": "user", "content": "Hello"}]
    assert llm.chat(messages, params, use_tqdm=False)[0].outputs[0].token_ids == \
        llm.chat(messages, params)[0].outputs[0].token_ids
    with pytest.raises(TypeError, match="use_tqdm must be a bool or a callable"):
        llm.generate([[5, 6]], params, use_tqdm="yes")


def test_num_cached_tokens_counts_the_prefix_cache_hit(llm):
    """As the server's usage.prompt_tokens_details.cached_tokens: whole 16-token blocks of a prompt
    the cache held; 0 on the first run."""
    prompt = [int(t) for t in np.arange(100, 150)]  # 50 tokens: 3 whole blocks
    params = latent.SamplingParams(max_tokens=2, **GREEDY)
    first = llm.generate([prompt], params)[0]
    hits = llm.metrics()["prefix_hit_tokens"]
    second = llm.generate([prompt], params)[0]
    assert first.num_cached_tokens == 0
    assert second.num_cached_tokens == 48
    assert llm.metrics()["prefix_hit_tokens"] - hits == 48
    assert llm.generate([prompt], latent.SamplingParams(max_tokens=0))[0].num_cached_tokens is None


def test_chat_prompt_is_the_rendered_text(llm):
    messages = [{"role": "user", "content": "What say you, my lord?"}]
    out = llm.chat([messages, messages + [{"role": "assistant", "content": "Nothing"}]],
                   latent.SamplingParams(max_tokens=2, **GREEDY), continue_final_message=False)
    assert out[0].prompt == llm.apply_chat_template(messages)
    assert out[0].prompt_token_ids == llm.encode(out[0].prompt, add_special_tokens=False)
    assert out[1].prompt == llm.apply_chat_template(messages + [{"role": "assistant", "content": "Nothing"}])
    assert llm.generate([[5, 6]], latent.SamplingParams(max_tokens=1))[0].prompt is None
    assert llm.generate("ROMEO.", latent.SamplingParams(max_tokens=1))[0].prompt == "ROMEO."


# -- prompts that are not prompts -----------------------------------------------------------------


@pytest.mark.parametrize("prompts,message", [
    (["a", 5], "prompts mix int token ids with other items.*str 'a' at 0"),
    ([5, "a"], "prompts mix int token ids with other items.*str 'a' at 1"),
    (5, "prompts must be a str, a list of int token ids.*got int 5"),
    (["a", None], "prompt 1 is NoneType None: a prompt is a str"),
    (b"abc", "prompts must be a str.*got bytes b'abc'"),
    ([b"abc"], "prompt 0 is bytes b'abc'"),
    ([[5, "a"]], "prompt 0 is a list holding str 'a', not only int token ids"),
    ([[True, 5]], "prompt 0 is a list holding bool True"),
    ([{"prompt": 5}], "prompt 0: 'prompt' must be a str; got int 5"),
    ([{"prompt_token_ids": ["a"]}], "prompt 0: 'prompt_token_ids' must be a list of int token ids"),
    ([{"prompt_token_ids": b"ab"}], "prompt 0: 'prompt_token_ids' must be an iterable of int token ids, not bytes"),
    (np.array(5), "prompts must be a str.*got int 5"),
])
def test_what_is_not_a_prompt_is_a_type_error_naming_prompts(llm, prompts, message):
    with pytest.raises(TypeError, match=message):
        llm.generate(prompts, latent.SamplingParams(max_tokens=2))
    usable(llm)


@pytest.mark.parametrize("key, message", [
    ("multi_modal_data", "'multi_modal_data' is one of vLLM's that latent does not support"),
    ("cache_salt", "'cache_salt' is one of vLLM's that latent does not support"),
    ("bogus", "'bogus' is not a prompt key"),
])
def test_a_prompt_dict_key_latent_does_not_take_is_named(llm, key, message):
    """They were ignored: an image or a cache salt silently did nothing."""
    for prompt in ({"prompt": "ROMEO.", key: 1}, {"prompt_token_ids": [5, 6], key: 1}):
        with pytest.raises(ValueError, match=f"prompt 1: {message} \\(a prompt dict takes "
                                             "'prompt' and 'prompt_token_ids'\\)"):
            llm.generate(["ROMEO.", prompt], latent.SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match=f"the prompt: {message}"):
        next(llm.stream({"prompt": "ROMEO.", key: 1}, latent.SamplingParams(max_tokens=2)))
    usable(llm)


def test_stream_names_what_is_not_a_prompt(llm):
    with pytest.raises(TypeError, match="the prompt is a list holding str 'a'"):
        next(llm.stream(["a", "b"], latent.SamplingParams(max_tokens=2)))
    with pytest.raises(TypeError, match="stream\\(\\): sampling_params must be a SamplingParams, not dict"):
        next(llm.stream("a", {"max_tokens": 2}))


@pytest.mark.parametrize("sampling_params,message", [
    ({"max_tokens": 3}, "sampling_params must be a SamplingParams or a list of them, not dict.*SamplingParams\\(\\*\\*d\\)"),
    ([{"max_tokens": 3}], "sampling_params\\[0\\] is dict"),
    (3, "sampling_params must be a SamplingParams or a list of them, not int 3"),
])
def test_sampling_params_that_are_not_sampling_params_are_named(llm, sampling_params, message):
    with pytest.raises(TypeError, match=message):
        llm.generate("a", sampling_params)
    usable(llm)


def test_numpy_token_ids_are_prompts(llm):
    params = latent.SamplingParams(max_tokens=3, **GREEDY)
    want = [o.outputs[0].token_ids for o in llm.generate([[5, 6, 7], [8, 9]], params)]
    assert llm.generate(np.array([5, 6, 7]), params)[0].outputs[0].token_ids == want[0]
    got = llm.generate([np.array([5, 6, 7], dtype=np.int32), np.array([8, 9])], params)
    assert [o.outputs[0].token_ids for o in got] == want
    assert llm.generate([np.int64(5), np.int64(6), np.int64(7)], params)[0].prompt_token_ids == [5, 6, 7]
    assert llm.generate({"prompt_token_ids": np.array([8, 9])}, params)[0].outputs[0].token_ids == want[1]
    assert llm.generate({"prompt_token_ids": range(8, 10)}, params)[0].outputs[0].token_ids == want[1]


# -- token ids and engine options out of range ----------------------------------------------------


def test_stop_token_ids_outside_the_vocabulary_are_refused_at_submit(llm):
    """As logit_bias and allowed_token_ids are: an id no token has would never end a sample."""
    with pytest.raises(latent.LatentError,
                       match=f"stop_token_ids token id {VOCAB} is outside the vocabulary \\(size {VOCAB}\\)"):
        llm.generate([[5, 6]], latent.SamplingParams(stop_token_ids=[3, VOCAB]))
    params = latent.SamplingParams(max_tokens=2)
    params.stop_token_ids = [-1]  # changed after it was checked
    with pytest.raises(latent.LatentError, match="stop_token_ids token id -1 is outside the vocabulary"):
        llm.generate([[5, 6]], params)
    usable(llm)


@pytest.mark.parametrize("option,value,error,message", [
    ("prefix_caching", 0, TypeError, "prefix_caching must be a bool \\(True or False\\), got 0"),
    ("check_invariants", "yes", TypeError, "check_invariants must be a bool"),
    ("quantize", None, TypeError,
     'quantize must be a str \\("none", "int8" or "w8a8"\\), got None'),
    ("cache_dtype", 8, TypeError, "cache_dtype must be a str .*, got 8"),
    # Not the engine's LatentError naming the command line's flag ("--quantize: unknown mode").
    ("quantize", "int4", ValueError, 'quantize must be "none", "int8" or "w8a8", got \'int4\''),
    ("attention", "bogus", ValueError,
     'attention must be "auto", "absorbed" or "expanded", got \'bogus\''),
    ("precision", "fp16", ValueError, 'precision must be "auto", "bf16" or "f32", got \'fp16\''),
    ("cache_dtype", "int8", ValueError,
     'cache_dtype must be "auto", "f32", "bf16" or "fp8", got \'int8\''),
    ("attention", b"auto", TypeError, "attention must be a str"),
    ("num_blocks", -5, ValueError, "num_blocks must be in \\[0, 2147483647\\], got -5"),
    ("block_tokens", -1, ValueError, "block_tokens must be in \\[1, 4294967295\\], got -1"),
    ("block_tokens", 0, ValueError, "block_tokens must be in \\[1,"),
    ("block_tokens", 1.5, TypeError, "block_tokens must be an integer, got 1.5"),
    ("max_seqs", 2**40, ValueError, "max_seqs must be in \\[1, 2147483647\\]"),
    ("speculative_tokens", -1, ValueError, "speculative_tokens must be in \\[0,"),
    ("cache_memory_gib", 0, ValueError, "cache_memory_gib must be positive, got 0"),
])
def test_engine_options_out_of_range_are_value_errors(option, value, error, message):
    """A wrong type was nanobind's "incompatible function arguments" listing every signature."""
    with pytest.raises(error, match=f"LLM\\(\\): {message}"):
        latent.LLM(str(DEMO), **{option: value})


def test_numpy_numbers_are_engine_options():
    with latent.LLM(str(DEMO), num_blocks=np.int64(32), block_tokens=np.int32(16),
                    cache_memory_gib=np.float32(0.5)) as llm:
        assert llm.metrics()["total_blocks"] == 32
        usable(llm)


# -- numpy numbers, NaN ---------------------------------------------------------------------------


def test_numpy_numbers_are_sampling_numbers(llm):
    """As vLLM takes them: seed, max_tokens and logit_bias keys of numpy's integer types were
    "not JSON serializable"."""
    fields = dict(seed=3, max_tokens=5, top_k=40, temperature=0.5, logit_bias={5: 2.5}, n=1,
                  ignore_eos=True)
    as_numpy = dict(fields, seed=np.int64(3), max_tokens=np.int64(5), top_k=np.int32(40),
                    temperature=np.float32(0.5), logit_bias={np.int64(5): np.float32(2.5)})
    want = llm.generate("ROMEO.", latent.SamplingParams(**fields))[0].outputs[0].token_ids
    assert len(want) == 5
    assert llm.generate("ROMEO.", latent.SamplingParams(**as_numpy))[0].outputs[0].token_ids == want


@pytest.mark.parametrize("fields, message", [
    (dict(temperature=float("nan")), "temperature must be finite, got nan"),
    (dict(top_p=float("inf")), "top_p must be finite, got inf"),
    (dict(presence_penalty=np.float32("nan")), "presence_penalty must be finite"),
    (dict(logit_bias={5: float("nan")}), "logit_bias must be finite, got {5: nan}"),
])
def test_nan_is_refused_by_name(fields, message):
    """It was "Out of range float values are not JSON compliant", naming no field."""
    with pytest.raises(ValueError, match=f"SamplingParams: {message}"):
        latent.SamplingParams(**fields)


class SubmitSpy:
    """An LLM's engine that counts what is submitted to it."""

    def __init__(self, engine):
        self._engine = engine
        self.submitted = 0

    def submit(self, *args):
        self.submitted += 1
        return self._engine.submit(*args)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@pytest.fixture
def spy(llm, monkeypatch) -> SubmitSpy:
    spy = SubmitSpy(llm._engine)
    monkeypatch.setattr(llm, "_engine", spy)
    return spy


# -- values JSON has no form for ------------------------------------------------------------------


@pytest.mark.parametrize("fields", [
    dict(stop=[b"x"]),  # was the stop string "b'x'"
    dict(stop=["a", object()]),
    dict(stop_token_ids=[object()]),  # was the engine's "has the wrong type: \"<object object..."
    dict(structured_outputs=latent.StructuredOutputsParams(choice=[b"a"])),
])
def test_a_sampling_value_json_has_no_form_for_is_a_type_error(fields):
    with pytest.raises(TypeError, match=r"SamplingParams: (bytes b'x'|object <object|bytes b'a').* "
                                        r"has no JSON form"):
        latent.SamplingParams(**fields)


def test_a_message_value_json_has_no_form_for_is_a_type_error(llm, spy):
    """content=b"hi" was rendered as the text "b'hi'"; now nothing is submitted."""
    chat = [{"role": "user", "content": "hi"}]
    with pytest.raises(TypeError, match=r"prompt 1: bytes b'hi' has no JSON form"):
        llm.chat([chat, [{"role": "user", "content": b"hi"}]], latent.SamplingParams(max_tokens=1))
    assert spy.submitted == 0
    with pytest.raises(TypeError, match=r"bytes b'hi' has no JSON form"):
        llm.apply_chat_template([{"role": "user", "content": b"hi"}])


# -- fields set after construction ----------------------------------------------------------------


@pytest.mark.parametrize("name, value, message", [
    # -1 (newer vLLM's "the whole vocabulary") silently gave no logprobs.
    ("logprobs", -1, "logprobs must be in \\[0, 20\\] or None, got -1"),
    ("prompt_logprobs", -1, "prompt_logprobs must be in \\[0, 20\\] or None, got -1"),
    # NaN reached the engine as the text NaN: nlohmann's parse error.
    ("temperature", float("nan"), "temperature must be finite, got nan"),
    ("temperature", None, "temperature must not be None"),
    ("n", 2.0, "n must be an int"),
])
def test_a_field_set_after_construction_is_checked_when_submitted(llm, spy, name, value,
                                                                  message):
    """SamplingParams' checks run again when a request is submitted, as when it was made, and
    are a LatentError there, as the engine's refusals are; nothing is submitted."""
    params = latent.SamplingParams(max_tokens=2)
    setattr(params, name, value)
    match = f"SamplingParams: {message}"
    with pytest.raises(latent.LatentError, match=match):
        llm.generate(["ROMEO.", "ROMEO."], [latent.SamplingParams(max_tokens=2), params])
    with pytest.raises(latent.LatentError, match=match):
        next(llm.stream("ROMEO.", params))
    with pytest.raises(latent.LatentError, match=match):
        llm.chat([{"role": "user", "content": "hi"}], params)
    assert spy.submitted == 0
    usable(llm)


# -- a named tokenizer directory, and a bug told apart from bad input ------------------------------


@pytest.mark.parametrize("where, message", [
    ("missing", "tokenizer directory .*missing: not a directory"),
    ("empty", "tokenizer directory .*empty: no tokenizer.json or tiktoken.model in it"),
])
def test_a_named_tokenizer_directory_must_hold_a_tokenizer(tmp_path, where, message):
    """A wrong path went unnoticed: the LLM started without a tokenizer and a text prompt failed
    later with "this model has no tokenizer"."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(latent.LatentError, match=message):
        latent.LLM(str(DEMO), tokenizer=str(tmp_path / where))


def test_a_failed_check_is_a_latent_internal_error(llm):
    """As the server answers 500 (not 400) and the CLI exits 1 (not 2) for a failed check."""
    assert issubclass(latent.LatentInternalError, latent.LatentError)
    assert latent.LatentInternalError is not latent.LatentError
    with pytest.raises(latent.LatentInternalError, match="check failed"):
        latent._latent._fail_check_for_tests()
    with pytest.raises(latent.LatentError, match="vocabulary") as bad_input:
        llm.generate([[VOCAB + 5]], latent.SamplingParams(max_tokens=1))
    assert not isinstance(bad_input.value, latent.LatentInternalError)
    # A sample's error text from a step that failed a check, and one that refused bad input.
    assert type(latent._engine_error("internal error: x.cc:1: check failed: y")) is \
        latent.LatentInternalError
    assert type(latent._engine_error("prompt too long")) is latent.LatentError
