"""The Youtu, GLM-4.7-Flash (glm4_moe_lite) and MiniCPM3 families against transformers on tiny random
models (f32): logits in both MLA forms at 1, 7, 64 and 300 prompt tokens, 32 greedy tokens, and
`latent info`'s parameter count and cache rows.

What each preset exercises (tools/make_tiny_model.py): youtu a dense MLP in every layer and the
LM head tied to the embedding; glm4_moe_lite dense and MoE layers in mlp_layer_types' order and
rms eps 1e-5; minicpm3 rotate-half LongRoPE with original_max_position_embeddings 32 (so the 64-
and 300-token prompts, and decoding past position 32, use the long factors), scale_emb,
scale_depth / sqrt(L), the hidden state divided by hidden_size / dim_model_base, tied embeddings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import latent_generate, latent_logits, load_reference, run_latent
from family_reference import assert_variant_matches

FAMILIES = ["youtu", "glm4_moe_lite", "minicpm3"]
LENGTHS = [1, 7, 64, 300]
FORMS = ["absorbed", "expanded"]
GENERATE_TOKENS = 32
# Greedy continuations from these prompt lengths: 7 + 32 tokens crosses MiniCPM3's 32 original
# positions while decoding (short factors for the prompt, long ones after); 64 starts long.
GENERATE_LENGTHS = [7, 64]


def prompt(vocab: int, length: int, seed: int = 1) -> list[int]:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, tiny_models, tmp_path_factory):
    """(model_dir, reference, {length: (ids, logits)}, {length: greedy tokens})."""
    model_dir = tiny_models.get(request.param)
    reference = load_reference(model_dir, tmp_path_factory.mktemp("reference"))
    vocab = reference.config.vocab_size
    logits, greedy = {}, {}
    with torch.no_grad():
        for length in LENGTHS:
            ids = prompt(vocab, length)
            logits[length] = (ids, reference(torch.tensor([ids])).logits[0].float().numpy())
        for length in GENERATE_LENGTHS:
            ids = logits[length][0]
            out = reference.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=GENERATE_TOKENS,
                                     attention_mask=torch.ones(1, length, dtype=torch.long),
                                     eos_token_id=None)
            greedy[length] = out[0, length:].tolist()
            assert len(greedy[length]) == GENERATE_TOKENS
    return request.param, model_dir, reference, logits, greedy


@pytest.mark.parametrize("form", FORMS)
def test_logits_match_transformers(family, form):
    name, model_dir, _, logits, _ = family
    for length in LENGTHS:
        ids, ref = logits[length]
        ours = latent_logits(model_dir, ids, form)
        assert ours.shape == ref.shape
        assert ref.std(axis=-1).min() > 0.5, f"{name}: near-uniform logits"
        err = np.abs(ours - ref).max()
        assert err <= 1e-4 * np.abs(ref).max(), f"{name} {form} {length} tokens: max |dlogit| {err}"


@pytest.mark.parametrize("form", FORMS)
def test_greedy_continuation_matches_transformers(family, form):
    name, model_dir, _, logits, greedy = family
    for length in GENERATE_LENGTHS:
        ids = logits[length][0]
        got = latent_generate(model_dir, ids, GENERATE_TOKENS, form, ignore_eos=True)
        assert got == greedy[length], f"{name} {form} from {length} tokens"


def info(model_dir, *extra):
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


def test_info_parameters_and_cache_rows(family):
    name, model_dir, reference, _, _ = family
    config = reference.config
    got = info(model_dir)
    assert got["architecture"] == name
    assert got["num_parameters"] == reference.num_parameters()
    assert got["num_layers"] == config.num_hidden_layers
    row = config.kv_lora_rank + config.qk_rope_head_dim
    for layer in got["cache_layers"]:
        assert [(r["name"], r["values"], r["bytes_per_token"]) for r in layer["rows"]] == [
            ("mla.latent", row, 4 * row)]
    assert got["cache_bytes_per_token"] == config.num_hidden_layers * row * 4


def test_minicpm3_real_attention_dims_cache_288_values(tiny_models, tmp_path):
    # MiniCPM3-4B's attention dims (kv_lora_rank 256, rope 32, nope 64) on a tiny body.
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 32,
            "short_factor": [1.0 + 0.05 * i for i in range(16)],
            "long_factor": [1.0 + 0.5 * i for i in range(16)]}
    model_dir = tiny_models.get("minicpm3", "--dtype", "bfloat16", config={
        "kv_lora_rank": 256, "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64,
        "num_attention_heads": 2, "rope_parameters": rope})
    got = info(model_dir)
    assert got["num_parameters"] == load_reference(model_dir, tmp_path).num_parameters()
    assert got["cache_dtype"] == "bf16"
    rows = [layer["rows"][0] for layer in got["cache_layers"]]
    assert all(r["name"] == "mla.latent" and r["values"] == 288 and r["bytes_per_token"] == 576
               for r in rows)


def test_minicpm3_long_prompts_use_the_long_factors(tiny_models, tmp_path):
    """The reference really switches: after a 64-token forward its inv_freq is the long set, after
    a 7-token one the short set (so the parity cases above cover both)."""
    reference = load_reference(tiny_models.get("minicpm3"), tmp_path)
    rotary = reference.model.rotary_emb
    with torch.no_grad():
        reference(torch.tensor([prompt(reference.config.vocab_size, 64)]))
        long_freq = rotary.inv_freq.clone()
        reference(torch.tensor([prompt(reference.config.vocab_size, 7)]))
        short_freq = rotary.inv_freq.clone()
    assert not torch.equal(long_freq, short_freq)
    assert torch.equal(short_freq, rotary.original_inv_freq)


def test_glm4_moe_lite_routes_where_mlp_layer_types_says(tiny_models, tmp_path):
    model_dir = tiny_models.get("glm4_moe_lite")
    reference = load_reference(model_dir, tmp_path)
    ids = prompt(reference.config.vocab_size, 40)
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
    sparse = [i for i, t in enumerate(reference.config.mlp_layer_types) if t == "sparse"]
    assert sorted(captured) == sparse == [1, 3]
    for layer, ref in captured.items():
        np.testing.assert_array_equal(np.asarray(experts[layer]), ref, err_msg=f"layer {layer}")
        assert len({tuple(r) for r in ref}) > 1, f"layer {layer}: every token picks the same experts"
    assert [layer for layer, choice in enumerate(experts) if choice is not None] == sparse


def test_glm4_moe_lite_ignores_the_mtp_layer(tiny_models, tmp_path):
    """GLM-4.7-Flash ships its MTP layer as model.layers.<num_hidden_layers>.*; latent loads the
    num_hidden_layers decoder layers only, as transformers does, so the extra tensors change
    neither the parameter count nor the logits."""
    import shutil

    from safetensors.torch import load_file, save_file

    model_dir = tiny_models.get("glm4_moe_lite")
    with_mtp = tmp_path / "with_mtp"
    shutil.copytree(model_dir, with_mtp)
    layers = json.loads((model_dir / "config.json").read_text())["num_hidden_layers"]
    tensors = load_file(model_dir / "model.safetensors")
    mtp = {name.replace("model.layers.1.", f"model.layers.{layers}."): t.clone()
           for name, t in tensors.items() if name.startswith("model.layers.1.")}
    mtp[f"model.layers.{layers}.eh_proj.weight"] = torch.zeros(64, 128)
    mtp[f"model.layers.{layers}.enorm.weight"] = torch.ones(64)
    save_file(mtp, with_mtp / "model-mtp.safetensors", metadata={"format": "pt"})
    weight_map = {**{k: "model.safetensors" for k in tensors}, **{k: "model-mtp.safetensors" for k in mtp}}
    (with_mtp / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = json.loads((with_mtp / "config.json").read_text())
    config["num_nextn_predict_layers"] = 1
    (with_mtp / "config.json").write_text(json.dumps(config))

    assert info(with_mtp)["num_parameters"] == info(model_dir)["num_parameters"]
    ids = prompt(config["vocab_size"], 9)
    np.testing.assert_array_equal(latent_logits(with_mtp, ids), latent_logits(model_dir, ids))


def test_minicpm3_prefix_cache_keeps_long_and_short_prompts_apart(tiny_models, tmp_path):
    """LongRoPE rotates a prompt's every position by the long factors when the prompt is longer
    than the original 32 positions, by the short ones otherwise: a long prompt must not reuse the
    cached blocks of a short one with the same leading tokens (nor the reverse), while long
    prompts still share theirs."""
    model_dir = tiny_models.get("minicpm3")
    base = prompt(200, 40, seed=3)
    requests = [{"ids": base[:24], "max_tokens": 8, "ignore_eos": True},
                {"ids": base, "max_tokens": 8, "ignore_eos": True, "arrival_step": 3},
                {"ids": base + [7], "max_tokens": 8, "ignore_eos": True, "arrival_step": 14},
                {"ids": base[:20], "max_tokens": 8, "ignore_eos": True, "arrival_step": 25}]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    proc = run_latent("generate", "--model", str(model_dir), "--prompts", str(path), "--block-tokens",
                      "16", "--check-invariants")
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    summary = json.loads([l for l in proc.stderr.splitlines() if l.startswith("latent: summary ")][-1]
                         [len("latent: summary "):])
    for r, req in zip(results, requests):
        assert r["ids"] == latent_generate(model_dir, req["ids"], 8, ignore_eos=True), r["index"]
    # Only the long prompts share: the third reuses the second's two full blocks, the fourth
    # (short) the first's one.
    assert summary["prefix_hit_tokens"] == 32 + 16


def test_glm4_moe_lite_rotate_half_rope(tiny_models):
    """rope_interleave false: the rotary part rotated in halves (the preset interleaves)."""
    reference = assert_variant_matches(tiny_models.get("glm4_moe_lite",
                                                       config={"rope_interleave": False}))
    assert reference.config.rope_interleave is False
