"""GLM-5-Next (glm5_next) against transformers on a tiny random model (f32): logits in both MLA
forms at 1, 7, 64 and 300 tokens, 32-token greedy continuations, and `latent info` (parameter
count, the MLA layers' NoPE latent and packed KPool indexer rows, the KDA state rows). The preset
holds three KDA layers, a DSA-MLA layer with its own KPool indexer and one reusing its selection,
4 mHC streams. With pools of 16 and index_topk 32 (two pools kept), 64 tokens already select
sparsely and 300 tokens (18 complete pools) do so for most positions: the selection is exercised
(test_kpool_selection_is_sparse checks it with latent's trace)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from family_reference import reference_logits_and_greedy
from conftest import latent_generate, latent_logits, run_latent

PRESET = "glm5_next"
LENGTHS = [1, 7, 64, 300]
FORMS = ["absorbed", "expanded"]
GENERATE_TOKENS = 32
GENERATE_PROMPT = 70  # past one KDA chunk and four pools: decoding continues both


def load_reference(model_dir):
    from transformers import Glm5NextForConditionalGeneration

    model = Glm5NextForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    return model.eval()


@pytest.fixture(scope="module")
def case(tiny_models):
    model_dir = tiny_models.get(PRESET)
    reference = load_reference(model_dir)
    logits, (ids, tokens) = reference_logits_and_greedy(reference, LENGTHS, GENERATE_PROMPT,
                                                        GENERATE_TOKENS)
    return model_dir, reference, logits, (ids, tokens)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("length", LENGTHS)
def test_logits_match_transformers(case, length, form):
    model_dir, _, logits, _ = case
    ids, ref = logits[length]
    ours = latent_logits(model_dir, ids, form)
    assert ours.shape == ref.shape
    assert ref.std(axis=-1).min() > 0.5, "tiny model gives near-uniform logits"
    err = np.abs(ours - ref).max()
    assert err <= 1e-4 * np.abs(ref).max(), f"max |dlogit| {err}"


@pytest.mark.parametrize("form", FORMS)
def test_greedy_continuation_matches_transformers(case, form):
    model_dir, _, _, (ids, tokens) = case
    assert latent_generate(model_dir, ids, GENERATE_TOKENS, form, ignore_eos=True) == tokens


def test_kpool_selection_is_sparse(case):
    """The reference's own indexer, on the 300-token prompt: most positions keep 2 of their
    complete pools plus the tail, so parity at 300 tokens depends on the pools chosen."""
    _, reference, logits, _ = case
    ids, _ = logits[300]
    indexer = reference.model.language_model.layers[3].self_attn.indexer
    captured = {}
    hook = indexer.register_forward_hook(lambda m, a, out: captured.setdefault("topk", out))
    try:
        with torch.no_grad():
            reference(input_ids=torch.tensor([ids]))
    finally:
        hook.remove()
    topk = captured["topk"][0]  # [S, 2 * topk - 1 + ...] token indices, -1 for none
    sparse = 0
    for position in range(300):
        chosen = sorted(int(i) for i in topk[position] if i >= 0)
        if len(chosen) < position + 1:
            sparse += 1
            assert len(chosen) == 32 + (position + 1) % 16
    assert sparse >= 200, sparse


def info(model_dir, *extra):
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


def test_info_rows_and_state_per_layer(case):
    model_dir, reference, _, _ = case
    config = reference.config.text_config
    got = info(model_dir)
    assert got["num_parameters"] == reference.model.language_model.num_parameters() + \
        reference.lm_head.weight.numel()
    assert got["architecture"] == "glm5_next" and got["model_type"] == "glm5_next_text"
    assert got["wrapper_model_type"] == "glm5_next"
    assert got["unused_tensors"] == []
    c, di = config.kv_lora_rank, config.index_head_dim
    h, d, k = config.linear_num_heads, config.linear_head_dim, config.linear_conv_kernel_dim
    kda = [("kda.conv", (k - 1) * 3 * h * d), ("kda.state", h * d * d),
           ("kda.block", 64 * h * (4 * d + 1 + 64))]
    expected = {0: kda, 1: kda, 2: kda, 3: [("mla.latent", c), ("dsa.kpool", 2 * di)],
                4: [("mla.latent", c)]}
    for l, layer in enumerate(got["cache_layers"]):
        rows = [(row["name"], row["values"]) for row in layer["rows"]]
        assert rows == expected[l], f"layer {l}"
        for row in layer["rows"]:
            if row["name"].startswith("kda."):
                assert row["retention"] == "sequence" and row["bytes_per_token"] == 0
                assert row["bytes_per_sequence"] == 4 * row["values"]
            else:
                assert row["bytes_per_token"] == 4 * row["values"]
    assert got["cache_bytes_per_token"] == 4 * (2 * c + 2 * di)
    state = 3 * 4 * sum(v for _, v in kda)
    assert got["cache_bytes_per_sequence"] == (state + 63) // 64 * 64
    bf16 = info(model_dir, "--cache-dtype", "bf16")
    assert bf16["cache_bytes_per_token"] == 2 * (2 * c + 2 * di)
    text = run_latent("info", "--model", str(model_dir)).stdout
    assert "layer 0: kda.state" in text and "bytes/sequence (state)" in text, text
    assert "layer 3: mla.latent" in text and "dsa.kpool" in text, text
