"""`latent.LLM(..., cache_dtype="fp8")`: the Python engine stores fp8 rows (FlashMLA's layout:
the demo's 32 latent values in e4m3 with one f32 scale, its 16 rotary values in bf16: 68 bytes
per token per layer), reports them in metrics(), and its greedy tokens are the CLI's alone
reference with the same --cache-dtype. About 2 s."""

from __future__ import annotations

import json

import pytest

from conftest import BUILD_PYTHON, REPO, run_latent

try:
    import latent
except ImportError as e:
    raise RuntimeError(f"{BUILD_PYTHON}/latent is missing or broken ({e}): run `make build` with nanobind "
                       "in .venv (requirements-dev.txt)") from e

DEMO = REPO / "models" / "demo"


@pytest.mark.parametrize("cache_dtype,layer_bytes", [("fp8", 32 + 4 + 2 * 16), ("bf16", 2 * (32 + 16))])
def test_llm_cache_dtype(cache_dtype, layer_bytes):
    ids = [5, 6, 7, 8, 9]
    params = latent.SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    with latent.LLM(str(DEMO), cache_dtype=cache_dtype) as llm:
        got = llm.generate([ids], params)[0].outputs[0].token_ids
        m = llm.metrics()
    assert m["cache_dtype"] == cache_dtype
    assert m["cache_layer_bytes_per_token"] == layer_bytes
    assert m["cache_bytes_per_token"] == 4 * layer_bytes  # 4 layers
    cli = json.loads(run_latent("generate", "--model", str(DEMO), "--ids", ",".join(map(str, ids)),
                                "--max-tokens", "12", "--ignore-eos", "--cache-dtype",
                                cache_dtype).stdout)["ids"]
    assert got == cli
