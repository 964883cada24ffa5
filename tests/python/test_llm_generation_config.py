"""sampling_params=None takes generation_config.json's sampling fields, as vLLM's LLM.generate and
LLM.chat do (LLM.get_default_sampling_params: temperature, top_p, top_k, min_p,
repetition_penalty, and max_new_tokens as max_tokens); it used SamplingParams()'s defaults. On
copies of the committed demo model with their own generation_config.json. A few seconds."""

from __future__ import annotations

import pytest

from conftest import BUILD_PYTHON, REPO, demo_with

try:
    import latent
except ImportError as e:
    raise RuntimeError(f"{BUILD_PYTHON}/latent is missing or broken ({e}): run `make build` "
                       "with nanobind in .venv (requirements-dev.txt)") from e

DEMO = REPO / "models" / "demo"



def test_none_uses_the_generation_config(tmp_path):
    # top_k 1: every draw is the most likely token, whatever the temperature; 7 tokens at most.
    model = demo_with(tmp_path, temperature=0.6, top_p=0.95, top_k=1, min_p=0.01,
                      repetition_penalty=1.0, max_new_tokens=7, do_sample=True)
    with latent.LLM(str(model), block_tokens=16) as llm:
        defaults = llm.get_default_sampling_params()
        assert (defaults.temperature, defaults.top_p, defaults.top_k, defaults.min_p,
                defaults.repetition_penalty, defaults.max_tokens) == (0.6, 0.95, 1, 0.01, 1.0, 7)
        assert defaults.seed is None and defaults.n == 1  # the rest are SamplingParams()'s
        greedy = llm.generate("ROMEO.", latent.SamplingParams(temperature=0, max_tokens=7))[0]
        for _ in range(3):
            assert llm.generate("ROMEO.")[0].outputs[0].token_ids == greedy.outputs[0].token_ids
        chat = [{"role": "user", "content": "What say you?"}]
        greedy_chat = llm.chat(chat, latent.SamplingParams(temperature=0, max_tokens=7))[0]
        assert llm.chat(chat)[0].outputs[0].token_ids == greedy_chat.outputs[0].token_ids
        streamed = [t for c in llm.stream("ROMEO.") for t in c.token_ids]
        assert streamed == greedy.outputs[0].token_ids
        # Given SamplingParams are used as they are.
        given = latent.SamplingParams(max_tokens=9, temperature=0, ignore_eos=True)
        assert len(llm.generate("ROMEO.", given)[0].outputs[0].token_ids) == 9


def test_without_sampling_fields_the_defaults_are_sampling_params(tmp_path):
    with latent.LLM(str(DEMO), block_tokens=16) as llm:
        assert llm.get_default_sampling_params() == latent.SamplingParams()


@pytest.mark.parametrize("fields, message", [
    ({"temperature": "hot"}, "generation_config.json: temperature must be a number, got \"hot\""),
    ({"top_k": 1.5}, "generation_config.json: top_k must be an integer, got 1.5"),
    # The same check as the server's and `latent generate`'s (SamplingDefaults::Check).
    ({"top_p": 1.5}, "generation_config.json: top_p must be in \\(0, 1\\], got 1.5"),
    # Taken before, after which every call with sampling_params=None made no token.
    ({"max_new_tokens": 0}, "generation_config.json: max_new_tokens must be at least 1, got 0"),
])
@pytest.mark.parametrize("weights", [True, False])
def test_a_bad_sampling_field_is_named_at_load(tmp_path, fields, message, weights):
    """Before the weights are read: with weights that do not load, the file's field is still what
    the error names (LLM read it once the engine ran)."""
    with pytest.raises(latent.LatentError, match=message):
        latent.LLM(str(demo_with(tmp_path, weights=weights, **fields)), block_tokens=16)


def test_top_k_minus_one_in_the_file_is_off(tmp_path):
    """vLLM's spelling of off, as the server and request lines take it in the file."""
    with latent.LLM(str(demo_with(tmp_path, top_k=-1, temperature=0)), block_tokens=16) as llm:
        assert llm.get_default_sampling_params().top_k == 0
        greedy = latent.SamplingParams(temperature=0, top_k=0)
        assert (llm.generate("ROMEO.")[0].outputs[0].token_ids
                == llm.generate("ROMEO.", greedy)[0].outputs[0].token_ids)


class NoDefaultSampling:
    """An engine whose default_sampling may not be called again."""

    def __init__(self, engine):
        self._engine = engine

    def default_sampling(self):
        raise AssertionError("default_sampling read again")

    def __getattr__(self, name):
        return getattr(self._engine, name)


def test_the_defaults_are_read_once_and_given_as_copies(tmp_path, monkeypatch):
    model = demo_with(tmp_path, temperature=0.6, top_k=1, max_new_tokens=3)
    with latent.LLM(str(model), block_tokens=16) as llm:
        monkeypatch.setattr(llm, "_engine", NoDefaultSampling(llm._engine))
        first = llm.get_default_sampling_params()
        first.temperature = 0.1
        assert llm.get_default_sampling_params().temperature == 0.6
        assert len(llm.generate("ROMEO.")[0].outputs[0].token_ids) <= 3
