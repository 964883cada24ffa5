"""Families whose transformers classes never read mlp_layer_types: DeepseekV2/V3 and Mistral4
decoder layers pick MoE from first_k_dense_replace, LongcatFlash has its MoE in every layer,
MiniCPM3 and Youtu a dense MLP in every layer. A config.json that states a contradicting list
(as a converted or hand-edited checkpoint may) must run as transformers runs it."""

from __future__ import annotations

import pytest

from family_reference import assert_variant_matches, info, rewrite_config

# preset -> transformers' class for it.
PRESETS = {
    "deepseek_v2": "AutoModelForCausalLM",
    "deepseek_v3": "AutoModelForCausalLM",
    "mistral4": "Mistral4ForCausalLM",
    "longcat_flash": "LongcatFlashForCausalLM",
    "minicpm3": "AutoModelForCausalLM",
    "youtu": "AutoModelForCausalLM",
}


@pytest.mark.parametrize("preset", PRESETS)
def test_contradicting_mlp_layer_types_is_ignored(tiny_models, tmp_path, preset):
    """Every layer's kind flipped in mlp_layer_types, one entry per transformers layer (LongCat
    Flash counts two per latent layer): transformers ignores the list, so latent's logits must
    still match, and info must report the layer kinds of the unedited model."""
    model_dir = tiny_models.get(preset)
    kinds = info(model_dir)["config"]["mlp_layer_types"]

    def contradict(config):
        assert "mlp_layer_types" not in config
        layers = config["num_hidden_layers"]
        config["mlp_layer_types"] = ["dense" if kinds[l * len(kinds) // layers] == "sparse"
                                     else "sparse" for l in range(layers)]

    edited = rewrite_config(model_dir, tmp_path / "model", contradict)
    assert info(edited)["config"]["mlp_layer_types"] == kinds
    assert_variant_matches(edited, PRESETS[preset])
