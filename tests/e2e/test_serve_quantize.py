"""`latent serve --quantize int8`: the load is logged with the weight bytes, and greedy
completions through the server equal `latent generate --quantize int8` on the same prompt ids."""

from __future__ import annotations

import json

from conftest import run_latent
from e2e_harness import MODEL_NAME, SERVER_FLAGS, chat_model, start_server  # noqa: F401 (fixtures)

MAX_TOKENS = 12


def test_serve_int8_equals_generate_int8(start_server, chat_model):
    srv = start_server(*SERVER_FLAGS, "--quantize", "int8")
    assert "--quantize int8:" in srv.log() and "weights now" in srv.log()
    client = srv.client()
    for prompt in ["The capital of France is", "def fibonacci(n):"]:
        resp = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS,
                                         temperature=0, extra_body={"return_token_ids": True})
        prompt_ids = resp.choices[0].model_extra["prompt_token_ids"]
        ids = resp.choices[0].model_extra["token_ids"]
        out = run_latent("generate", "--model", str(chat_model), "--ids",
                         ",".join(map(str, prompt_ids)), "--max-tokens", str(MAX_TOKENS),
                         "--quantize", "int8")
        assert ids == json.loads(out.stdout)["ids"]
