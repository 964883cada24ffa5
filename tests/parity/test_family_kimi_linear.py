"""Kimi Linear (kimi_linear) against transformers on a tiny random model (f32): logits in both MLA
forms at 1, 7, 64 and 300 tokens (300 spans four KDA chunks of 64 and a partial one), 32-token
greedy continuations, and `latent info` (parameter count, the MLA row and the KDA state rows per
layer, bytes per token and per sequence). The preset mixes four KDA layers with one NoPE MLA
layer, whose rotary part is cached and attended unrotated."""

from __future__ import annotations


from family_reference import (assert_hybrid_layers, info, info_text, kda_rows, parity_tests,
                              reference_case)

PRESET = "kimi_linear"
LENGTHS = [1, 7, 64, 300]
GENERATE_TOKENS = 32
GENERATE_PROMPT = 70  # past one KDA chunk: decoding continues a chunk the prompt started


case = reference_case(PRESET, "KimiLinearForCausalLM", LENGTHS, GENERATE_PROMPT, GENERATE_TOKENS)
test_logits_match_transformers, test_greedy_continuation_matches_transformers = parity_tests(LENGTHS)


def test_info_rows_and_state_per_layer(case):
    model_dir, reference, _, _ = case
    config = reference.config
    got = info(model_dir)
    assert got["num_parameters"] == reference.num_parameters()
    assert got["architecture"] == "kimi_linear" and got["model_type"] == "kimi_linear"
    assert got["unused_tensors"] == []
    c, r = config.kv_lora_rank, config.qk_rope_head_dim
    kda = kda_rows(config)
    assert config.layer_types == ["linear_attention", "linear_attention", "full_attention",
                                  "linear_attention", "linear_attention"]
    assert_hybrid_layers(got, config.layer_types, c + r, kda)
    assert got["cache_bytes_per_token"] == 4 * (c + r)
    # The state is f32 whatever the rows' dtype; each slot rounded up to 64 bytes.
    state = 4 * 4 * sum(v for _, v in kda)
    assert got["cache_bytes_per_sequence"] == (state + 63) // 64 * 64
    bf16 = info(model_dir, "--cache-dtype", "bf16")
    assert bf16["cache_bytes_per_token"] == 2 * (c + r)
    assert bf16["cache_bytes_per_sequence"] == got["cache_bytes_per_sequence"]
    text = info_text(model_dir)
    assert "layer 0: kda.state" in text and "bytes/sequence (state)" in text, text
    assert "layer 2: mla.latent" in text, text
