"""`latent serve --speculative-tokens` over the OpenAI API, on the trained demo model: structured
output (the grammar's mask for each draft token's row is built after the tokens before it are
accepted), seeded sampling with n > 1, logprobs and streaming give exactly what a server without
drafts gives, and /metrics counts the draft tokens run and accepted."""

from __future__ import annotations

import json

from e2e_harness import REPO, chat_model, start_server  # noqa: F401

DEMO = REPO / "models" / "demo"
FLAGS = ("--block-tokens", "16", "--check-invariants")

SCHEMA = {
    "type": "object",
    "properties": {"name": {"enum": ["ROMEO", "JULIET", "HAMLET"]},
                   "act": {"type": "integer", "minimum": 1, "maximum": 5},
                   "line": {"type": "string", "maxLength": 40}},
    "required": ["name", "act", "line"],
}
# Records like the one asked for, so that a prompt-lookup draft has something to copy.
PROMPT = ('{"name": "ROMEO", "act": 2, "line": "But soft, what light"}\n'
          '{"name": "JULIET", "act": 2, "line": "O Romeo, Romeo"}\n'
          '{"name": "HAMLET", "act": 3, "line": "To be, or not to be"}\n')


def ask(server) -> list:
    """The same requests to a server: what its clients see of each."""
    client = server.client(timeout=120)
    seen = []
    schema = {"type": "json_schema", "json_schema": {"name": "line", "schema": SCHEMA}}
    for temperature, seed, n in [(0.0, None, 1), (0.8, 17, 3)]:
        r = client.completions.create(model=server.name, prompt=PROMPT, max_tokens=60, n=n,
                                      temperature=temperature, seed=seed, logprobs=2,
                                      extra_body={"response_format": schema})
        for c in r.choices:
            json.loads(c.text)  # the grammar held
            seen.append((c.text, c.finish_reason, c.logprobs.tokens, c.logprobs.token_logprobs,
                         c.logprobs.top_logprobs))
    # Unconstrained and streamed: the verse the model repeats.
    stream = client.chat.completions.create(
        model=server.name, messages=[{"role": "user", "content": "To be, or not to be"}],
        max_tokens=64, temperature=0.0, stream=True)
    seen.append("".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))
    return seen


def test_drafts_change_nothing_a_client_sees(start_server):
    plain = ask(start_server(*FLAGS, model=DEMO))
    drafting = start_server(*FLAGS, "--speculative-tokens", "4", model=DEMO)
    assert ask(drafting) == plain
    metrics = drafting.metrics()
    drafted = metrics["latent_spec_decode_num_draft_tokens_total"]
    accepted = metrics["latent_spec_decode_num_accepted_tokens_total"]
    assert 0 < accepted <= drafted, metrics
    assert "speculative decoding: up to 4 prompt-lookup draft tokens" in drafting.log()
