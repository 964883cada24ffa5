"""GLM-5-Next (glm5_next) against transformers on a tiny random model (f32): logits in both MLA
forms at 1, 7, 64 and 300 tokens, 32-token greedy continuations, and `latent info` (parameter
count, the MLA layers' NoPE latent and packed KPool indexer rows, the KDA state rows). The preset
holds three KDA layers, a DSA-MLA layer with its own KPool indexer and one reusing its selection,
4 mHC streams. With pools of 16 and index_topk 32 (two pools kept), 64 tokens already select
sparsely and 300 tokens (18 complete pools) do so for most positions: the selection is exercised
(test_kpool_selection_is_sparse checks it with latent's trace)."""

from __future__ import annotations

import torch

from family_reference import (as_index_topk_pattern, assert_state_row, assert_variant_matches,
                              info, info_text, kda_rows, parity_tests, reference_case,
                              rewrite_config)

PRESET = "glm5_next"
LENGTHS = [1, 7, 64, 300]
GENERATE_TOKENS = 32
GENERATE_PROMPT = 70  # past one KDA chunk and four pools: decoding continues both


case = reference_case(PRESET, "Glm5NextForConditionalGeneration", LENGTHS, GENERATE_PROMPT,
                      GENERATE_TOKENS)
test_logits_match_transformers, test_greedy_continuation_matches_transformers = parity_tests(LENGTHS)


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
    kda = kda_rows(config)
    expected = {0: kda, 1: kda, 2: kda, 3: [("mla.latent", c), ("dsa.kpool", 2 * di)],
                4: [("mla.latent", c)]}
    for l, layer in enumerate(got["cache_layers"]):
        rows = [(row["name"], row["values"]) for row in layer["rows"]]
        assert rows == expected[l], f"layer {l}"
        for row in layer["rows"]:
            if row["name"].startswith("kda."):
                assert_state_row(row)
            else:
                assert row["bytes_per_token"] == 4 * row["values"]
    assert got["cache_bytes_per_token"] == 4 * (2 * c + 2 * di)
    state = 3 * 4 * sum(v for _, v in kda)
    assert got["cache_bytes_per_sequence"] == (state + 63) // 64 * 64
    bf16 = info(model_dir, "--cache-dtype", "bf16")
    assert bf16["cache_bytes_per_token"] == 2 * (2 * c + 2 * di)
    text = info_text(model_dir)
    assert "layer 0: kda.state" in text and "bytes/sequence (state)" in text, text
    assert "layer 3: mla.latent" in text and "dsa.kpool" in text, text


def test_index_topk_pattern_places_the_shared_indexers(tiny_models, tmp_path):
    model_dir = rewrite_config(tiny_models.get(PRESET), tmp_path / "model", as_index_topk_pattern,
                               text_config=True)
    assert_variant_matches(model_dir, "Glm5NextForConditionalGeneration")
