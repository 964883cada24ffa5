"""Mistral Large 4 (mistral_large4) against transformers on a tiny random model (f32): logits in
both MLA forms at 1, 7, 64 and 300 tokens, 32-token greedy continuations, the DSA selections, and
`latent info` (parameter count, the rows each layer kind caches, bytes per token). The preset's
six layers hold every layer kind: rope and NoPE layers, KV-sharing layers that cache no latent,
full and shared indexer layers, and one layer that caches nothing at all; its checkpoint is
written by save_pretrained in Mistral's native names inside the vision-language wrapper."""

from __future__ import annotations

import numpy as np
import pytest

from family_reference import (as_index_topk_pattern, assert_info_fails, assert_selections_match,
                              assert_variant_matches, indexer_selections, info, info_text,
                              latent_selections, parity_tests, reference_case, rewrite_config)

PRESET = "mistral_large4"
LENGTHS = [1, 7, 64, 300]
GENERATE_TOKENS = 32
GENERATE_PROMPT = 20  # past index_topk (8): generated tokens attend to what the indexer selects


case = reference_case(PRESET, "MistralLarge4ForConditionalGeneration", LENGTHS, GENERATE_PROMPT,
                      GENERATE_TOKENS)
test_logits_match_transformers, test_greedy_continuation_matches_transformers = parity_tests(LENGTHS)


def test_softcap_bounds_the_logits(case):
    _, reference, logits, _ = case
    cap = reference.config.get_text_config().final_logit_softcapping
    _, ref = logits[64]
    # The cap bends the logits: without it they would reach past it.
    assert np.abs(ref).max() < cap and np.abs(ref).max() > 0.8 * cap



def test_info_rows_per_layer_kind(case):
    model_dir, reference, _, _ = case
    config = reference.config.get_text_config()
    got = info(model_dir)
    expected = reference.model.language_model.num_parameters() + reference.lm_head.weight.numel()
    assert expected < reference.num_parameters()  # the vision tower is not counted
    assert got["num_parameters"] == expected
    assert got["architecture"] == "mistral_large4"
    assert got["model_type"] == "mistral_large4_text"
    assert got["wrapper_model_type"] == "mistral_large4"
    assert got["unused_tensors"] == []
    c, r, i = config.kv_lora_rank, config.qk_rope_head_dim, config.index_head_dim
    # What each layer caches, from the preset's rope / KV-sharing / indexer pattern.
    want = [[("mla.latent", c + r), ("dsa.index_k", i)],  # rope owner, full indexer
            [("dsa.index_k", i)],                         # reads layer 0's latent, full indexer
            [("mla.latent", c + r), ("dsa.index_k", i)],
            [("mla.latent", c)],                          # NoPE owner, shared indexer
            [],                                           # reads layer 2's latent, shared indexer
            [("dsa.index_k", i)]]                         # NoPE, reads layer 3's latent
    assert len(got["cache_layers"]) == config.num_hidden_layers
    for l, layer in enumerate(got["cache_layers"]):
        assert [(row["name"], row["values"]) for row in layer["rows"]] == want[l], f"layer {l}"
        for row in layer["rows"]:
            assert row["bytes_per_token"] == 4 * row["values"]
        source = config.kv_source_layers[l]
        assert layer.get("kv_source_layer", l) == source
    total = sum(v for rows in want for _, v in rows)
    assert got["cache_bytes_per_token"] == 4 * total
    assert info(model_dir, "--cache-dtype", "bf16")["cache_bytes_per_token"] == 2 * total
    text = info_text(model_dir)
    assert "layer 4: no rows (attends to layer 2's mla.latent)" in text, text
    assert "mistral_large4 (model_type mistral_large4_text in a mistral_large4 checkpoint)" in text


def test_dsa_selection_matches_transformers(case):
    """The top-k of full indexer layers, and that shared layers (3, 4) reuse layer 2's."""
    model_dir, reference, logits, _ = case
    ids, _ = logits[64]
    captured = indexer_selections(reference, reference.model.language_model.layers, ids)
    selected = latent_selections(model_dir, ids)
    assert_selections_match(selected, captured, reference.config.get_text_config().index_topk, len(ids))
    assert selected[3] == selected[2] and selected[4] == selected[2]


@pytest.mark.parametrize("edit,message", [
    (lambda c: c.update(kv_source_layers=[0, 0, 2, 3, 0, 2]),
     "layer 4 (rope) names layer 0 as its KV source, but attends to the latest rope layer storing one before it (2)"),
    (lambda c: c.update(kv_source_layers=[0, 0, 2, 3, 2, 4]),
     "layer 5 must share KV with an earlier layer that owns its cache, got 4"),
    (lambda c: c.update(kv_source_layers=[0, 0, 2]), "'kv_source_layers' must have one entry per layer (6)"),
    (lambda c: c.update(no_rope_layers=[1, 1, 2, 0, 1, 0]), "'no_rope_layers' entry 2 must be 0 (NoPE) or 1 (rope)"),
    (lambda c: c.update(q_lora_rank=16), "mistral_large4 has no query LoRA"),
    (lambda c: c.update(indexer_types=["shared"] * 6), "layer 0 is a shared indexer layer"),
    (lambda c: c.update(final_logit_softcapping=0), "'final_logit_softcapping' must be positive"),
    # transformers' validate_layer_type refuses a list of another length.
    (lambda c: c.update(layer_types=["indexed_attention"] * 5),
     "'layer_types' must list one entry per layer (6), got 5 entries"),
    (lambda c: c.update(layer_types=["full_attention"] + ["indexed_attention"] * 5),
     "'layer_types' entry 0 is \"full_attention\", but every mistral_large4_text layer is "
     "\"indexed_attention\""),
], ids=["kv_source_not_latest", "kv_source_not_owner", "kv_source_length", "no_rope_value", "q_lora",
        "shared_first_indexer", "softcap_zero", "layer_types_length", "layer_types_entry"])
def test_bad_config_gets_a_clear_error(tiny_models, tmp_path, edit, message):
    assert_info_fails(rewrite_config(tiny_models.get(PRESET), tmp_path / "model", edit, text_config=True),
                      message)


def test_index_topk_pattern_places_the_shared_indexers(tiny_models, tmp_path):
    model_dir = rewrite_config(tiny_models.get(PRESET), tmp_path / "model", as_index_topk_pattern,
                               text_config=True)
    assert_variant_matches(model_dir, "MistralLarge4ForConditionalGeneration")
