"""What latent reads where config.json omits a field, against transformers: for one tiny config
per model_type (the presets of tools/make_tiny_model.py, as transformers' configuration class
saves them), each field with a family default (model/arch ArchDefaults: rms_norm_eps, the router's
settings, the layer kinds, the context, the token ids) is deleted in turn, and the value
`latent info --json` says the model runs with ("config") must equal the one transformers'
class resolves. Config only (no weights, no forward pass): a few seconds for every family."""

from __future__ import annotations

import dataclasses
import json

import make_tiny_model as mtm  # tools/, on the path through conftest
import pytest

from conftest import run_latent

# One preset per model_type latent reads (kimi_k2 and deepseek_v3 share transformers' class).
PRESETS = ["deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "axk1",
           "mistral4", "longcat_flash", "axk2", "mistral_large4", "dots3_note", "kimi_linear",
           "glm5_next", "bailing_hybrid", "youtu", "glm4_moe_lite", "minicpm3", "hy_v4"]

# A field latent reports (info's "config") and the keys config.json may state it under
# (transformers' name first, then the aliases latent also reads); all of them are deleted.
FIELDS = {
    "rms_norm_eps": ["rms_norm_eps"],
    "max_position_embeddings": ["max_position_embeddings", "model_max_length"],
    "routed_scaling_factor": ["routed_scaling_factor"],
    "norm_topk_prob": ["norm_topk_prob", "moe_renormalize"],
    "n_shared_experts": ["n_shared_experts", "num_shared_experts"],
    "bos_token_id": ["bos_token_id"],
    "eos_token_id": ["eos_token_id"],
    # The router's groups (no groups, where the class defaults to none, route as one group).
    "n_group": ["n_group"],
    "topk_group": ["topk_group"],
    # The layer kinds from the class's own derivation, and from first_k_dense_replace's default.
    "mlp_layer_types": ["mlp_layer_types"],
    "first_k_dense_replace": ["first_k_dense_replace", "mlp_layer_types"],
}
# Past every family's default token ids, so that they name tokens (latent checks they do).
VOCAB = 200_000


def saved_config(preset_name: str):
    """(config.json as transformers saves the preset's config, the configuration class)."""
    preset = mtm.PRESETS[preset_name]
    config = mtm.build_config(preset["arch"], mtm.assemble_config_kwargs(preset, {}, None))
    saved = config.to_dict()
    if preset.get("saved_model_type"):
        saved["model_type"] = preset["saved_model_type"]
    if preset["arch"] == "longcat_flash":
        saved["num_hidden_layers"] = config.num_hidden_layers  # as make_tiny_model states it
    saved["vocab_size"] = VOCAB
    return saved, type(config)


def reference_value(config, field: str):
    """What transformers' resolved `config` runs with for `field`, in info's form; None where
    the class declares no such field. Only the class's own fields count: transformers keeps any
    other config.json key as an attribute its model never reads."""
    fields = {f.name for f in dataclasses.fields(config)}
    if field in ("mlp_layer_types", "first_k_dense_replace"):
        if "mlp_layer_types" in fields and config.mlp_layer_types is not None:
            return list(config.mlp_layer_types)
        if "first_k_dense_replace" not in fields or config.first_k_dense_replace is None:
            return None
        # DeepseekV2/V3 and Mistral4 decoder layers: MoE from first_k_dense_replace on.
        return ["sparse" if l >= config.first_k_dense_replace else "dense"
                for l in range(config.num_hidden_layers)]
    if field not in fields:
        return None
    value = getattr(config, field)
    if field == "eos_token_id":
        return [] if value is None else value if isinstance(value, list) else [value]
    if field in ("n_group", "topk_group") and value is None:
        return "none"  # no groups (axk2), or none given (deepseek_v2's grouped router fails)
    return value


