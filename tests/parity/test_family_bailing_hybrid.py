"""Ling 3 (bailing_hybrid) against transformers on a tiny random model (f32): logits in both MLA
forms at 1, 7, 64 and 300 tokens (300 spans four KDA chunks of 64 and a partial one), 32-token
greedy continuations, and `latent info` (parameter count, the MLA row and the KDA state rows per
layer, bytes per token and per sequence). The preset mixes four KDA layers (full-rank safe forget
gate, full-rank output gate) with two MLA layers carrying a per-head sigmoid output gate, full
attention at (l + 1) % 3 == 0; the checkpoint holds the hub's tensor names (save_pretrained's)."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import latent_logits
from family_reference import (assert_hybrid_layers, assert_logits_match, info, info_text, kda_rows,
                              load_reference, parity_tests, reference_case,
                              reference_logits_and_greedy)

PRESET = "bailing_hybrid"
LENGTHS = [1, 7, 64, 300]
FORMS = ["absorbed", "expanded"]
REFERENCE = "BailingHybridForCausalLM"
GENERATE_TOKENS = 32
GENERATE_PROMPT = 70  # past one KDA chunk: decoding continues a chunk the prompt started


case = reference_case(PRESET, REFERENCE, LENGTHS, GENERATE_PROMPT, GENERATE_TOKENS)
test_logits_match_transformers, test_greedy_continuation_matches_transformers = parity_tests(LENGTHS)


def test_checkpoint_has_the_hub_names_and_gates_that_matter(case):
    """The tensors latent reads are the hub's (what transformers' conversion mapping renames at
    load), and the preset's safe forget gate spans its range: decays near 1 and near exp(-5)."""
    model_dir, reference, _, _ = case
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    assert "model.word_embeddings.weight" in names
    assert {"model.layers.0.attention.f_proj.weight", "model.layers.0.attention.g_proj.weight",
            "model.layers.0.attention.q_conv1d.weight", "model.layers.0.attention.dense.weight",
            "model.layers.2.attention.g_proj.weight", "model.layers.2.attention.dense.weight",
            "model.layers.2.mlp.gate.expert_bias", "model.layers.2.mlp.experts.7.down_proj.weight"} <= names
    gate = reference.model.layers[0].self_attn.forget_gate
    x = torch.randn(1, 200, reference.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        g = gate(reference.model.layers[0].input_layernorm(x))
    assert g.max() > -0.05 and g.min() < -4.0, (g.min(), g.max())



def test_info_rows_and_state_per_layer(case):
    model_dir, reference, _, _ = case
    config = reference.config
    got = info(model_dir)
    assert got["num_parameters"] == reference.num_parameters()
    assert got["architecture"] == "bailing_hybrid" and got["model_type"] == "bailing_hybrid"
    assert got["unused_tensors"] == []
    c, r = config.kv_lora_rank, config.qk_rope_head_dim
    assert config.linear_head_dim != r, \
        "the preset's KDA head must differ from the rope dim (head_dim's two meanings)"
    kda = kda_rows(config)
    assert config.layer_types == ["linear_attention", "linear_attention", "full_attention"] * 2
    assert_hybrid_layers(got, config.layer_types, c + r, kda)
    assert got["cache_bytes_per_token"] == 2 * 4 * (c + r)
    # The state is f32 whatever the rows' dtype; each row starts 64-byte aligned in the slot (the
    # conv row, 3 * 4 * 10 * 3 floats, is not a multiple of 64 bytes) and the slot is rounded up.
    state = 0
    for _ in range(4):
        for _, values in kda:
            state = (state + 63) // 64 * 64 + 4 * values
    assert got["cache_bytes_per_sequence"] == (state + 63) // 64 * 64
    bf16 = info(model_dir, "--cache-dtype", "bf16")
    assert bf16["cache_bytes_per_token"] == 2 * 2 * (c + r)
    assert bf16["cache_bytes_per_sequence"] == got["cache_bytes_per_sequence"]
    text = info_text(model_dir)
    assert "bailing_hybrid (model_type bailing_hybrid)" in text, text
    assert "layer 0: kda.state" in text and "bytes/sequence (state)" in text, text
    assert "layer 2: mla.latent" in text and "layer 5: mla.latent" in text, text


# The other forms the class allows: a query LoRA (q_a_proj, q_a_layernorm, q_b_proj under
# attention.), Kimi's unbounded softplus forget gate (kda_safe_gate false), and a layer pattern
# from layer_group_size 2 (full attention at layers 1, 3, 5).
VARIANT = {"q_lora_rank": 18, "kda_safe_gate": False, "layer_group_size": 2}


@pytest.mark.parametrize("form", FORMS)
def test_variant_logits_match_transformers(tiny_models, form):
    model_dir = tiny_models.get(PRESET, config=VARIANT)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["q_lora_rank"] == 18 and config["kda_safe_gate"] is False
    assert config["layer_types"] == ["linear_attention", "full_attention"] * 3
    reference = load_reference(model_dir, REFERENCE)
    logits, _ = reference_logits_and_greedy(reference, [70], 5, 1)
    ids, ref = logits[70]
    assert_logits_match(latent_logits(model_dir, ids, form), ref)
