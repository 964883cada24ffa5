"""AMX (the default on CPUs with AMX-BF16, or LATENT_GEMM=amx): bf16 compute's linears over bf16 weights run on
TDPBF16PS over weights repacked at load (kernels/amx/linear_amx.cc): the same bf16(x) . W^T with
f32 accumulation as the default vdpbf16ps kernel, in another fixed order. End to end on bf16
checkpoints: the AMX path really runs (`latent info` names it, and the logits differ from the
AVX-512 kernels' under LATENT_GEMM=avx512), its logits stay within transformers-bf16's own error of the exact answer (the bound
test_bf16.py puts on the default), and the engine's batch invariance holds (test_bf16.py's
batched-equals-alone check, run under AMX, on bf16 and on fp8-block checkpoints). Skipped where
the CPU has no AMX.

The same checks run for the vdpbf16ps kernel over the same tile-packed weights
(LATENT_GEMM=avx512-packed, kernels/avx512/linear_bf16_packed.cc), skipped without AVX512_BF16,
and for the AVX2 FMA kernel over them (LATENT_GEMM=avx2-packed, kernels/avx2/
linear_bf16_packed_avx2.cc; the default without AVX-512, and chosen by that value on any CPU with
AVX2), against the row-major AVX2 kernel (LATENT_GEMM=avx2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import test_bf16
from conftest import latent_logits, run_latent


# LATENT_GEMM value -> the kernels name `latent info` reports when that GEMM really runs.
PACKED_GEMMS = {"amx": "avx512-amx", "avx512-packed": "avx512-packed", "avx2-packed": "avx2-packed"}
# LATENT_GEMM value -> the same family's kernel over the weights as stored (no packed copy).
UNPACKED_GEMM = {"amx": "avx512", "avx512-packed": "avx512", "avx2-packed": "avx2"}


@pytest.fixture(params=sorted(PACKED_GEMMS))
def amx(request, monkeypatch, tiny_models):
    """Sets LATENT_GEMM to a packed-weight GEMM for the latent runs of a test; skips where this CPU lacks it."""
    monkeypatch.setenv("LATENT_GEMM", request.param)
    model_dir = tiny_models.get("deepseek_v3", "--dtype", "bfloat16")
    info = json.loads(run_latent("info", "--model", str(model_dir), "--json").stdout)
    if info["precision"]["kernels"] != PACKED_GEMMS[request.param]:
        pytest.skip(f"no {request.param} on this CPU (kernels: {info['precision']['kernels']})")
    monkeypatch.gemm = request.param
    return monkeypatch


def test_amx_logits_within_transformers_bf16_error(tiny_models, tmp_path, amx):
    model_dir = tiny_models.get("deepseek_v3", "--dtype", "bfloat16")
    ids, ref_exact, ref_bf16, _ = test_bf16.references(model_dir, tmp_path, 40, 5)
    hf_bf16_error = np.abs(ref_bf16 - ref_exact).max()
    scale = np.abs(ref_exact).max()
    for form in ("absorbed", "expanded"):
        ours = latent_logits(model_dir, ids, form)
        amx.setenv("LATENT_GEMM", UNPACKED_GEMM[amx.gemm])
        default = latent_logits(model_dir, ids, form)
        amx.setenv("LATENT_GEMM", amx.gemm)
        assert not np.array_equal(ours, default), f"LATENT_GEMM={amx.gemm} changed nothing"
        error = np.abs(ours - ref_exact).max()
        print(f"{form}: |{amx.gemm} - exact| {error:.3g}, |{UNPACKED_GEMM[amx.gemm]} - exact| "
              f"{np.abs(default - ref_exact).max():.3g}, |transformers bf16 - exact| "
              f"{hf_bf16_error:.3g}")
        assert error <= hf_bf16_error
        assert np.abs(ours - ref_bf16).max() <= 1.5 * hf_bf16_error + 1e-3 * scale


@pytest.mark.parametrize("case_id", list(test_bf16.INVARIANCE_CASES))
def test_amx_keeps_batch_invariance(tiny_models, tmp_path, amx, case_id):
    """test_bf16's batched-equals-alone check under each packed GEMM, on the bf16 DSA model and
    on fp8 blocks (whose packed kernel both tables carry)."""
    test_bf16.test_default_bf16_compute_is_batch_invariant(tiny_models, tmp_path, case_id)
