"""LATENT_GEMM=onednn (opt-in): linears over bf16 weights with at least 32 rows go through oneDNN's
bf16 matmul, which rounds the activations to bf16 and sums in its own order. On a bf16 checkpoint
its logits must stay within the error transformers itself makes in bf16, measured in the same run
as in test_bf16.py: no further from the exact answer (transformers in f32 on the same weights)
than 1.5x transformers-bf16's own distance from it, plus 1e-3 x max|logit|; and as close to
latent's default f32 path. The prompt (80 tokens) puts every attention projection, the dense and
shared MLPs and lm_head over the 32-row threshold."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from conftest import latent_logits, load_reference, run_latent


def onednn_kernels_in_use(model_dir) -> bool:
    """Whether LATENT_GEMM=onednn selects the oneDNN table here: it exists only on CPUs with
    AVX-512 (and not under LATENT_KERNELS=ref), as the kernel tests' REQUIRE_ONEDNN says."""
    proc = run_latent("bench", "--model", str(model_dir), "--pp", "8", "--tg", "1", "--batch", "1",
                      "--json")
    kernels = re.search(r'"kernels":"([^"]*)"', proc.stdout)
    assert kernels is not None, proc.stdout
    return "onednn" in kernels.group(1)


def test_onednn_gemm_within_transformers_bf16_error(tiny_models, tmp_path, monkeypatch):
    model_dir = tiny_models.get("deepseek_v3", "--dtype", "bfloat16")
    monkeypatch.setenv("LATENT_GEMM", "onednn")
    if not onednn_kernels_in_use(model_dir):
        pytest.skip("no oneDNN kernel table on this CPU (it needs AVX-512)")
    exact = load_reference(model_dir, tmp_path, dtype=torch.float32)
    bf16 = load_reference(model_dir, tmp_path, dtype=torch.bfloat16)
    ids = torch.randint(2, exact.config.vocab_size, (80,),
                        generator=torch.Generator().manual_seed(4)).tolist()
    with torch.no_grad():
        ref_exact = exact(torch.tensor([ids])).logits[0].float().numpy()
        ref_bf16 = bf16(torch.tensor([ids])).logits[0].float().numpy()
    scale = np.abs(ref_exact).max()
    bound = 1.5 * np.abs(ref_bf16 - ref_exact).max() + 1e-3 * scale

    # Both under --precision f32: the f32 path, and oneDNN's rounding alone.
    monkeypatch.delenv("LATENT_GEMM", raising=False)
    default = latent_logits(model_dir, ids, precision="f32")
    monkeypatch.setenv("LATENT_GEMM", "onednn")
    ours = latent_logits(model_dir, ids, precision="f32")

    # The oneDNN path really ran (its verbose log, on stdout, names the matmul) and changed the
    # numbers.
    monkeypatch.setenv("ONEDNN_VERBOSE", "1")
    proc = run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
                      "--precision", "f32")
    assert "onednn_verbose,exec,cpu,matmul" in proc.stdout
    assert not np.array_equal(ours, default)

    assert np.abs(ours - ref_exact).max() <= bound
    assert np.abs(ours - default).max() <= bound
    assert np.abs(default - ref_exact).max() <= 1e-4 * scale  # the default path is untouched
