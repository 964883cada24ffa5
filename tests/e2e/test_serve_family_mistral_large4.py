"""Mistral Large 4 (mistral_large4, as released: wrapped in its vision-language checkpoint with
Mistral's native tensor names; NoPE layers, KV sharing, shared DSA indexers, softcapped logits)
served over the OpenAI API: a chat completion with the tokenizer's chat template, and a greedy
completion equal to `latent generate` on the same prompt ids."""

from __future__ import annotations

import json

import pytest

from conftest import run_latent
from e2e_harness import MODEL_NAME, SERVER_FLAGS, TOKENIZER_DIR, LatentServer

MAX_TOKENS = 10


@pytest.mark.parametrize("preset", ["mistral_large4"])
def test_chat_and_completion_over_openai_api(tiny_models, tmp_path, preset):
    model = tiny_models.get(preset, "--tokenizer", str(TOKENIZER_DIR))
    srv = LatentServer(model, tmp_path / "serve.log", *SERVER_FLAGS)
    try:
        client = srv.client()
        chat = client.chat.completions.create(
            model=MODEL_NAME, messages=[{"role": "user", "content": "Name three colours."}],
            max_tokens=MAX_TOKENS, temperature=0)
        choice = chat.choices[0]
        assert choice.message.role == "assistant"
        assert choice.finish_reason in ("stop", "length")
        assert 0 < chat.usage.completion_tokens <= MAX_TOKENS
        assert chat.usage.prompt_tokens > 5  # the template wrapped the message

        resp = client.completions.create(model=MODEL_NAME, prompt="The capital of France is",
                                         max_tokens=MAX_TOKENS, temperature=0,
                                         extra_body={"return_token_ids": True, "ignore_eos": True})
        prompt_ids = resp.model_extra["prompt_token_ids"][0]
        ids = resp.choices[0].model_extra["token_ids"]
        out = run_latent("generate", "--model", str(model), "--ids", ",".join(map(str, prompt_ids)),
                         "--max-tokens", str(MAX_TOKENS), "--ignore-eos")
        assert ids == json.loads(out.stdout)["ids"]
        assert len(ids) == MAX_TOKENS
    finally:
        assert srv.stop() == 0, srv.log()
