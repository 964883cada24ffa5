"""`latent generate` refuses a --max-tokens that cannot fit the model's positions with a clear
error, before any work: a huge one used to wrap the prompt + max_tokens sum and end in an
internal error (the --ids path) or generate past the context (a large one).

Run: .venv/bin/python -m pytest -q tests/tools/test_generate_limits.py
"""

from __future__ import annotations

import json

from conftest import run_latent


def test_generate_refuses_max_tokens_past_the_positions(tiny_models):
    model = tiny_models.get("deepseek_v3")
    positions = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    for max_tokens in (positions, 2**63 - 1):
        out = run_latent("generate", "--model", str(model), "--ids", "1,2,3", "--max-tokens",
                         str(max_tokens), check=False)
        assert out.returncode != 0
        assert (f"prompt (3 tokens) + --max-tokens ({max_tokens}) exceeds the model's "
                f"max_position_embeddings ({positions})") in out.stderr, out.stderr
    # One that fits runs.
    ok = run_latent("generate", "--model", str(model), "--ids", "1,2,3", "--max-tokens", "2")
    assert ok.returncode == 0
