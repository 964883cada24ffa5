"""latent in Python: the engine runs in this process (continuous batching, its own thread; the GIL
is released while it works), with an API close to vLLM's.

    import latent
    llm = latent.LLM("models/demo")
    out = llm.generate(["To be, or not to be"], latent.SamplingParams(max_tokens=32, temperature=0))
    print(out[0].outputs[0].text)
    for chunk in llm.stream("ROMEO.", latent.SamplingParams(max_tokens=32)): print(chunk.text, end="")

Requests are the JSON request lines of `latent generate --prompts` underneath, parsed, tokenized
and validated by the same C++ code, so the same request gives the same tokens either way.
Errors from the engine (a bad model directory, a prompt that cannot fit, a bad sampling field)
raise `latent.LatentError` with latent's own message.
"""

from __future__ import annotations

import atexit
import copy
import dataclasses
import json
import math
import numbers
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence, Union

from . import _latent

__all__ = [
    "LLM",
    "SamplingParams",
    "StructuredOutputsParams",
    "RequestOutput",
    "CompletionOutput",
    "TokenLogprob",
    "StreamChunk",
    "LatentError",
    "LatentInternalError",
]

LatentError = _latent.LatentError
"""Raised with latent's message when the engine refuses something (subclass of RuntimeError)."""
LatentInternalError = _latent.LatentInternalError
"""A LatentError that is a bug in latent (a failed internal check), not the caller's input."""


def _engine_error(message: str) -> LatentError:
    """The exception for a sample's error text (the engine prefixes a failed check's with
    "internal error: ")."""
    kind = LatentInternalError if message.startswith("internal error: ") else LatentError
    return kind(message)

# How long one wait holds the GIL released: Ctrl-C (KeyboardInterrupt) is seen between waits.
_WAIT_SLICE_S = 0.05

_ENGINE_OPTIONS = ("quantize", "precision", "attention", "max_batch_tokens", "max_seqs", "block_tokens",
                   "num_blocks", "cache_memory_gib", "prefix_caching", "cache_dtype",
                   "speculative_tokens", "speculative_ngram_max", "speculative_ngram_min",
                   "check_invariants")

# The integer engine options' ranges, as `latent serve` checks its flags (num_blocks 0: from
# cache_memory_gib); the upper bounds are the C++ fields' types.
_ENGINE_INT_RANGES = {
    "max_batch_tokens": (1, 2**63 - 1), "max_seqs": (1, 2**31 - 1), "block_tokens": (1, 2**32 - 1),
    "num_blocks": (0, 2**31 - 1), "speculative_tokens": (0, 2**31 - 1),
    "speculative_ngram_max": (1, 2**31 - 1), "speculative_ngram_min": (1, 2**31 - 1),
}


# The engine options that take a string, and those that take a bool.
_ENGINE_STR_OPTIONS = {"quantize": '"none", "int8" or "w8a8"',
                       "precision": '"auto", "bf16" or "f32"',
                       "attention": '"auto", "absorbed" or "expanded"',
                       "cache_dtype": '"auto", "f32", "bf16" or "fp8"'}
# The values each takes, as the engine parses them (cache_dtype also takes the long names):
# checked here so that a wrong one is a ValueError naming the keyword, not the engine's
# LatentError naming latent's command-line flag.
_ENGINE_STR_VALUES = {"quantize": ("none", "int8", "w8a8"),
                      "precision": ("auto", "bf16", "f32"),
                      "attention": ("auto", "absorbed", "expanded"),
                      "cache_dtype": ("auto", "f32", "float32", "bf16", "bfloat16", "fp8",
                                      "fp8_e4m3")}
_ENGINE_BOOL_OPTIONS = frozenset({"prefix_caching", "check_invariants"})


def _check_engine_option(key: str, value: Any) -> Any:
    """The value for EngineArgs (numpy's numbers as Python's), or a ValueError (TypeError for the
    wrong type) naming the option, rather than nanobind's unreadable "incompatible function
    arguments" or a cache of -5 blocks taken for 'from cache_memory_gib'."""
    if key in _ENGINE_INT_RANGES:
        least, most = _ENGINE_INT_RANGES[key]
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"LLM(): {key} must be an integer, got {value!r}")
        if not least <= value <= most:
            raise ValueError(f"LLM(): {key} must be in [{least}, {most}], got {value}")
        return int(value)
    if key == "cache_memory_gib":
        if not isinstance(value, numbers.Real) or isinstance(value, bool):
            raise TypeError(f"LLM(): cache_memory_gib must be a number, got {value!r}")
        if not value > 0:
            raise ValueError(f"LLM(): cache_memory_gib must be positive, got {value}")
        return float(value)
    if key in _ENGINE_STR_OPTIONS:
        if not isinstance(value, str):
            raise TypeError(f"LLM(): {key} must be a str ({_ENGINE_STR_OPTIONS[key]}), "
                            f"got {value!r}")
        if value not in _ENGINE_STR_VALUES[key]:
            raise ValueError(f"LLM(): {key} must be {_ENGINE_STR_OPTIONS[key]}, got {value!r}")
        return value
    if key in _ENGINE_BOOL_OPTIONS:
        if not isinstance(value, bool):
            raise TypeError(f"LLM(): {key} must be a bool (True or False), got {value!r}")
        return value
    # Every option in _ENGINE_OPTIONS has one.
    raise AssertionError(f"engine option {key} has no check")


