"""A.X-K1 (axk1) and Mistral Small 4 (mistral4) against transformers on tiny random models (f32):
logits in both MLA forms at 1, 7, 64 and 300 tokens, 32-token greedy continuations, the router's
choices, and `latent info` (parameter count, cache rows). Variants that real checkpoints take:
A.X-K1 without e_score_correction_bias and with the post_mlp_layernorm transformers drops on
dense layers; Mistral Small 4 wrapped in a Mistral 3 vision-language checkpoint."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import latent_generate, latent_logits, load_reference, run_latent
from family_reference import assert_variant_matches, rewrite_config

LENGTHS = [1, 7, 64, 300]
FORMS = ["absorbed", "expanded"]
GENERATE_TOKENS = 32
# Past the tiny mistral4's L0 (16), so the Llama-4 query scaling moves while generating too.
GENERATE_PROMPT = 20


def as_released_axk1(model_dir, out):
    """A.X-K1 as its released checkpoints are: no e_score_correction_bias (routing without one),
    and a post_mlp_layernorm stored on dense layers too, which transformers ignores."""
    shutil.copytree(model_dir, out)
    tensors = load_file(out / "model.safetensors")
    dropped = [k for k in tensors if k.endswith("mlp.gate.e_score_correction_bias")]
    assert dropped
    for k in dropped:
        del tensors[k]
    config = json.loads((out / "config.json").read_text())
    dense = [l for l, kind in enumerate(config["mlp_layer_types"]) if kind == "dense"]
    assert dense
    hidden = config["hidden_size"]
    for l in dense:
        # Far from 1: were it applied, the logits would move.
        tensors[f"model.layers.{l}.post_mlp_layernorm.weight"] = torch.full((hidden,), 3.0)
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    return out


# (case id, preset, checkpoint rewrite or None)
CASES = [
    ("axk1", "axk1", None),
    ("axk1_released", "axk1", as_released_axk1),
    ("mistral4", "mistral4", None),
    ("mistral4_vl", "mistral4_vl", None),
]
CASE_IDS = [c[0] for c in CASES]


def prompt(vocab: int, length: int, seed: int = 1) -> list[int]:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def load_any_reference(model_dir, scratch):
    """transformers' model of a checkpoint: AutoModelForCausalLM maps neither mistral4 nor the
    mistral3 wrapper, so those load through their own classes."""
    import transformers

    model_type = json.loads((model_dir / "config.json").read_text())["model_type"]
    classes = {"mistral4": "Mistral4ForCausalLM", "mistral3": "Mistral3ForConditionalGeneration"}
    if model_type not in classes:
        return load_reference(model_dir, scratch)
    model = getattr(transformers, classes[model_type]).from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    return model.eval()


class Cases:
    """Each case's checkpoint and transformers' outputs, built on first use."""

    def __init__(self, tiny_models, scratch):
        self.tiny_models, self.scratch, self.built = tiny_models, scratch, {}

    def __getitem__(self, case_id):
        if case_id not in self.built:
            self.built[case_id] = self.build(case_id)
        return self.built[case_id]

    def build(self, case_id):
        _, preset, rewrite = next(c for c in CASES if c[0] == case_id)
        model_dir = self.tiny_models.get(preset)
        if rewrite is not None:
            model_dir = rewrite(model_dir, self.scratch / case_id)
        reference = load_any_reference(model_dir, self.scratch)
        vocab = reference.config.get_text_config().vocab_size
        logits = {}
        with torch.no_grad():
            for n in LENGTHS:
                ids = prompt(vocab, n)
                logits[n] = (ids, reference(input_ids=torch.tensor([ids])).logits[0].float().numpy())
            ids = prompt(vocab, GENERATE_PROMPT, seed=2)
            tokens = reference.generate(
                torch.tensor([ids]), do_sample=False, max_new_tokens=GENERATE_TOKENS,
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                eos_token_id=None)[0, len(ids):].tolist()
        assert len(tokens) == GENERATE_TOKENS
        return model_dir, reference, logits, (ids, tokens)


@pytest.fixture(scope="module")
def cases(tiny_models, tmp_path_factory):
    return Cases(tiny_models, tmp_path_factory.mktemp("reference"))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_logits_match_transformers(cases, case_id, length, form):
    model_dir, _, logits, _ = cases[case_id]
    ids, ref = logits[length]
    ours = latent_logits(model_dir, ids, form)
    assert ours.shape == ref.shape
    assert ref.std(axis=-1).min() > 0.5, "tiny model gives near-uniform logits"
    err = np.abs(ours - ref).max()
    assert err <= 1e-4 * np.abs(ref).max(), f"max |dlogit| {err}"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case_id", CASE_IDS)
def test_greedy_continuation_matches_transformers(cases, case_id, form):
    model_dir, _, _, (ids, tokens) = cases[case_id]
    assert latent_generate(model_dir, ids, GENERATE_TOKENS, form, ignore_eos=True) == tokens


@pytest.mark.parametrize("case_id", ["axk1", "axk1_released", "mistral4"])
def test_router_picks_the_same_experts(cases, case_id):
    model_dir, reference, logits, _ = cases[case_id]
    ids, _ = logits[64]
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
    _, experts = latent_logits(model_dir, ids, "auto", experts=True)
    assert captured
    for layer, ref in captured.items():
        np.testing.assert_array_equal(np.asarray(experts[layer]), ref, err_msg=f"layer {layer}")
        assert len({tuple(r) for r in ref}) > 1, f"layer {layer}: every token picks the same experts"


def info(model_dir, *extra):
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_info_parameter_count_and_cache_rows(cases, case_id):
    model_dir, reference, _, _ = cases[case_id]
    config = reference.config.get_text_config()
    got = info(model_dir)
    if case_id == "mistral4_vl":
        # The text model only: the vision tower and projector are not loaded.
        expected = reference.model.language_model.num_parameters() + reference.lm_head.weight.numel()
        assert expected < reference.num_parameters()
    else:
        expected = reference.num_parameters()
    assert got["num_parameters"] == expected
    assert got["architecture"] == case_id.split("_")[0]
    assert got.get("wrapper_model_type") == ("mistral3" if case_id == "mistral4_vl" else None)
    assert got["unused_tensors"] == []
    row_values = config.kv_lora_rank + config.qk_rope_head_dim
    assert len(got["cache_layers"]) == config.num_hidden_layers
    for layer in got["cache_layers"]:
        assert [r["name"] for r in layer["rows"]] == ["mla.latent"]
        assert layer["rows"][0]["values"] == row_values
        assert layer["rows"][0]["bytes_per_token"] == row_values * 4
    assert got["cache_bytes_per_token"] == config.num_hidden_layers * row_values * 4


def rewrite_checkpoint(src, dst, config_edit=None, rename=None):
    shutil.copytree(src, dst)
    if config_edit is not None:
        config = json.loads((dst / "config.json").read_text())
        config_edit(config)
        (dst / "config.json").write_text(json.dumps(config))
    if rename is not None:
        tensors = load_file(dst / "model.safetensors")
        save_file({rename(k): v for k, v in tensors.items()}, dst / "model.safetensors",
                  metadata={"format": "pt"})
    return dst


def test_wrapped_mistral4_in_transformers_in_memory_names(tiny_models, tmp_path):
    """model.language_model.* and lm_head.* (transformers 5's own names) load like the hub's
    language_model.model.* and language_model.lm_head.*, to the same logits."""
    hub = tiny_models.get("mistral4_vl")

    def in_memory(name):
        if name.startswith("language_model.model."):
            return "model.language_model." + name[len("language_model.model."):]
        if name.startswith("language_model.lm_head."):
            return name[len("language_model."):]
        return "model." + name  # vision_tower.*, multi_modal_projector.*

    renamed = rewrite_checkpoint(hub, tmp_path / "in-memory", rename=in_memory)
    ids = prompt(261, 40)
    np.testing.assert_array_equal(latent_logits(renamed, ids), latent_logits(hub, ids))
    assert info(renamed)["num_parameters"] == info(hub)["num_parameters"]


def set_text_rope(key, value):
    def edit(config):
        config["text_config"]["rope_parameters"][key] = value
    return edit


@pytest.mark.parametrize("config_edit,rename,message", [
    (lambda c: c.pop("text_config"), None, "model_type 'mistral3' needs a 'text_config' object"),
    (lambda c: c["text_config"].update(model_type="mistral3"), None,
     "text_config is itself a mistral3 (vision-language) config"),
    (lambda c: c["text_config"].update(model_type="deepseek_v3", topk_method="noaux_tc"), None,
     "a mistral3 checkpoint of a deepseek_v3 language model is not supported"),
    (None, lambda k: k.replace("language_model.", "text_model."),
     "holds no language_model.* or model.language_model.* tensors"),
    (lambda c: c["text_config"]["rope_parameters"].pop("llama_4_scaling_beta"), None,
     "missing 'llama_4_scaling_beta'"),
    (set_text_rope("partial_rotary_factor", 0.5), None,
     "partial_rotary_factor 0.5 rotates 12 of head_dim 24, but qk_rope_head_dim is 10"),
], ids=["no_text_config", "nested_wrapper", "other_text_model", "no_language_model", "no_llama4_beta",
        "rotary_dim_mismatch"])
def test_bad_mistral4_checkpoint_gets_a_clear_error(tiny_models, tmp_path, config_edit, rename,
                                                     message):
    model_dir = rewrite_checkpoint(tiny_models.get("mistral4_vl"), tmp_path / "model",
                                   config_edit=config_edit, rename=rename)
    proc = run_latent("info", "--model", str(model_dir), check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr


def test_axk1_derives_the_layer_kinds_from_moe_layer_freq(tiny_models, tmp_path):
    """AXK1Config builds mlp_layer_types from first_k_dense_replace and moe_layer_freq when the
    list is absent (the legacy form): here layer 1 dense, layer 2 sparse."""
    model_dir = tiny_models.get("axk1", config={"mlp_layer_types": None, "moe_layer_freq": 2})

    def legacy(config):
        assert config.pop("mlp_layer_types") == ["dense", "dense", "sparse"]
        config.update(first_k_dense_replace=1, moe_layer_freq=2)

    reference = assert_variant_matches(rewrite_config(model_dir, tmp_path / "legacy", legacy))
    assert reference.config.mlp_layer_types == ["dense", "dense", "sparse"]
