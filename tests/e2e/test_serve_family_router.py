"""A.X-K1 (axk1), Mistral Small 4 (mistral4, as released: wrapped in a Mistral 3
vision-language checkpoint), A.X-K2 (axk2: DSA, fused query/output gate, gated RMSNorms) and
Mistral Large 4 (mistral_large4: NoPE and KV-sharing layers, shared indexers, in its wrapper),
Hy4 (hy_v4: hyper-connection streams, attention sinks, output gate, shared indexers),
Kimi Linear (kimi_linear: KDA linear-attention layers with per-sequence state, NoPE MLA),
Ling 3 (bailing_hybrid: KDA layers with full-rank safe gates, MLA with a per-head output gate),
dots3-note (dots3_note: DSA and sliding-window layers of two MLA shapes) and
GLM-5-Next (glm5_next: KDA and NoPE DSA-MLA layers, mHC streams, KPool indexer, in its wrapper)
served over the OpenAI API: a chat completion with the tokenizer's chat template, a greedy
completion equal to `latent generate` on the same prompt ids, and the same completion streamed."""

from __future__ import annotations

import json

import pytest

from conftest import run_latent
from e2e_harness import MODEL_NAME, SERVER_FLAGS, TOKENIZER_DIR, LatentServer

MAX_TOKENS = 10


@pytest.mark.parametrize("preset", ["axk1", "mistral4_vl", "axk2", "mistral_large4",
                                    "hy_v4",
                                    "kimi_linear", "dots3_note", "glm5_next", "bailing_hybrid"])
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
        prompt_ids = resp.choices[0].model_extra["prompt_token_ids"]
        ids = resp.choices[0].model_extra["token_ids"]
        out = run_latent("generate", "--model", str(model), "--ids", ",".join(map(str, prompt_ids)),
                         "--max-tokens", str(MAX_TOKENS), "--ignore-eos")
        assert ids == json.loads(out.stdout)["ids"]
        assert len(ids) == MAX_TOKENS

        streamed = client.completions.create(model=MODEL_NAME, prompt="The capital of France is",
                                             max_tokens=MAX_TOKENS, temperature=0, stream=True,
                                             extra_body={"ignore_eos": True})
        text = "".join(chunk.choices[0].text for chunk in streamed if chunk.choices)
        assert text == resp.choices[0].text
    finally:
        assert srv.stop() == 0, srv.log()