@dataclass
class StructuredOutputsParams:
    """What the output must be, as vLLM's `StructuredOutputsParams`: exactly one of

    - `json`: a JSON schema (a dict, or its text); the output is compact JSON fitting it, its
      properties in the schema's order and none beyond the schema's;
    - `regex`: a regular expression the whole output matches;
    - `choice`: the output is exactly one of these strings;
    - `grammar`: an EBNF grammar (XGrammar's, from rule `root`), or, as vLLM takes it, a Lark
      grammar (no `::=` line; from rule `start`), converted to EBNF;
    - `json_object=True`: any JSON object;
    - `structural_tag`: a structural tag as JSON text (vLLM's form): the output is free text except
      between trigger strings, where it must fit the tag (e.g. a tool call's JSON between
      `<function=f>` and `</function>`). Either vLLM's legacy
      `{"structures": [{"begin", "schema", "end"}], "triggers": [...]}` or XGrammar's
      `{"type": "structural_tag", "format": {...}}`.

    The grammar masks each draw (XGrammar); the sample ends when the grammar is complete.
    Needs the model's tokenizer, and XGrammar: the module `make build` makes has it, a
    `pip install .` one refuses such requests. A grammar that admits no output (its language is
    empty, or no token of the model can start it) is refused when the request is submitted.

    vLLM's options `disable_any_whitespace`, `disable_additional_properties` and
    `disable_fallback` (older vLLM releases) are accepted, so that vLLM code passing them runs, and
    change nothing: latent's JSON is always compact and strict (no whitespace between tokens, no
    properties beyond the schema's), and there is no other backend to fall back to.
    """

    json: Optional[Union[str, dict]] = None
    regex: Optional[str] = None
    choice: Optional[list[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    structural_tag: Optional[Union[str, dict]] = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    disable_fallback: bool = False

    def __post_init__(self) -> None:
        given = [name for name, value in self._constraints().items() if value is not None]
        if len(given) != 1:
            raise ValueError("StructuredOutputsParams: give exactly one of json, regex, choice, "
                             "grammar, json_object=True or structural_tag "
                             f"(got {', '.join(given) or 'none'})")

    def _constraints(self) -> dict[str, Any]:
        return {"json": self.json, "regex": self.regex, "choice": self.choice,
                "grammar": self.grammar, "json_object": self.json_object or None,
                "structural_tag": self.structural_tag}

    def _line(self) -> dict[str, Any]:
        """The request line's `structured_outputs`: the constraint and the options."""
        line = {k: v for k, v in self._constraints().items() if v is not None}
        line.update(disable_any_whitespace=self.disable_any_whitespace,
                    disable_additional_properties=self.disable_additional_properties,
                    disable_fallback=self.disable_fallback)
        return line


@dataclass
class SamplingParams:
    """How to sample one request: the fields `latent serve` and `latent generate` take.

    The defaults are vLLM's: temperature 1.0 (pass 0 for greedy decoding), 16 tokens at most.
    Order of application: allowed_token_ids (and a structured-output grammar), min_tokens,
    logit_bias, penalties (so far vLLM v1's order), then temperature, top-k, top-p, min-p (vLLM
    v1 applies min-p before top-k and top-p), then a draw from the request's own generator
    (seeded with `seed`: the same seed gives the same output whatever else runs in the batch).
    """

    n: int = 1
    """Samples to generate from the prompt (they share its cache blocks)."""
    temperature: float = 1.0
    """0: greedy (argmax)."""
    top_p: float = 1.0
    top_k: int = 0
    """0 (or -1, as vLLM spells it): off."""
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: Optional[int] = None
    """None (or -1, as vLLM maps it to None): an unseeded draw."""
    max_tokens: Optional[int] = 16
    """Tokens to generate at most per sample; 0 scores the prompt (with prompt_logprobs) without
    generating. None (vLLM's): as many as the context leaves, the model's max_position_embeddings
    (or, if smaller, what the cache takes for one request: less than its size on a model with
    sliding-window rows) less the prompt's tokens, resolved per prompt when submitted."""
    min_tokens: int = 0
    """Until a sample has this many tokens, EOS, stop_token_ids and stop strings do not end it
    (vLLM's min_tokens; at most max_tokens), unless a structured_outputs grammar allows only
    them (the grammar wins). The context's end still ends a sample before it: latent lets it win
    on purpose (current vLLM checks min_tokens first, where such a request may never end)."""
    stop: Optional[Union[str, list[str]]] = None
    """Stop strings, matched on the text; the text ends before the one that matched."""
    include_stop_str_in_output: Optional[bool] = False
    """The text ends after the stop string that matched, not before it; and it keeps the text of
    the EOS or stop_token_ids entry that ended the sample, which it otherwise leaves out (vLLM)."""
    stop_token_ids: Optional[Iterable[int]] = None
    """Token ids that end a sample (besides the checkpoint's EOS); the one that did is the
    output's `stop_reason`, in its token_ids but not in its text (as vLLM, unless
    include_stop_str_in_output), nor searched for stop strings."""
    ignore_eos: Optional[bool] = False
    logprobs: Optional[int] = None
    """None: no logprobs; 0: the sampled token's; k: and the k most likely tokens'. A bool is an
    int, as in vLLM: True is 1, False 0."""
    structured_outputs: Optional[StructuredOutputsParams] = None
    """Constrains the output to JSON, a regex, a choice, a grammar or a structural tag
    (StructuredOutputsParams)."""
    prompt_logprobs: Optional[int] = None
    """None: none; 0: each prompt token's logprob; k (at most 20): and the k most likely tokens'
    at its position (`RequestOutput.prompt_logprobs`). A request asking for them computes its
    whole prompt: it takes no prefix-cache hit. True is 1 and False 0, as logprobs'."""
    skip_special_tokens: Optional[bool] = True
    """The text leaves special tokens out (token_ids keep them). vLLM's
    spaces_between_special_tokens is not offered: latent decodes as transformers' decode does."""
    logit_bias: Optional[dict[int, float]] = None
    """Token id -> bias in [-100, 100], added to the token's logit before sampling (OpenAI's
    logit_bias). The logprobs stay those of the model's raw distribution, as vLLM's. A key is
    taken as vLLM's int(key) takes it where that is exact: 5, 5.0 and "5" are token 5."""
    allowed_token_ids: Optional[Iterable[int]] = None
    """When set (non-empty), only these tokens can be drawn (vLLM's allowed_token_ids), with one
    exception: under structured_outputs the grammar's end (EOS, which it allows only where its
    text may end) stays drawable, so a list without EOS still ends there. With min_tokens > 0, a
    list of only EOS and stop_token_ids ids (which min_tokens holds off) is refused."""
    truncate_prompt_tokens: Optional[int] = None
    """k >= 1: only the prompt's last k tokens are used (vLLM's left truncation); -1: as many as
    the context leaves beside max_tokens (the context, with max_tokens None); None: the whole
    prompt. A k larger than that room is refused when the request is submitted. The server's
    rule (`truncate_prompt_tokens` of its requests), by the same code. RequestOutput's
    prompt_token_ids are the tokens kept; its prompt stays the text given."""

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Every check of the fields, TypeError or ValueError naming the one that is wrong: run
        when made (as vLLM's SamplingParams checks itself) and again when a request is submitted
        (_submit_check), so that a field set after construction is refused as one given to it."""
        # None where vLLM's SamplingParams takes no None either (its from_optional(), which maps
        # None to the default, is the server's): refused rather than quietly meaning a default.
        for f in dataclasses.fields(self):
            if getattr(self, f.name) is None and f.name in _NOT_NONE:
                raise TypeError(f"SamplingParams: {f.name} must not be None (its default is {f.default!r})")
        # As vLLM's _verify_args: n is an int (2.0 would otherwise pass as the JSON number 2).
        if not isinstance(self.n, int) or isinstance(self.n, bool):
            raise ValueError(f"SamplingParams: n must be an int, but is of type {type(self.n).__name__}")
        # A bool is a number to Python but not a sampling value: temperature=True is no 1.0.
        for name in _FLOAT_FIELDS:
            value = getattr(self, name)
            if not _is_real(value):
                raise TypeError(f"SamplingParams: {name} must be a number, not {_describe(value)}")
        for name in _FLAG_FIELDS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise TypeError(f"SamplingParams: {name} must be a bool (True or False), not "
                                f"{_describe(value)}")
        # As vLLM's __post_init__: a bool is an int there, and True is 1.
        for name in ("logprobs", "prompt_logprobs"):
            if isinstance(getattr(self, name), bool):
                setattr(self, name, int(getattr(self, name)))
        if self.structured_outputs is not None and not isinstance(self.structured_outputs,
                                                                  StructuredOutputsParams):
            # vLLM's SamplingParams takes no dict either (its server's pydantic model converts one).
            hint = (" (StructuredOutputsParams(**d) makes one from a dict)"
                    if isinstance(self.structured_outputs, dict) else "")
            raise TypeError("SamplingParams: structured_outputs must be a StructuredOutputsParams, "
                            f"not {_describe(self.structured_outputs)}{hint}")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, Mapping):
                raise TypeError("SamplingParams: logit_bias must be a dict of token ids to biases, "
                                f"not {_describe(self.logit_bias)}")
            for key in self.logit_bias:
                _bias_key(key)
        # Listed once here, as vLLM's list(...) does: an iterator would be empty when read again.
        for name, expected in _LIST_FIELDS.items():
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, _json_list(value, f"SamplingParams: {name}", expected))
        # Newer vLLM reads -1 as "every token of the vocabulary", which latent does not offer:
        # refused (as the request lines and the server refuse it), in words that say None is
        # "none" here.
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if _is_token_id(value) and value < 0:
                raise ValueError(f"SamplingParams: {name} must be in [0, 20] or None, got {value}")
        line = self._line()
        # NaN and infinity have no JSON form: named here, not left to the JSON writer's message.
        for name, value in line.items():
            values = value.values() if name == "logit_bias" else [value]
            if any(_is_real(v) and not isinstance(v, numbers.Integral) and not math.isfinite(v)
                   for v in values):
                raise ValueError(f"SamplingParams: {name} must be finite, got {value!r}")
        # As vLLM's SamplingParams: a value out of range is a ValueError here, by the engine's own
        # rules, not a LatentError from generate().
        try:
            text = _dumps(line)
        except TypeError as e:
            raise TypeError(f"SamplingParams: {e}") from None
        try:
            _latent.check_sampling(text)
        except LatentInternalError:
            raise  # a bug in latent, not a bad field
        except (LatentError, ValueError) as e:
            raise ValueError(f"SamplingParams: {e}") from None

    def _submit_check(self) -> None:
        """_check when a request is submitted: a field set after construction that is wrong is a
        LatentError from generate(), chat() or stream(), as the engine's refusals are."""
        try:
            self._check()
        except (TypeError, ValueError) as e:
            raise LatentError(str(e)) from None

    def _line(self) -> dict[str, Any]:
        line: dict[str, Any] = {
            "n": self.n,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,  # -1: off, as request lines take it
            "min_p": self.min_p,
            "repetition_penalty": self.repetition_penalty,
            "presence_penalty": self.presence_penalty,
            "frequency_penalty": self.frequency_penalty,
            "max_tokens": self.max_tokens,  # None: null, the context's room (MAX_TOKENS_TO_CONTEXT)
            "min_tokens": self.min_tokens,
            "ignore_eos": _flag(self.ignore_eos),
        }
        if self.seed is not None:
            line["seed"] = self.seed
        if self.stop is not None:  # "" and [""] too, for the engine to refuse by name
            line["stop"] = _json_list(self.stop, "SamplingParams: stop", _LIST_FIELDS["stop"])
        # Also without stop strings: it keeps the text of an EOS or stop id that ends a sample.
        line["include_stop_str_in_output"] = _flag(self.include_stop_str_in_output)
        if self.stop_token_ids is not None:
            line["stop_token_ids"] = _json_list(self.stop_token_ids, "SamplingParams: stop_token_ids")
        if self.logprobs is not None:
            line["logprobs"] = self.logprobs
        if self.structured_outputs is not None:
            line["structured_outputs"] = self.structured_outputs._line()
        if self.prompt_logprobs is not None:
            line["prompt_logprobs"] = self.prompt_logprobs
        if self.skip_special_tokens is not True:  # False, None (vLLM's false) or a bad value
            line["skip_special_tokens"] = _flag(self.skip_special_tokens)
        if self.logit_bias:
            # JSON keys are strings: the ids go as "5", the form request lines and OpenAI take
            # (numpy's integers too); a str key as it is, for the engine to read.
            line["logit_bias"] = {_bias_key(k): v for k, v in dict(self.logit_bias).items()}
        if self.allowed_token_ids is not None:  # [] too: the engine refuses it by name
            line["allowed_token_ids"] = _json_list(self.allowed_token_ids,
                                                   "SamplingParams: allowed_token_ids")
        if self.truncate_prompt_tokens is not None:
            line["truncate_prompt_tokens"] = self.truncate_prompt_tokens
        return line


# The SamplingParams fields that take any iterable, and what they hold.
_LIST_FIELDS = {"stop": "a str or a list of str", "stop_token_ids": "an iterable of int token ids",
                "allowed_token_ids": "an iterable of int token ids"}

# The SamplingParams fields that take a float (an int too, not a bool), and those that take a
# bool (None too: vLLM tests them by truth value).
_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty")
_FLAG_FIELDS = ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens")

# The SamplingParams fields for which None means nothing (vLLM's are not Optional either).
_NOT_NONE = frozenset({"n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
                       "presence_penalty", "frequency_penalty", "min_tokens"})


def _flag(value: Any) -> Any:
    """A bool field's request-line value: None is False (vLLM tests these by truth value)."""
    return False if value is None else value


def _bias_key(key: Any) -> Any:
    """A logit_bias key as its request line takes it: an int for vLLM's int(key) where that is
    exact (5, numpy's integers, 5.0); a str as it is, for the engine to read as a token id; a
    ValueError (TypeError for another type) naming the key otherwise (vLLM's int(5.5) would
    quietly be token 5)."""
    if _is_token_id(key):
        return int(key)
    if isinstance(key, str):
        return key
    if _is_real(key):
        if math.isfinite(key) and key == int(key):
            return int(key)
        raise ValueError(f"SamplingParams: logit_bias key {key!r} is not a token id (an integer)")
    raise TypeError(f"SamplingParams: logit_bias key {_describe(key)} is not a token id (an "
                    "integer)")


def _from_array(value: Any) -> Any:
    """A numpy array (anything with tolist() but a list, tuple or memoryview) as Python lists of
    ints, or a 0-d array's one value; anything else as it is."""
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple, memoryview)):
        return value.tolist()
    return value


def _json_list(value: Any, what: str, expected: str = "an iterable of int token ids") -> Any:
    """Any iterable (a list, tuple, set, range, dict keys; a numpy array through tolist()) as a
    JSON list, its integers (numpy's too) as ints, as vLLM's list(...) takes them; a str or
    non-iterable as it is, and other elements as they are, for the engine's check to refuse by
    the field's name (one JSON has no form for is _dumps' TypeError). Bytes, which JSON has no
    form for and which would iterate as token ids (b"ab": 97, 98), are a TypeError naming `what`."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"{what} must be {expected}, not {_describe(value)}")
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        return value
    array = _from_array(value)
    if array is not value and not isinstance(array, list):  # a 0-d array's one value
        return array
    value = array
    return [int(t) if _is_token_id(t) else t for t in value]


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _json_default(value: Any) -> Any:
    """What json.dumps writes for a value it has no form for: numpy's (any numbers.Integral or
    Real) numbers as the number, as vLLM takes them. Anything else is a TypeError naming its
    type: its repr would be a string the engine takes (stop=[b"x"] stopped on the text "b'x'",
    content=b"hi" was rendered as "b'hi'")."""
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{type(value).__name__} {value!r:.60} has no JSON form (a str, number, bool, "
                    "None, list or dict is)")


def _dumps(line: dict[str, Any]) -> str:
    """A request line's JSON text (NaN and infinity refused: JSON has no form for them; a value
    of another type a TypeError, _json_default)."""
    try:
        return json.dumps(line, allow_nan=False, default=_json_default)
    except ValueError as e:
        raise ValueError(f"a value JSON cannot hold (NaN or infinity): {e}") from None


@dataclass
class TokenLogprob:
    """One token's log-probability (a generated token's or a prompt token's), and the most likely
    alternatives at its position when asked."""

    token_id: int
    logprob: float
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)
    """(token id, logprob) of the `SamplingParams.logprobs` (for a prompt token,
    `SamplingParams.prompt_logprobs`) most likely tokens, best first: the i-th has rank i + 1."""
    rank: Optional[int] = None
    """vLLM's Logprob.rank: 1 + the number of tokens more likely than this one (ties count), for a
    prompt token (the server's prompt_logprobs ranks); None for a generated token, which the
    engine does not rank."""
    decoded_token: Optional[str] = None
    """vLLM's Logprob.decoded_token: the token's text alone (special tokens kept); None without a
    tokenizer."""


@dataclass
class CompletionOutput:
    """One sample of a request."""

    index: int
    text: Optional[str]
    """The generated text (special tokens skipped unless `SamplingParams.skip_special_tokens` is
    False); None without a tokenizer."""
    token_ids: list[int]
    finish_reason: str
    """"stop" (EOS, a stop token or a stop string), "length" (max_tokens) or "cancelled"."""
    stop_reason: Optional[Union[int, str]] = None
    """What ended the sample, as vLLM's: the stop string, if one did; else the
    `SamplingParams.stop_token_ids` entry or an EOS id of generation_config.json other than the
    tokenizer's (any, without a tokenizer) (an int), if one did; else None (the tokenizer's EOS,
    listed or not, checked before stop_token_ids unless `ignore_eos`, max_tokens, or a grammar's
    end)."""
    logprobs: Optional[list[TokenLogprob]] = None
    """Per generated token, when `SamplingParams.logprobs` is set."""

    @property
    def cumulative_logprob(self) -> Optional[float]:
        return None if self.logprobs is None else sum(t.logprob for t in self.logprobs)

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """One request's result, as vLLM's `RequestOutput`."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    prompt_logprobs: Optional[list[Optional[TokenLogprob]]] = None
    """With `SamplingParams.prompt_logprobs`: one entry per prompt token, None for the first (it has
    no position before it), then each token's logprob under the model given the tokens before it.
    vLLM's entry is a dict {token_id: Logprob} holding the prompt token and the k most likely;
    here it is a TokenLogprob: the prompt token's id and logprob, and the k most likely as
    top_logprobs (which hold the prompt token too when it is among them). The request's, not a
    sample's: the same for every n."""
    num_cached_tokens: Optional[int] = None
    """Prompt tokens the prefix cache held (the server's usage.prompt_tokens_details
    .cached_tokens); None when the request generated no token (max_tokens 0)."""


