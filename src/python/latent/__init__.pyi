# Type hints for latent (the package's API; latent._latent is its private back end).
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence, Union

class LatentError(RuntimeError):
    """Raised with latent's message when the engine refuses something."""

class LatentInternalError(LatentError):
    """A failed internal check: a bug in latent, not the caller's input."""

@dataclass
class StructuredOutputsParams:
    json: Optional[Union[str, dict]] = None
    regex: Optional[str] = None
    choice: Optional[list[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    structural_tag: Optional[Union[str, dict]] = None
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    disable_fallback: bool = False

@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: Optional[int] = None
    # None: up to the context (the smaller of max_position_embeddings and what the cache can
    # hold, less the prompt)
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    stop: Optional[Union[str, list[str]]] = None
    include_stop_str_in_output: Optional[bool] = False
    stop_token_ids: Optional[Iterable[int]] = None
    ignore_eos: Optional[bool] = False
    logprobs: Optional[int] = None
    structured_outputs: Optional[StructuredOutputsParams] = None
    prompt_logprobs: Optional[int] = None
    skip_special_tokens: Optional[bool] = True
    logit_bias: Optional[dict[int, float]] = None
    allowed_token_ids: Optional[Iterable[int]] = None
    truncate_prompt_tokens: Optional[int] = None

@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top_logprobs: list[tuple[int, float]] = ...
    rank: Optional[int] = None
    decoded_token: Optional[str] = None

@dataclass
class CompletionOutput:
    index: int
    text: Optional[str]
    token_ids: list[int]
    finish_reason: str
    stop_reason: Optional[Union[int, str]] = None
    logprobs: Optional[list[TokenLogprob]] = None
    @property
    def cumulative_logprob(self) -> Optional[float]: ...
    def finished(self) -> bool: ...

@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    prompt_logprobs: Optional[list[Optional[TokenLogprob]]] = None
    num_cached_tokens: Optional[int] = None

@dataclass
class StreamChunk:
    text: str
    token_ids: list[int]
    logprobs: Optional[list[TokenLogprob]] = None
    finish_reason: Optional[str] = None
    stop_reason: Optional[Union[int, str]] = None

PromptType = Union[str, Sequence[int], dict[str, Any]]  # token ids: a numpy int array too

class LLM:
    model: str
    def __init__(
        self,
        model: str,
        tokenizer: Optional[str] = None,
        *,
        quantize: str = "none",
        precision: str = "auto",
        attention: str = "auto",
        max_batch_tokens: int = 2048,
        max_seqs: int = 256,
        block_tokens: int = 64,
        num_blocks: int = 0,
        cache_memory_gib: float = 1.0,
        prefix_caching: bool = True,
        cache_dtype: str = "auto",
        speculative_tokens: int = 0,
        speculative_ngram_max: int = 3,
        speculative_ngram_min: int = 1,
        check_invariants: bool = False,
    ) -> None: ...
    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
    ) -> list[RequestOutput]: ...
    def chat(
        self,
        messages: Union[Sequence[dict[str, Any]], Sequence[Sequence[dict[str, Any]]]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
        *,
        add_generation_prompt: Optional[bool] = None,
        chat_template_kwargs: Optional[dict[str, Any]] = None,
        tools: Optional[list[dict[str, Any]]] = None,
        continue_final_message: bool = False,
    ) -> list[RequestOutput]: ...
    def stream(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None) -> Iterator[StreamChunk]: ...
    def get_default_sampling_params(self) -> SamplingParams: ...
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...
    def apply_chat_template(
        self,
        messages: Sequence[dict[str, Any]],
        add_generation_prompt: Optional[bool] = None,
        tools: Optional[list[dict[str, Any]]] = None,
        chat_template_kwargs: Optional[dict[str, Any]] = None,
        continue_final_message: bool = False,
    ) -> str: ...
    @property
    def config(self) -> dict[str, Any]: ...
    def metrics(self) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "LLM": ...
    def __exit__(self, *exc: object) -> None: ...
