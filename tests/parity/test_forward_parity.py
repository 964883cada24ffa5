"""latent's logits and greedy tokens against transformers on tiny random models (f32), for every
architecture variant, in both MLA forms (absorbed and expanded). latent runs `--precision f32`
(the fp8 case's default would be bf16 compute; tests/parity/test_bf16.py bounds that one)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import latent_generate, latent_logits, load_reference

# (case id, preset, extra tool args, config overrides, prompt length)
CASES = [
    ("v2_lite_greedy", "deepseek_v2_lite", (), None, 24),
    ("v2_group_limited", "deepseek_v2", (), None, 24),
    # Prompt longer than original_max_position_embeddings (64) so YaRN's ramp matters.
    ("v3_noaux_yarn_interleave", "deepseek_v3", (), None, 100),
    ("v3_no_interleave", "deepseek_v3_no_interleave", (), None, 24),
    # Linear scaling, with mscale_all_dim: the softmax scale takes mscale^2 for any type but
    # default, as the families' yarn_apply_mscale does.
    ("v3_rope_linear", "deepseek_v3", (), {"rope_parameters": {
        "rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0, "mscale_all_dim": 0.707}}, 100),
    # Llama 3 scaling over 64 original positions: the 8 rotary dims' wavelengths (6.3, 63, 628,
    # 6283) fall below 64 / 4, between it and 64, and above 64: each branch.
    ("v3_rope_llama3", "deepseek_v3", (), {"rope_parameters": {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64, "rope_theta": 10000.0}}, 100),
    ("kimi_k2", "kimi_k2", (), None, 24),
    ("kimi_k2_no_interleave", "kimi_k2", (), {"rope_interleave": False}, 24),
    # The sigmoid router's top-k weights as scored (times routed_scaling_factor), not renormalised.
    ("v3_no_norm_topk", "deepseek_v3", (), {"norm_topk_prob": False}, 24),
    ("v3_fp8_blocks", "deepseek_v3", ("--fp8", "--fp8-block", "16", "--dtype", "float32"), None, 24),
]
FORMS = ["absorbed", "expanded"]
GENERATE_TOKENS = 32


def prompt(vocab: int, length: int, seed: int = 1) -> list[int]:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def cases(tiny_models, tmp_path_factory):
    scratch = tmp_path_factory.mktemp("reference")
    built = {}
    for case_id, preset, extra, config, length in CASES:
        model_dir = tiny_models.get(preset, *extra, config=config)
        reference = load_reference(model_dir, scratch)
        ids = prompt(reference.config.vocab_size, length)
        mask = torch.ones(1, len(ids), dtype=torch.long)
        with torch.no_grad():
            ref_logits = reference(torch.tensor([ids])).logits[0].float().numpy()
            # Stopping at EOS, as generation_config.json says.
            ref_stop = reference.generate(
                torch.tensor([ids]), do_sample=False, max_new_tokens=GENERATE_TOKENS,
                attention_mask=mask)[0, len(ids):].tolist()
            # All 32 tokens, EOS being just another token: random weights may pick it early.
            ref_tokens = reference.generate(
                torch.tensor([ids]), do_sample=False, max_new_tokens=GENERATE_TOKENS,
                attention_mask=mask, eos_token_id=None)[0, len(ids):].tolist()
        assert len(ref_tokens) == GENERATE_TOKENS
        built[case_id] = (model_dir, reference, ids, ref_logits, (ref_tokens, ref_stop))
    return built


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case_id", [c[0] for c in CASES])
def test_logits_match_transformers(cases, case_id, form):
    model_dir, _, ids, ref_logits, _ = cases[case_id]
    ours = latent_logits(model_dir, ids, form, precision="f32")
    assert ours.shape == ref_logits.shape
    # The test is only meaningful when logits are far from uniform.
    assert ref_logits.std(axis=-1).min() > 0.5, "tiny model gives near-uniform logits"
    err = np.abs(ours - ref_logits).max()
    assert err <= 1e-4 * np.abs(ref_logits).max(), f"max |dlogit| {err}"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case_id", [c[0] for c in CASES])
def test_greedy_continuation_matches_transformers(cases, case_id, form):
    model_dir, _, ids, _, (ref_tokens, ref_stop) = cases[case_id]
    assert latent_generate(model_dir, ids, GENERATE_TOKENS, form, ignore_eos=True,
                           precision="f32") == ref_tokens
    assert latent_generate(model_dir, ids, GENERATE_TOKENS, form, precision="f32") == ref_stop


@pytest.mark.parametrize("case_id", ["v2_lite_greedy", "v2_group_limited", "v3_noaux_yarn_interleave",
                                     "kimi_k2"])
def test_router_picks_the_same_experts(cases, case_id):
    model_dir, reference, ids, _, _ = cases[case_id]
    captured = {}

    def hook(layer):
        def fn(module, args, output):
            captured[layer] = np.sort(output[2].numpy(), axis=-1)
        return fn

    handles = [layer.mlp.gate.register_forward_hook(hook(i))
               for i, layer in enumerate(reference.model.layers) if hasattr(layer.mlp, "gate")]
    try:
        with torch.no_grad():
            reference(torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    _, experts = latent_logits(model_dir, ids, "auto", experts=True, precision="f32")
    assert captured, "no MoE layer in the reference"
    for layer, ref in captured.items():
        ours = np.asarray(experts[layer])
        np.testing.assert_array_equal(ours, ref, err_msg=f"layer {layer}")
        # Routing must really vary between tokens, or the comparison proves nothing.
        assert len({tuple(r) for r in ref}) > 1, f"layer {layer}: every token picks the same experts"
    for layer, choice in enumerate(experts):
        assert (choice is None) == (layer not in captured)


# fp8 checkpoints of the vision-language wrappers: save_pretrained writes quantization_config at
# the wrapper's top level, not in text_config, and transformers reads it there. The reference is
# transformers on the dequantized copy, as for v3_fp8_blocks; each wrapper loads through its own
# class (AutoModelForCausalLM maps none of them).
FP8_WRAPPERS = {"mistral4_vl": "Mistral3ForConditionalGeneration",
                "glm5_next": "Glm5NextForConditionalGeneration",
                "mistral_large4": "MistralLarge4ForConditionalGeneration"}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("preset", sorted(FP8_WRAPPERS))
def test_fp8_wrapper_logits_match_transformers(tiny_models, tmp_path, preset, form):
    from conftest import reference_dir
    from family_reference import assert_logits_match, load_reference

    model_dir = tiny_models.get(preset, "--fp8", "--fp8-block", "16", "--dtype", "float32")
    config = json.loads((model_dir / "config.json").read_text())
    assert config["quantization_config"]["weight_block_size"] == [16, 16]
    assert "quantization_config" not in config["text_config"]
    reference = load_reference(reference_dir(model_dir, tmp_path), FP8_WRAPPERS[preset])
    ids = prompt(reference.config.get_text_config().vocab_size, 24)
    with torch.no_grad():
        ref = reference(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    assert_logits_match(latent_logits(model_dir, ids, form, precision="f32"), ref)