@dataclass
class StreamChunk:
    """What one request added since the previous chunk of `LLM.stream`."""

    text: str
    """New text (may be empty while text that could start a stop string is held back)."""
    token_ids: list[int]
    logprobs: Optional[list[TokenLogprob]] = None
    finish_reason: Optional[str] = None
    """Set on the last chunk."""
    stop_reason: Optional[Union[int, str]] = None
    """On the last chunk, `CompletionOutput.stop_reason`: the stop string or stop token id that
    ended the sample, else None (as on every earlier chunk), as vLLM's streamed outputs."""


PromptType = Union[str, Sequence[int], dict]


def _logprobs(entries) -> list[TokenLogprob]:
    """TokenLogprobs from the engine's (token, logprob, top, rank or None, text or None)."""
    return [TokenLogprob(token, logprob, [tuple(t) for t in top], rank, text)
            for token, logprob, top, rank, text in entries]


class LLM:
    """A model loaded in this process with a running engine.

    `model`: a Hugging Face checkpoint directory (config.json, safetensors, and tokenizer.json
    for text prompts). Engine options (`latent serve`'s flags, underscored):
    quantize ("none", "int8", "w8a8"), precision ("auto", "bf16", "f32": bf16 activations at
    each linear's input for bf16 and fp8 checkpoints, f32 math for f32 ones, under "auto"),
    attention ("auto", "absorbed", "expanded"),
    max_batch_tokens, max_seqs, block_tokens, num_blocks, cache_memory_gib, prefix_caching,
    cache_dtype ("auto", "f32", "bf16", "fp8"), speculative_tokens (prompt-lookup draft tokens per
    sequence and step, 0: off; the output is the same either way on latent's own kernels;
    LATENT_GEMM=onednn is not batch invariant, and its logprobs may differ in their last bits),
    speculative_ngram_max,
    speculative_ngram_min, check_invariants.

    Thread-safe: several threads may call generate/chat/stream at once; their requests share the
    engine's batches. Use as a context manager, or call close(), to stop the engine thread (see
    close() for what happens to requests still running in other threads).
    """

    def __init__(self, model: str, tokenizer: Optional[str] = None, **engine_options: Any) -> None:
        args = _latent.EngineArgs()
        for key, value in engine_options.items():
            if key not in _ENGINE_OPTIONS:
                raise TypeError(f"LLM() got an unknown engine option '{key}' (known: {', '.join(_ENGINE_OPTIONS)})")
            setattr(args, key, _check_engine_option(key, value))
        self.model = str(model)
        self._engine = _latent.Engine(self.model, "" if tokenizer is None else str(tokenizer), args)
        # generation_config.json's sampling defaults, read once. The engine checked them before
        # it loaded the weights (SamplingDefaults::Check, the server's and `latent generate`'s
        # check too), so a failure here is latent's own: the engine is stopped all the same.
        try:
            self._default_sampling = SamplingParams(**json.loads(self._engine.default_sampling()))
        except BaseException:
            self._engine.close()
            raise
        self._next_id = 0
        self._id_lock = threading.Lock()
        _open_llms.add(self)

    # -- generation -------------------------------------------------------------------------

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
    ) -> list[RequestOutput]:
        """Runs the prompts concurrently and returns their results in order.

        `prompts`: a string, a list of int token ids (or a numpy int array), a dict
        {"prompt": str} or {"prompt_token_ids": [...]}, or a list of these; anything else raises
        TypeError before any is submitted. `sampling_params`: one for all prompts or one per prompt
        (default: get_default_sampling_params(), generation_config.json's). `use_tqdm` (vLLM's: a
        bool or a tqdm-like callable) is accepted so that vLLM code runs, and changes nothing:
        latent shows no progress bar.
        Ctrl-C cancels the requests and raises KeyboardInterrupt; the LLM stays usable.
        """
        _check_use_tqdm(use_tqdm)
        if prompts is None:
            raise TypeError("generate() needs prompts: " + _PROMPTS_ACCEPTED)
        items = _as_prompt_list(prompts)
        lines, texts = zip(*[_prompt_line(p, i) for i, p in enumerate(items)]) if items else ((), ())
        return self._run(list(lines), list(texts), sampling_params, "generate")

    def chat(
        self,
        messages: Union[Sequence[dict], Sequence[Sequence[dict]]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
        *,
        add_generation_prompt: Optional[bool] = None,
        chat_template_kwargs: Optional[dict] = None,
        tools: Optional[list[dict]] = None,
        continue_final_message: bool = False,
    ) -> list[RequestOutput]:
        """Renders each conversation with the checkpoint's chat template and generates a reply.

        `messages`: one conversation (a list of {"role", "content"} dicts) or a list of them,
        read as vLLM reads them: a list whose first item is a list, and [], are lists of
        conversations ([] gives []); anything else (a tuple of lists too) is one conversation.
        Each is checked and shaped as the server's chat requests are (a "developer" message is a
        system one, text content parts are joined; no role, or no messages, raises LatentError).
        `continue_final_message`: the model continues the final message (a prefilled reply), as
        in apply_chat_template; `add_generation_prompt` defaults to True, or to False with it.
        Each RequestOutput's `prompt` is the rendered prompt text, as vLLM's. `use_tqdm` changes
        nothing (latent shows no progress bar), as in generate().
        """
        _check_use_tqdm(use_tqdm)
        # vLLM's is_list_of(messages, list): true for [] (no conversations, so no outputs) and
        # for a list whose first item is a list; a tuple of lists is one conversation there.
        several = isinstance(messages, list) and (not messages or isinstance(messages[0], list))
        conversations = messages if several else [messages]
        lines = [_chat_line(c, add_generation_prompt, chat_template_kwargs, tools,
                            continue_final_message) for c in conversations]
        return self._run(lines, [None] * len(lines), sampling_params, "chat")

    def stream(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None) -> Iterator[StreamChunk]:
        """Generates for one prompt (n must be 1), yielding chunks as the tokens come.

        The prompt and the parameters are checked when stream() is called (the errors
        generate() would raise); the request is submitted at the first next(). Leaving the loop
        early (break, an exception, Ctrl-C) cancels the request.
        """
        params = _params_list(sampling_params, 1, "stream", self.get_default_sampling_params)[0]
        params._submit_check()
        if params.n != 1:
            raise ValueError(f"stream() generates one sample; SamplingParams.n is {params.n}")
        if params.prompt_logprobs is not None:
            # A chunk has no place for them (vLLM's server refuses them with stream too).
            raise ValueError("stream() does not return prompt_logprobs; use generate()")
        line, _ = _prompt_line(prompt)
        line.update(params._line())
        return self._stream(_dumps(line), params.logprobs is not None)

    def _stream(self, line_json: str, logprobs: bool) -> Iterator[StreamChunk]:
        handle = self._engine.submit(line_json, _latent.MAX_TOKENS_TO_CONTEXT, True)
        try:
            while True:
                ids, entries, text, finish, stop_reason = self._engine.poll(handle, _WAIT_SLICE_S)
                if finish.startswith("error: "):
                    raise _engine_error(finish[len("error: "):])
                if ids or text or finish:
                    yield StreamChunk(text, list(ids), _logprobs(entries) if logprobs else None,
                                      finish or None, stop_reason)
                if finish:
                    return
        finally:
            self._engine.release(handle)

    def get_default_sampling_params(self) -> SamplingParams:
        """The SamplingParams that generate(), chat() and stream() use when given none, as vLLM's:
        the model's generation_config.json sets temperature, top_p, top_k, min_p and
        repetition_penalty (and max_new_tokens, as max_tokens) where it lists them; the rest are
        SamplingParams()'s defaults. A copy of what LLM() read: changing it changes no other."""
        return copy.copy(self._default_sampling)

    # -- tokenizer and template -------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text` (as transformers' tokenizer(text) with special tokens)."""
        return self._engine.encode(text, add_special_tokens)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._engine.decode(list(token_ids), skip_special_tokens)

    def apply_chat_template(self, messages: Sequence[dict],
                            add_generation_prompt: Optional[bool] = None,
                            tools: Optional[list[dict]] = None,
                            chat_template_kwargs: Optional[dict] = None,
                            continue_final_message: bool = False) -> str:
        """The prompt text the checkpoint's chat template renders for `messages`.

        `continue_final_message`: the prompt ends inside the final message, for the model to
        continue it (as transformers' apply_chat_template). `add_generation_prompt` defaults to
        True, or to False with continue_final_message; both True raises.

        Assistant turns with tool calls are shaped as the server shapes them, so the text can
        differ from transformers' apply_chat_template: the arguments reach the template as JSON
        text or, for templates that read them key by key (GLM-4.5), parsed into objects, and a
        null content beside the calls stays none where the template writes the calls only then
        (DeepSeek V3), else becomes "".
        """
        line = _chat_line(messages, add_generation_prompt, chat_template_kwargs, tools,
                          continue_final_message)
        return self._engine.render_chat(_dumps(line))

    # -- state ------------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        """A few fields of the model's config: model_type, vocab_size, hidden_size, ..., and the
        precision its linears run in ("bf16" or "f32", `precision="auto"` resolved)."""
        return self._engine.config()

    def metrics(self) -> dict[str, Any]:
        """The engine's counters: running, waiting, blocks, tokens, steps, preemptions, ..."""
        return self._engine.metrics()

    def close(self) -> None:
        """Stops the engine thread. Requests still running, in other threads' generate(), chat()
        or stream(), end at once: those calls raise LatentError ("this LLM was closed while the
        request ran"), as does any later call that needs the engine. A second close() does
        nothing; one that races another returns at once while the first stops the engine."""
        self._engine.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------

    def _run(self, lines: list[dict], texts: list[Optional[str]], sampling_params, call: str) -> list[RequestOutput]:
        params = _params_list(sampling_params, len(lines), call, self.get_default_sampling_params)
        for p in {id(p): p for p in params}.values():  # each once, before anything is submitted
            p._submit_check()
        # Every line written before any is submitted: a value JSON has no form for submits none.
        texts_json: list[str] = []
        for i, (line, p) in enumerate(zip(lines, params)):
            try:
                texts_json.append(_dumps(dict(line, **p._line())))
            except (TypeError, ValueError) as e:
                raise type(e)(f"prompt {i}: {e}") from None
        handles: list[int] = []
        try:
            for i, text_json in enumerate(texts_json):
                try:
                    handles.append(self._engine.submit(text_json, _latent.MAX_TOKENS_TO_CONTEXT,
                                                       False))
                except LatentError as e:
                    raise type(e)(f"prompt {i}: {e}") from None
            while not self._engine.wait(handles, _WAIT_SLICE_S):
                pass
            results = []
            for handle, text, p in zip(handles, texts, params):
                samples = self._engine.result(handle)
                outputs = []
                for index, (ids, out_text, finish, stop_reason, logprobs, error) in enumerate(samples):
                    if error:
                        raise _engine_error(error)
                    outputs.append(CompletionOutput(index, out_text, list(ids), finish, stop_reason,
                                                    _logprobs(logprobs) if logprobs is not None else None))
                prompt_logprobs = self._engine.prompt_logprobs(handle)
                if prompt_logprobs is not None:
                    prompt_logprobs = [None] + _logprobs(prompt_logprobs[1:])
                if text is None:
                    text = self._engine.chat_prompt(handle)  # a chat's rendered prompt, or None
                results.append(RequestOutput(self._new_id(), text, list(self._engine.prompt_ids(handle)), outputs,
                                             prompt_logprobs=prompt_logprobs,
                                             num_cached_tokens=self._engine.cached_tokens(handle)))
            return results
        finally:
            for handle in handles:
                self._engine.release(handle)

    def _new_id(self) -> str:
        with self._id_lock:
            self._next_id += 1
            return str(self._next_id - 1)


# Every LLM not yet collected, for _close_at_exit.
_open_llms: "weakref.WeakSet[LLM]" = weakref.WeakSet()


def _close_at_exit() -> None:
    """At interpreter exit Python ends its daemon threads where they next take the GIL; one
    waiting in the engine (generate(), stream()) would be ended inside C++ code, which aborts the
    process. So every LLM still open is closed, and its waiters get the moment they need to
    return to Python (where their call raises LatentError) before the threads are stopped."""
    for llm in list(_open_llms):
        llm.close()
        deadline = time.monotonic() + 2.0
        while llm._engine.waiting() > 0 and time.monotonic() < deadline:
            time.sleep(0.001)


atexit.register(_close_at_exit)


_PROMPTS_ACCEPTED = ("a str, a list of int token ids (or a numpy int array), a dict with 'prompt' or "
                     "'prompt_token_ids', or a list of these")


def _is_token_id(t: Any) -> bool:
    # numpy's integers are Integral; bool is an int but not a token id.
    return isinstance(t, numbers.Integral) and not isinstance(t, bool)


def _describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:80]


