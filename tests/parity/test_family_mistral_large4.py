"""Mistral Large 4 (mistral_large4) against transformers on a tiny random model (f32): logits in
both MLA forms at 1, 7, 64 and 300 tokens, 32-token greedy continuations, the DSA selections, and
`latent info` (parameter count, the rows each layer kind caches, bytes per token). The preset's
six layers hold every layer kind: rope and NoPE layers, KV-sharing layers that cache no latent,
full and shared indexer layers, and one layer that caches nothing at all; its checkpoint is
written by save_pretrained in Mistral's native names inside the vision-language wrapper."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from family_reference import reference_logits_and_greedy
from conftest import latent_generate, latent_logits, run_latent

PRESET = "mistral_large4"
LENGTHS = [1, 7, 64, 300]
FORMS = ["absorbed", "expanded"]
GENERATE_TOKENS = 32
GENERATE_PROMPT = 20  # past index_topk (8): generated tokens attend to what the indexer selects


def load_reference(model_dir):
    from transformers import MistralLarge4ForConditionalGeneration

    model = MistralLarge4ForConditionalGeneration.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    return model.eval()


@pytest.fixture(scope="module")
def case(tiny_models):
    model_dir = tiny_models.get(PRESET)
    reference = load_reference(model_dir)
    logits, (ids, tokens) = reference_logits_and_greedy(reference, LENGTHS, GENERATE_PROMPT,
                                                        GENERATE_TOKENS)
    return model_dir, reference, logits, (ids, tokens)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("length", LENGTHS)
def test_logits_match_transformers(case, length, form):
    model_dir, _, logits, _ = case
    ids, ref = logits[length]
    ours = latent_logits(model_dir, ids, form)
    assert ours.shape == ref.shape
    assert ref.std(axis=-1).min() > 0.5, "tiny model gives near-uniform logits"
    err = np.abs(ours - ref).max()
    assert err <= 1e-4 * np.abs(ref).max(), f"max |dlogit| {err}"


@pytest.mark.parametrize("form", FORMS)
def test_greedy_continuation_matches_transformers(case, form):
    model_dir, _, _, (ids, tokens) = case
    assert latent_generate(model_dir, ids, GENERATE_TOKENS, form, ignore_eos=True) == tokens


def test_softcap_bounds_the_logits(case):
    _, reference, logits, _ = case
    cap = reference.config.get_text_config().final_logit_softcapping
    _, ref = logits[64]
    # The cap bends the logits: without it they would reach past it.
    assert np.abs(ref).max() < cap and np.abs(ref).max() > 0.8 * cap


def info(model_dir, *extra):
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


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
    text = run_latent("info", "--model", str(model_dir)).stdout
    assert "layer 4: no rows (attends to layer 2's mla.latent)" in text, text
    assert "mistral_large4 (model_type mistral_large4_text in a mistral_large4 checkpoint)" in text


def test_dsa_selection_matches_transformers(case):
    """The top-k of full indexer layers, and that shared layers (3, 4) reuse layer 2's."""
    model_dir, reference, logits, _ = case
    ids, _ = logits[64]
    captured = {}

    def hook(layer):
        def fn(module, args, output):
            captured[layer] = np.sort(output.numpy()[0], axis=-1)
        return fn

    layers = reference.model.language_model.layers
    handles = [layer.self_attn.indexer.register_forward_hook(hook(i))
               for i, layer in enumerate(layers) if layer.self_attn.indexer is not None]
    try:
        with torch.no_grad():
            reference(input_ids=torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    out = json.loads(run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
                                "--selected").stdout)
    selected = out["selected"]
    topk = reference.config.get_text_config().index_topk
    for l, ref in captured.items():
        for t in range(topk, len(ids)):  # shorter contexts attend densely
            assert selected[l][t] == ref[t].tolist(), f"layer {l} token {t}"
    assert selected[3] == selected[2] and selected[4] == selected[2]


def rewrite_config(src, dst, edit):
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config["text_config"])
    (dst / "config.json").write_text(json.dumps(config))
    return dst


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
], ids=["kv_source_not_latest", "kv_source_not_owner", "kv_source_length", "no_rope_value", "q_lora",
        "shared_first_indexer", "softcap_zero"])
def test_bad_config_gets_a_clear_error(tiny_models, tmp_path, edit, message):
    model_dir = rewrite_config(tiny_models.get(PRESET), tmp_path / "model", edit)
    proc = run_latent("info", "--model", str(model_dir), check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
