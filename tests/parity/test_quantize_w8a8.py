"""`--quantize w8a8`: int8's weights, plus each linear's input quantized per token to int8 and
integer dot products (AVX512-VNNI where the CPU has it, the scalar reference otherwise).

The strong test: transformers in f32 on the original checkpoint, with torch.nn.functional.linear
replaced during the forward by the same W8A8 math for every weight latent converts (weights
quantized per row as `--quantize int8` does; the input row: sx = max|x| / 127,
xq = round-half-even(x / sx) clamped to [-127, 127]; y = float(xq . q) * (sx * sw), the integer
dot exact in float64). kv_b_proj keeps f32 activations (int8 weights only), as latent does. Then:
w8a8 stays close to the unquantized model, `info --quantize w8a8` counts the bytes the load log
reports, and the engine's batches decode as each prompt alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import load_reference, run_latent
from test_quantize_int8 import (check_close_to_unquantized, int8_logits, load_log_bytes, prompt,
                                quantized_by_int8)

CASES = [
    ("v3_f32", "deepseek_v3", (), None),
    ("v2_lite_f32", "deepseek_v2_lite", (), None),
    ("v3_bf16", "deepseek_v3", ("--dtype", "bfloat16"), None),
    ("v3_fp8", "deepseek_v3", ("--fp8", "--fp8-block", "16", "--dtype", "float32"), None),
    ("v32_dsa", "deepseek_v32", (), None),
    ("v3_tied", "deepseek_v3", (), {"tie_word_embeddings": True}),
]


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row (last dim) symmetric int8 as latent's QuantizeRowInt8: (q as float64, f32 scale)."""
    w = w.float()
    scale = w.abs().amax(dim=-1, keepdim=True) / 127
    q = torch.where(scale > 0, torch.round(w / scale), torch.zeros_like(w)).clamp(-127, 127)
    return q.double(), scale.squeeze(-1)


def w8a8_linear(x: torch.Tensor, q: torch.Tensor, sw: torch.Tensor) -> torch.Tensor:
    sx = x.abs().amax(dim=-1, keepdim=True) / 127  # [..., 1] f32
    xq = torch.where(sx > 0, torch.round(x / sx), torch.zeros_like(x)).clamp(-127, 127)
    dot = torch.matmul(xq.double(), q.T)  # integers below 2^53: exact
    return dot.float() * (sx * sw)  # float(dot) * (sx * sw), as latent


class W8A8Reference:
    """A transformers model whose converted linears compute W8A8 while `forward` runs."""

    def __init__(self, model):
        self.model = model
        self.table = {}  # (data_ptr, shape) of a weight as F.linear sees it -> (q, sw)
        self.hits = set()
        for name, p in model.named_parameters():
            if not quantized_by_int8(name, p):
                continue
            q, sw = quantize_rows(p.data)
            if "kv_b_proj" in name:  # int8 weights, f32 activations (W8A16)
                p.data.copy_((q * sw.unsqueeze(-1).double()).float())
            elif p.dim() == 2:
                self.table[(p.data_ptr(), tuple(p.shape))] = (q, sw, name)
            else:  # fused experts [E, out, in]: the modeling code passes p[e]
                for e in range(p.shape[0]):
                    self.table[(p[e].data_ptr(), tuple(p.shape[1:]))] = (q[e], sw[e], f"{name}[{e}]")
        head = model.lm_head.weight  # with tied embeddings: the embedding, as latent's int8 copy
        q, sw = quantize_rows(head.data)
        self.table[(head.data_ptr(), tuple(head.shape))] = (q, sw, "lm_head.weight")

    def __call__(self, ids: list[int]) -> np.ndarray:
        original = torch.nn.functional.linear

        def linear(x, weight, bias=None):
            entry = self.table.get((weight.data_ptr(), tuple(weight.shape)))
            if entry is None:  # router, indexer, kv_b
                return original(x, weight, bias)
            self.hits.add(entry[2])
            y = w8a8_linear(x.float(), entry[0], entry[1])
            return y if bias is None else y + bias

        torch.nn.functional.linear = linear
        try:
            with torch.no_grad():
                return self.model(torch.tensor([ids])).logits[0].float().numpy()
        finally:
            torch.nn.functional.linear = original


def w8a8_logits(model_dir, ids, form="auto", experts=False):
    return int8_logits(model_dir, ids, form, experts, mode="w8a8")


@pytest.fixture(scope="module")
def cases(tiny_models, tmp_path_factory):
    scratch = tmp_path_factory.mktemp("w8a8-reference")
    built = {}
    for case_id, preset, extra, config in CASES:
        model_dir = tiny_models.get(preset, *extra, config=config)
        reference = W8A8Reference(load_reference(model_dir, scratch))
        ids = prompt(reference.model.config.vocab_size)
        ref_logits = reference(ids)
        # Every non-expert converted linear went through the W8A8 path.
        dense = {name for _, _, name in reference.table.values() if "[" not in name}
        assert dense <= reference.hits, sorted(dense - reference.hits)
        assert any("[" in name for name in reference.hits), "no routed expert ran W8A8"
        built[case_id] = (model_dir, ids, ref_logits)
    return built