def _as_prompt_list(prompts) -> list:
    if isinstance(prompts, (str, dict)):
        return [prompts]
    # bytes would iterate as token ids (b"abc": 97, 98, 99).
    if isinstance(prompts, (bytes, bytearray, memoryview)) or not hasattr(prompts, "__iter__"):
        raise TypeError(f"prompts must be {_PROMPTS_ACCEPTED}; got {_describe(prompts)}")
    array = _from_array(prompts)  # a numpy array: token ids, or rows of them
    if array is not prompts and not isinstance(array, list):  # a 0-d array's one value
        raise TypeError(f"prompts must be {_PROMPTS_ACCEPTED}; got {_describe(array)}")
    prompts = array
    prompts = list(prompts)
    ids = [_is_token_id(t) for t in prompts]
    if prompts and all(ids):
        return [prompts]  # One prompt of token ids.
    if any(ids):
        raise TypeError("prompts mix int token ids with other items: a list of ints is one prompt "
                        f"of token ids; a list of prompts holds str, lists of ids or dicts (got "
                        f"{_describe(prompts[ids.index(False)])} at {ids.index(False)})")
    return prompts


# The keys of a prompt dict (vLLM's TextPrompt and TokensPrompt) latent takes, and vLLM's others,
# refused by name rather than ignored: multimodal data, a prefix-cache salt (which the server
# does not take either), prompt embeddings.
_PROMPT_KEYS = frozenset({"prompt", "prompt_token_ids"})
_VLLM_PROMPT_KEYS = frozenset({"multi_modal_data", "mm_processor_kwargs", "multi_modal_uuids",
                               "cache_salt", "token_type_ids", "prompt_embeds"})