@pytest.mark.parametrize("preset", PRESETS)
def test_omitted_fields_resolve_as_in_transformers(preset, tmp_path):
    saved, config_class = saved_config(preset)
    compared, wrong = [], []
    for field, keys in FIELDS.items():
        if not any(k in saved for k in keys):
            continue
        edited = {k: v for k, v in saved.items() if k not in keys}
        model_dir = tmp_path / field
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(edited))
        try:
            resolved = config_class.from_pretrained(model_dir)
        except Exception as e:  # transformers refuses the config without it: so must latent
            proc = run_latent("info", "--model", str(model_dir), check=False)
            compared.append(field)
            if proc.returncode != 2:
                wrong.append(f"{field}: latent reads it, transformers refuses ({e})")
            continue
        want = reference_value(resolved, field)
        if want is None:
            continue
        proc = run_latent("info", "--model", str(model_dir), "--json", check=False)
        if want == "none":
            # One group of every expert (axk2's routing without groups), or a clear refusal.
            want = 1
            if proc.returncode == 2 and f"needs '{field}'" in proc.stderr:
                compared.append(field)
                continue
        if proc.returncode == 2 and field in ("n_group", "topk_group"):
            # The class's default groups may not fit the preset's few experts: latent refuses
            # them, naming the value it resolved, which must be transformers' one.
            compared.append(field)
            if f"{field} ({want})" not in proc.stderr:
                wrong.append(f"{field}: transformers {want}, latent: {proc.stderr.strip()}")
            continue
        got = json.loads(proc.stdout) if proc.returncode == 0 else None
        if got is None:
            wrong.append(f"{field}: latent refuses ({proc.stderr.strip()})")
            continue
        name = "mlp_layer_types" if field == "first_k_dense_replace" else field
        compared.append(field)
        if isinstance(want, float):
            want = pytest.approx(want, rel=1e-12)
        if got["config"][name] != want:
            wrong.append(f"{field}: latent {got['config'][name]}, transformers {want}")
    assert "rms_norm_eps" in compared
    assert not wrong, f"{preset} without: " + "; ".join(wrong)


def transformers_layer_kinds(config) -> list[str]:
    """Each decoder layer of the model transformers builds from `config` (on the meta device: no
    weights), "sparse" where its MLP holds experts, as latent info's mlp_layer_types says."""
    import torch
    import transformers

    with torch.device("meta"):
        try:
            model = transformers.AutoModelForCausalLM.from_config(config)
        except ValueError:  # a text config without a causal-LM mapping: its base model
            model = transformers.AutoModel.from_config(config)
    layers = model.model.layers if hasattr(model, "model") else model.layers
    return ["sparse" if hasattr(layer.mlp, "experts") else "dense" for layer in layers]


@pytest.mark.parametrize("preset", PRESETS)
def test_moe_layer_freq_is_read_as_in_transformers(preset, tmp_path):
    """moe_layer_freq 2 without mlp_layer_types: AXK1's, AXK2's and Dots3 Note's classes make
    every other layer from first_k_dense_replace on MoE, every other class ignores the field.
    latent refused it (any value but 1) for every family but those three."""
    saved, config_class = saved_config(preset)
    edited = {k: v for k, v in saved.items() if k != "mlp_layer_types"}
    edited["moe_layer_freq"] = 2
    (tmp_path / "config.json").write_text(json.dumps(edited))
    want = transformers_layer_kinds(config_class.from_pretrained(tmp_path))
    proc = run_latent("info", "--model", str(tmp_path), "--json", check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["config"]["mlp_layer_types"] == want


@pytest.mark.parametrize("preset", PRESETS)
def test_a_null_first_k_dense_replace_is_read_as_in_transformers(preset, tmp_path):
    """"first_k_dense_replace": null, with and (where the class has one) without mlp_layer_types.
    Where transformers cannot build the model from it (a strictly typed field, or one its decoder
    layers compare: DeepSeek V2/V3, Mistral 4, ...; or, for the classes that read it only to
    derive mlp_layer_types, without that list), latent refuses it by name; elsewhere the class
    never reads it and the layers are the same. latent read it as the family's default."""
    saved, config_class = saved_config(preset)
    variants = [dict(saved, first_k_dense_replace=None)]
    variants[0].pop("mlp_layer_types", None)
    if "mlp_layer_types" in saved:
        variants.append(dict(saved, first_k_dense_replace=None))
    for i, edited in enumerate(variants):
        model_dir = tmp_path / str(i)
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps(edited))
        proc = run_latent("info", "--model", str(model_dir), "--json", check=False)
        lists = "mlp_layer_types" in edited
        try:
            want = transformers_layer_kinds(config_class.from_pretrained(model_dir))
        except Exception as e:  # strict validation, or a comparison with None
            assert proc.returncode == 2, f"list {lists}: transformers fails ({e}), latent reads it"
            assert "'first_k_dense_replace' is null (transformers fails on it)" in proc.stderr
            continue
        assert proc.returncode == 0, f"list {lists}: {proc.stderr}"
        assert json.loads(proc.stdout)["config"]["mlp_layer_types"] == want, f"list {lists}"