def check_close(ours: np.ndarray, ref_logits: np.ndarray) -> None:
    assert ours.shape == ref_logits.shape
    assert ref_logits.std(axis=-1).min() > 0.5, "tiny model gives near-uniform logits"
    # Each linear computes the same numbers on both sides (bit-identical for identical inputs);
    # the inputs differ only by f32 rounding of the unquantized ops (norms, attention, SiLU,
    # routing weights), about 1e-7 relative. That is far below one activation quantum (1/127
    # of the row's max), so almost every xq is the same integer, and the logits agree to f32
    # rounding like the int8 test (1e-5 x max |logit|). The exception: an x / sx that lands
    # within ~1e-5 of a .5 tie rounds differently (a chance of ~1e-5 per element, a few per
    # thousand forwards of these 24 tokens); one flipped xq moves its token's logits by about
    # sx * sw * q / |logit| ~ 1e-3. So: every position within 1e-5 but for at most two, and
    # those within 1e-2. Measured: 1.8-4.5e-7 x max |logit| in every case, but for one position
    # of v3_tied (both forms) at 4.0e-3: one flipped rounding.
    scale = np.abs(ref_logits).max()
    err = np.abs(ours - ref_logits).max(axis=-1)
    assert err.max() <= 1e-2 * scale, f"max |dlogit| {err.max()}"
    assert (err > 1e-5 * scale).sum() <= 2, f"positions off by > 1e-5: {err / scale}"


@pytest.mark.parametrize("form", ["absorbed", "expanded"])
@pytest.mark.parametrize("case_id", [c[0] for c in CASES])
def test_w8a8_logits_match_simulated_w8a8_in_transformers(cases, case_id, form):
    model_dir, ids, ref_logits = cases[case_id]
    check_close(w8a8_logits(model_dir, ids, form), ref_logits)


@pytest.mark.parametrize("case_id", ["v3_f32", "v2_lite_f32"])
def test_w8a8_reference_kernels_match_too(cases, case_id, monkeypatch):
    """The scalar W8A8 path (any CPU without AVX512-VNNI) against the same simulation."""
    monkeypatch.setenv("LATENT_KERNELS", "ref")
    model_dir, ids, ref_logits = cases[case_id]
    check_close(w8a8_logits(model_dir, ids), ref_logits)


@pytest.mark.parametrize("case_id", ["v3_f32", "v2_lite_f32", "v3_bf16"])
def test_w8a8_stays_close_to_the_unquantized_model(cases, case_id):
    # Per-token int8 activations add rounding noise of max|x_row| / 254 per element on top of
    # int8's weight noise: roughly twice int8's KL on these tiny models (test_quantize_int8.py's
    # bounds: median 5e-3, max 0.05 where routing agrees); the bounds here are doubled.
    check_close_to_unquantized(cases[case_id][0], "w8a8", kl_median=1e-2, kl_max=0.1, top1_min=0.8)


@pytest.mark.parametrize("case_id", ["v3_f32", "v3_fp8", "v32_dsa", "v3_tied"])
def test_info_reports_the_bytes_the_load_log_gives(cases, case_id):
    """w8a8 holds int8's bytes plus one int32 row sum per converted row, but for kv_b_proj."""
    model_dir = cases[case_id][0]
    int8 = json.loads(run_latent("info", "--model", str(model_dir), "--json", "--quantize",
                                 "int8").stdout)["weights"]
    w8a8 = json.loads(run_latent("info", "--model", str(model_dir), "--json", "--quantize",
                                 "w8a8").stdout)["weights"]
    assert w8a8["quantize"] == "w8a8"
    from safetensors.torch import load_file
    config = json.loads((model_dir / "config.json").read_text())
    sums = 0
    for shard in sorted(model_dir.glob("*.safetensors")):
        for name, t in load_file(shard).items():
            if not name.endswith("_scale_inv") and quantized_by_int8(name, t) and "kv_b_proj" not in name:
                sums += 4 * (t.numel() // t.shape[-1])
    if config.get("tie_word_embeddings", False):
        sums += 4 * config["vocab_size"]
    assert w8a8["bytes"] == int8["bytes"] + sums
    proc = run_latent("logits", "--model", str(model_dir), "--ids", "1,2,3", "--quantize", "w8a8")
    assert load_log_bytes(proc.stderr) == w8a8["bytes"]
    assert "--quantize w8a8" in proc.stderr
