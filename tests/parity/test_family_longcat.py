"""LongCat-Flash (longcat_flash) against transformers on its tiny random model (f32): logits in
both MLA forms at 1, 7, 64 and 300 prompt tokens, 32 greedy tokens, the router's choices
(identity "zero" experts included), and `latent info` (parameter count, two cache rows per
layer). The checkpoint is what save_pretrained writes: the hub's per-expert names, with LongCat's
own config keys (num_layers, ffn_hidden_size, expert_ffn_hidden_size, moe_topk,
zero_expert_num)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import latent_generate, latent_logits, load_reference, run_latent

PRESET = "longcat_flash"
LENGTHS = [1, 7, 64, 300]
FORMS = ["absorbed", "expanded"]
GENERATE_TOKENS = 32


def prompt(vocab: int, length: int, seed: int = 1) -> list[int]:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module")
def longcat(tiny_models, tmp_path_factory):
    model_dir = tiny_models.get(PRESET)
    reference = load_reference(model_dir, tmp_path_factory.mktemp("reference"))
    return model_dir, reference


@pytest.fixture(scope="module")
def reference_logits(longcat):
    _, reference = longcat
    out = {}
    with torch.no_grad():
        for length in LENGTHS:
            ids = prompt(reference.config.vocab_size, length)
            out[length] = (ids, reference(torch.tensor([ids])).logits[0].float().numpy())
    return out


def test_checkpoint_uses_longcat_names(longcat):
    model_dir, reference = longcat
    config = json.loads((model_dir / "config.json").read_text())
    for key in ("num_layers", "ffn_hidden_size", "expert_ffn_hidden_size", "moe_topk", "zero_expert_num"):
        assert key in config, key
    assert "intermediate_size" not in config and "num_experts_per_tok" not in config
    # Not saved by transformers; the tool states it (its sublayers: 2 * num_layers).
    assert config["num_hidden_layers"] == 2 * config["num_layers"]
    index = json.dumps(sorted(_tensor_names(model_dir)))
    # Per-expert hub names; transformers' identity experts keep gate/up rows but no down_proj.
    e = reference.config.n_routed_experts
    assert f"model.layers.0.mlp.experts.{e - 1}.down_proj.weight" in index
    assert f"model.layers.0.mlp.experts.{e}.gate_proj.weight" in index
    assert f"model.layers.0.mlp.experts.{e}.down_proj.weight" not in index
    assert "model.layers.0.mlp.router.classifier.weight" in index


def _tensor_names(model_dir):
    from safetensors import safe_open

    with safe_open(model_dir / "model.safetensors", "pt") as f:
        return list(f.keys())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("length", LENGTHS)
def test_logits_match_transformers(longcat, reference_logits, length, form):
    model_dir, _ = longcat
    ids, ref = reference_logits[length]
    ours = latent_logits(model_dir, ids, form)
    assert ours.shape == ref.shape
    assert ref.std(axis=-1).min() > 0.5, "tiny model gives near-uniform logits"
    err = np.abs(ours - ref).max()
    assert err <= 1e-4 * np.abs(ref).max(), f"max |dlogit| {err}"


@pytest.fixture(scope="module")
def reference_greedy(longcat):
    """32 greedy tokens of transformers after a 7-token prompt: all of them (EOS being just
    another token), and stopping at EOS as generation_config.json says."""
    _, reference = longcat
    ids = prompt(reference.config.vocab_size, 7)
    mask = torch.ones(1, len(ids), dtype=torch.long)
    with torch.no_grad():
        ref_all = reference.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=GENERATE_TOKENS,
                                     attention_mask=mask, eos_token_id=None)[0, len(ids):].tolist()
        ref_stop = reference.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=GENERATE_TOKENS,
                                      attention_mask=mask)[0, len(ids):].tolist()
    assert len(ref_all) == GENERATE_TOKENS
    return ids, ref_all, ref_stop


@pytest.mark.parametrize("form", FORMS)
def test_greedy_continuation_matches_transformers(longcat, reference_greedy, form):
    model_dir, _ = longcat
    ids, ref_all, ref_stop = reference_greedy
    assert latent_generate(model_dir, ids, GENERATE_TOKENS, form, ignore_eos=True) == ref_all
    assert latent_generate(model_dir, ids, GENERATE_TOKENS, form) == ref_stop


def test_router_picks_the_same_experts_including_identity_ones(longcat):
    model_dir, reference = longcat
    ids = prompt(reference.config.vocab_size, 64)
    captured = {}

    def hook(layer):
        def fn(module, args, output):
            captured[layer] = np.sort(output[2].numpy(), axis=-1)
        return fn

    handles = [layer.mlp.router.register_forward_hook(hook(i)) for i, layer in enumerate(reference.model.layers)]
    try:
        with torch.no_grad():
            reference(torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    _, experts = latent_logits(model_dir, ids, "auto", experts=True)
    assert len(experts) == reference.config.num_layers == len(captured)
    routed = reference.config.n_routed_experts
    for layer, ref in captured.items():
        np.testing.assert_array_equal(np.asarray(experts[layer]), ref, err_msg=f"layer {layer}")
        # The tiny model must really route to identity experts and to real ones.
        assert (ref >= routed).any() and (ref < routed).any(), f"layer {layer}"
        assert len({tuple(r) for r in ref}) > 1, f"layer {layer}: every token picks the same experts"


def info(model_dir, *extra):
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


@pytest.mark.parametrize("cache_dtype,value_bytes", [("auto", 4), ("bf16", 2)])
def test_info_parameters_and_two_cache_rows_per_layer(longcat, cache_dtype, value_bytes):
    model_dir, reference = longcat
    config = reference.config
    got = info(model_dir, "--cache-dtype", cache_dtype)
    assert got["architecture"] == "longcat_flash"
    assert got["moe"]["routed_experts"] == config.n_routed_experts
    assert got["moe"]["identity_experts"] == config.zero_expert_num
    assert got["num_parameters"] == reference.num_parameters()
    assert got["num_layers"] == config.num_layers
    values = config.kv_lora_rank + config.qk_rope_head_dim
    assert len(got["cache_layers"]) == config.num_layers
    for layer in got["cache_layers"]:
        assert [r["name"] for r in layer["rows"]] == ["mla.latent.0", "mla.latent.1"]
        assert all(r["values"] == values and r["bytes_per_token"] == values * value_bytes for r in layer["rows"])
        assert layer["rows"][0]["block_offset"] != layer["rows"][1]["block_offset"]
    assert got["cache_bytes_per_token"] == config.num_layers * 2 * values * value_bytes
    assert got["unused_tensors"] == []
    text = run_latent("info", "--model", str(model_dir)).stdout
    assert "longcat_flash (model_type longcat_flash)" in text and "mla.latent.1" in text
    assert f"0 shared, {config.zero_expert_num} identity;" in text


def test_identity_expert_rows_are_optional(longcat, tmp_path):
    """Released checkpoints hold no weights for the identity experts; transformers allocates
    gate/up rows for them (counted in num_parameters) that it never reads."""
    from safetensors.torch import load_file, save_file

    model_dir, reference = longcat
    stripped = tmp_path / "stripped"
    shutil.copytree(model_dir, stripped)
    routed = reference.config.n_routed_experts
    tensors = load_file(model_dir / "model.safetensors")
    kept = {k: v for k, v in tensors.items()
            if not any(f".mlp.experts.{e}." in k for e in range(routed, routed + reference.config.zero_expert_num))}
    assert len(kept) < len(tensors)
    save_file(kept, stripped / "model.safetensors", metadata={"format": "pt"})
    assert info(stripped)["num_parameters"] == reference.num_parameters()
    ids = prompt(reference.config.vocab_size, 7)
    np.testing.assert_array_equal(latent_logits(stripped, ids), latent_logits(model_dir, ids))


@pytest.mark.parametrize("mutation,message", [
    (lambda c: c.pop("num_layers"), "missing required field 'num_layers'"),
    (lambda c: c.pop("num_hidden_layers"), None),  # transformers does not save it: optional
    (lambda c: c.update(num_hidden_layers=3), "num_hidden_layers (3) must be 2 * num_layers (4)"),
    (lambda c: c.update(intermediate_size=5), "contradictory 'ffn_hidden_size' (70) and 'intermediate_size' (5)"),
    (lambda c: c.update(head_dim=64), "head_dim (64, the rotary dim) must equal qk_rope_head_dim (8)"),
    (lambda c: c.update(zero_expert_type="copy"), "zero_expert_type 'copy' is not supported"),
    (lambda c: c.update(zero_expert_num=4), "has shape"),
])
def test_bad_config_gets_a_clear_error(longcat, tmp_path, mutation, message):
    model_dir, _ = longcat
    bad = tmp_path / "model"
    shutil.copytree(model_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    mutation(config)
    (bad / "config.json").write_text(json.dumps(config))
    proc = run_latent("info", "--model", str(bad), check=False)
    if message is None:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr


def test_fused_expert_layout_loads_the_same(longcat, tmp_path):
    """transformers' in-memory layout: gate_up_proj [E+Z, 2I, D] (rows for the identity experts
    too) and down_proj [E, D, I] per layer."""
    from safetensors.torch import load_file, save_file

    model_dir, reference = longcat
    config = reference.config
    routed, zero = config.n_routed_experts, config.zero_expert_num
    tensors = load_file(model_dir / "model.safetensors")
    fused = {k: v for k, v in tensors.items() if ".mlp.experts." not in k}
    for layer in range(config.num_layers):
        p = f"model.layers.{layer}.mlp.experts."
        fused[p + "gate_up_proj"] = torch.stack(
            [torch.cat([tensors[f"{p}{e}.gate_proj.weight"], tensors[f"{p}{e}.up_proj.weight"]])
             for e in range(routed + zero)])
        fused[p + "down_proj"] = torch.stack([tensors[f"{p}{e}.down_proj.weight"] for e in range(routed)])
    out = tmp_path / "fused"
    shutil.copytree(model_dir, out)
    save_file(fused, out / "model.safetensors", metadata={"format": "pt"})
    got = info(out)
    assert got["expert_layout"] == "fused"
    assert got["num_parameters"] == reference.num_parameters()
    ids = prompt(config.vocab_size, 7)
    np.testing.assert_array_equal(latent_logits(out, ids), latent_logits(model_dir, ids))


@pytest.fixture(scope="module")
def fp8_case(tiny_models, tmp_path_factory):
    model_dir = tiny_models.get(PRESET, "--fp8", "--fp8-block", "16", "--dtype", "float32")
    reference = load_reference(model_dir, tmp_path_factory.mktemp("fp8-reference"))
    ids = prompt(reference.config.vocab_size, 24)
    with torch.no_grad():
        return model_dir, ids, reference(torch.tensor([ids])).logits[0].float().numpy()


@pytest.mark.parametrize("form", FORMS)
def test_fp8_block_checkpoint_matches_its_dequantized_reference(fp8_case, form):
    """DeepSeek-style fp8 blocks on the linear weights (the router classifier stays f32)."""
    model_dir, ids, ref = fp8_case
    ours = latent_logits(model_dir, ids, form, precision="f32")  # the default: bf16 compute
    err = np.abs(ours - ref).max()
    assert err <= 1e-4 * np.abs(ref).max(), f"max |dlogit| {err}"