def _prompt_line(prompt: PromptType, index: Optional[int] = None) -> tuple[dict[str, Any], Optional[str]]:
    """The request line of one prompt (generate()'s `index`-th), and its text; TypeError naming
    what a prompt is otherwise."""
    where = "the prompt" if index is None else f"prompt {index}"
    if isinstance(prompt, str):
        return {"prompt": prompt}, prompt
    if isinstance(prompt, dict):
        for key in prompt:
            if key not in _PROMPT_KEYS:
                what = ("is one of vLLM's that latent does not support" if key in _VLLM_PROMPT_KEYS
                        else "is not a prompt key")
                raise ValueError(f"{where}: {key!r} {what} (a prompt dict takes 'prompt' and "
                                 "'prompt_token_ids')")
        if "prompt_token_ids" in prompt:
            ids = _json_list(prompt["prompt_token_ids"], f"{where}: 'prompt_token_ids'")
            if not isinstance(ids, list) or not all(_is_token_id(t) for t in ids):
                raise TypeError(f"{where}: 'prompt_token_ids' must be a list of int token ids; got "
                                f"{_describe(prompt['prompt_token_ids'])}")
            return {"ids": [int(t) for t in ids]}, prompt.get("prompt")
        if "prompt" in prompt:
            if not isinstance(prompt["prompt"], str):
                raise TypeError(f"{where}: 'prompt' must be a str; got {_describe(prompt['prompt'])}")
            return {"prompt": prompt["prompt"]}, prompt["prompt"]
        raise ValueError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
    prompt = _from_array(prompt)  # a numpy array of token ids
    if isinstance(prompt, (list, tuple)) and all(_is_token_id(t) for t in prompt):
        return {"ids": [int(t) for t in prompt]}, None
    if isinstance(prompt, (list, tuple)):
        bad = next(t for t in prompt if not _is_token_id(t))
        raise TypeError(f"{where} is a list holding {_describe(bad)}, not only int token ids: a "
                        f"prompt is {_PROMPTS_ACCEPTED}")
    raise TypeError(f"{where} is {_describe(prompt)}: a prompt is {_PROMPTS_ACCEPTED}")


