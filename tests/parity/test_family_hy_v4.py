"""Hy4 (hy_v4) against transformers on a tiny random model (f32): logits in both MLA forms at 1,
7, 64 and 300 tokens, 32-token greedy continuations, the DSA selections (full layers 0 and 1,
shared layers 2 and 3 reusing layer 1's), and `latent info` (parameter count, rows per layer,
bytes per token). The preset exercises every Hy4 feature: 3 hyper-connection streams, a learned
sink per head, the per-channel output gate, rotate-half YaRN, the indexer's rope on its last
dims, the SwiGLU clamp of the routed experts and the f32 lm_head. Checks that each feature
matters on this model (a sink, a stream gate, the clamp changed, the logits move) keep the
parity from passing by a feature being inert."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from family_reference import (assert_info_fails, assert_selections_match, indexer_selections, info,
                              info_text, latent_selections, parity_tests, reference_case,
                              rewrite_config)

PRESET = "hy_v4"
LENGTHS = [1, 7, 64, 300]
GENERATE_TOKENS = 32
GENERATE_PROMPT = 20  # past index_topk (8): generated tokens attend to what the indexer selects


case = reference_case(PRESET, "AutoModelForCausalLM", LENGTHS, GENERATE_PROMPT, GENERATE_TOKENS)
test_logits_match_transformers, test_greedy_continuation_matches_transformers = parity_tests(LENGTHS)


def reference_logits_with(reference, ids, edit):
    """The reference's logits for `ids` after `edit(reference)` changed some parameters in place
    (restored afterwards)."""
    saved = {k: v.clone() for k, v in reference.state_dict().items()}
    try:
        with torch.no_grad():
            edit(reference)
            return reference(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    finally:
        reference.load_state_dict(saved)


@pytest.mark.parametrize("feature", ["sinks", "output_gate", "hyper_connections", "swiglu_clamp"])
def test_each_feature_changes_the_logits(case, feature):
    """Each Hy4 feature is live on the tiny model: neutralising it moves the logits by far more
    than the parity tolerance, so the parity above checks it."""
    _, reference, logits, _ = case
    ids, ref = logits[64]
    layers = reference.model.layers

    def edit(model):
        for layer in layers:
            if feature == "sinks":
                layer.self_attn.sinks.fill_(-1e9)  # exp(sink - max) = 0: no sink
            elif feature == "output_gate":
                layer.self_attn.gate_proj.weight.zero_()  # sigmoid(0) = 1/2 everywhere
            elif feature == "hyper_connections":
                layer.attn_hc.scale.zero_()  # the same gates for every token
                layer.ffn_hc.scale.zero_()
            elif feature == "swiglu_clamp" and hasattr(layer.mlp, "experts"):
                layer.mlp.experts.swiglu_limit = 1e9
        if feature == "output_gate":
            for layer in layers:  # sigmoid(0) * 2 = 1: the same output as without the gate
                layer.self_attn.o_proj.weight.mul_(2.0)

    try:
        changed = reference_logits_with(reference, ids, edit)
    finally:
        for layer in layers:
            if hasattr(layer.mlp, "experts"):
                layer.mlp.experts.swiglu_limit = reference.config.swiglu_limit
    assert np.abs(changed - ref).max() > 1e-2 * np.abs(ref).max(), feature



def test_info_rows_per_layer(case):
    model_dir, reference, _, _ = case
    config = reference.config
    got = info(model_dir)
    assert got["num_parameters"] == reference.num_parameters()
    assert got["architecture"] == "hy_v4"
    assert got["model_type"] == "hy_v4"
    assert got["unused_tensors"] == []
    c, r, i = config.kv_lora_rank, config.qk_rope_head_dim, config.index_head_dim
    # Every layer caches its latent; the full indexer layers (0, 1) also their index keys.
    want = [[("mla.latent", c + r), ("dsa.index_k", i)],
            [("mla.latent", c + r), ("dsa.index_k", i)],
            [("mla.latent", c + r)],
            [("mla.latent", c + r)]]
    assert config.indexer_types == ["full", "full", "shared", "shared"]
    assert len(got["cache_layers"]) == config.num_hidden_layers
    for l, layer in enumerate(got["cache_layers"]):
        assert [(row["name"], row["values"]) for row in layer["rows"]] == want[l], f"layer {l}"
        for row in layer["rows"]:
            assert row["bytes_per_token"] == 4 * row["values"]
    total = sum(v for rows in want for _, v in rows)
    assert got["cache_bytes_per_token"] == 4 * total
    assert info(model_dir, "--cache-dtype", "bf16")["cache_bytes_per_token"] == 2 * total
    text = info_text(model_dir)
    assert "layer 2: mla.latent" in text, text


def test_dsa_selection_matches_transformers(case):
    """The top-k of the full indexer layers (rope on the last dims of each head), and that the
    shared layers (2, 3) reuse layer 1's."""
    model_dir, reference, logits, _ = case
    ids, _ = logits[64]
    captured = indexer_selections(reference, reference.model.layers, ids)
    assert sorted(captured) == [0, 1]
    selected = latent_selections(model_dir, ids)
    assert_selections_match(selected, captured, reference.config.index_topk, len(ids))
    assert selected[2] == selected[1] and selected[3] == selected[1]


@pytest.mark.parametrize("edit,message", [
    (lambda c: c.update(indexer_types=["shared"] * 4), "layer 0 is a shared indexer layer"),
    (lambda c: c.update(hc_mult=0), "'hc_mult' must be positive"),
    (lambda c: c.update(layer_types=["sliding_attention"] * 4),
     "but every hy_v4 layer is \"indexed_attention\""),
    (lambda c: c.update(hc_mult=4),
     "tensor 'model.layers.0.hc_pre.hc_attn_layer.hc_fn' has shape [6, 180] but config.json implies [8, 240]"),
    # transformers' docstring says these disable the clamp; its experts clamp at them anyway.
    (lambda c: c.update(swiglu_limit=0), "'swiglu_limit' must be positive, got 0 (transformers'"),
    (lambda c: c.update(swiglu_limit=-1.5), "'swiglu_limit' must be positive, got -1.5"),
], ids=["shared_first_indexer", "hc_mult_zero", "layer_types", "hc_mult_mismatch",
        "swiglu_limit_zero", "swiglu_limit_negative"])
def test_bad_config_gets_a_clear_error(tiny_models, tmp_path, edit, message):
    assert_info_fails(rewrite_config(tiny_models.get(PRESET), tmp_path / "model", edit), message)