def _chat_line(messages, add_generation_prompt: Optional[bool],
               chat_template_kwargs: Optional[dict], tools: Optional[list[dict]],
               continue_final_message: bool) -> dict[str, Any]:
    """A conversation's request line: its messages are checked, shaped and rendered by the
    server's code (an OpenAI "developer" message is a system one, text content parts are joined,
    a message without a role or an empty conversation is refused, by the server's messages)."""
    if isinstance(messages, (list, tuple)):
        messages = list(messages)
    line: dict[str, Any] = {"messages": messages, "continue_final_message": continue_final_message}
    # Unset: the request line's default (off when continuing).
    if add_generation_prompt is not None:
        line["add_generation_prompt"] = add_generation_prompt
    if tools is not None:
        line["tools"] = tools
    if chat_template_kwargs is not None:
        line["chat_template_kwargs"] = chat_template_kwargs
    return line


def _params_list(sampling_params, count: int, call: str,
                 default: Callable[[], SamplingParams]) -> list[SamplingParams]:
    """One SamplingParams per prompt: None (`default()`, the model's defaults), one for all, or a
    list of `count`."""
    if sampling_params is None:
        return [default()] * count
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * count
    if isinstance(sampling_params, (list, tuple)) and call != "stream":
        params = list(sampling_params)
        for i, p in enumerate(params):
            if not isinstance(p, SamplingParams):
                raise TypeError(f"{call}(): sampling_params[{i}] is {_describe(p)}, not a SamplingParams")
        if len(params) != count:
            raise ValueError(f"{count} prompts but {len(params)} SamplingParams")
        return params
    wanted = "a SamplingParams" if call == "stream" else "a SamplingParams or a list of them"
    raise TypeError(f"{call}(): sampling_params must be {wanted}, not {_describe(sampling_params)}"
                    + (" (make one with SamplingParams(**d))" if isinstance(sampling_params, dict) else ""))


def _check_use_tqdm(use_tqdm: Any) -> None:
    if not (isinstance(use_tqdm, bool) or callable(use_tqdm)):
        raise TypeError(f"use_tqdm must be a bool or a callable (vLLM's), not {_describe(use_tqdm)}")
