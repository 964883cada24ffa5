"""DeepSeek sparse attention (deepseek_v32, glm_moe_dsa) against transformers (f32), on tiny
models with index_topk 8 so that prompts of 32..300 tokens really drop keys: logits, greedy
continuations, and the key positions the indexer selects for every query token."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import latent_generate, latent_logits, load_reference, run_latent
from family_reference import (as_index_topk_list, as_index_topk_pattern, assert_variant_matches,
                              rewrite_config)

PRESETS = ["deepseek_v32", "glm_moe_dsa"]
LENGTHS = [32, 100, 300]


def prompt(vocab, length, seed=11):
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def reference_scores(reference, ids):
    """Per full-indexer layer: transformers' index scores [S, T] (causal entries only) and its
    top-k indices [S, k], recomputed from the indexer's own inputs as its forward does."""
    captured = {}

    def hook(layer):
        def fn(module, args, kwargs, output):
            hidden, q_resid, (cos, sin) = args[0], args[1], args[2]
            captured[layer] = (module, hidden, q_resid, cos, sin, output.long())
        return fn

    handles = []
    for i, layer in enumerate(reference.model.layers):
        indexer = getattr(layer.self_attn, "indexer", None)
        if indexer is not None:
            handles.append(indexer.register_forward_hook(hook(i), with_kwargs=True))
    try:
        with torch.no_grad():
            reference(torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    out = {}
    for layer, (module, hidden, q_resid, cos, sin, topk) in captured.items():
        # Scores are invariant to the rotary layout, so compute them with the module's own code
        # path up to the mask: relu(q.k * scale) weighted by weights_proj and summed over heads.
        with torch.no_grad():
            n, d, dr = module.n_heads, module.head_dim, module.qk_rope_head_dim
            q = module.wq_b(q_resid).view(1, -1, n, d)
            k = module.k_norm(module.wk(hidden)).unsqueeze(2)
            interleave = type(module).__name__.startswith("Glm")
            mod = __import__(type(module).__module__, fromlist=["x"])
            rope = mod.apply_rotary_pos_emb_interleave if interleave else mod.apply_rotary_pos_emb
            q_rot, k_rot = rope(q[..., :dr], k[..., :dr], cos, sin, unsqueeze_dim=2)
            q = torch.cat([q_rot, q[..., dr:]], -1)
            k = torch.cat([k_rot, k[..., dr:]], -1).squeeze(2)
            scores = F.relu(torch.matmul(q.float(), k.transpose(-1, -2).float().unsqueeze(1)) * module.softmax_scale)
            weights = module.weights_proj(hidden.float()).float() * n ** -0.5
            index = torch.matmul(weights.unsqueeze(-2), scores).squeeze(-2)[0]  # [S, T]
        out[layer] = (index.numpy(), topk[0].numpy())
    return out


_CHECKED: dict = {}


def check_selection(reference, model_dir, ids):
    """Compares latent's DSA selection with transformers', layer by layer.

    Exact ties at the top-k boundary (typically keys that every index head scores 0) may break
    either way, and a token that attended to other tied keys has other hidden states from then
    on, as do later tokens in later layers (they read its rows). So: every difference must be an
    exact tie, and from the first one at position p, later layers are compared below p only.
    Returns (p: positions before which everything is comparable, number of tied tokens, output).
    """
    key = (str(model_dir), tuple(ids))
    if key not in _CHECKED:
        _CHECKED[key] = _check_selection(reference, model_dir, ids)
    return _CHECKED[key]


def _check_selection(reference, model_dir, ids):
    length = len(ids)
    ref = reference_scores(reference, ids)
    out = json.loads(run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
                                "--selected").stdout)
    selected = out["selected"]
    topk = reference.config.index_topk
    cut, ties = length, 0
    for layer, sel in enumerate(selected):
        if layer not in ref:
            # GLM IndexShare: a shared layer reuses the previous layer's selection.
            assert sel == selected[layer - 1], f"shared layer {layer}"
            continue
        scores, ref_topk = ref[layer]
        layer_cut = cut
        for s in range(cut):
            if s + 1 <= topk:
                assert sel[s] == [], "a short context must attend densely"
                continue
            ours, theirs = set(sel[s]), {int(t) for t in ref_topk[s]}
            assert len(ours) == topk and len(theirs) == topk and max(ours | theirs) <= s
            if ours == theirs:
                continue
            boundary = np.sort(scores[s, : s + 1])[::-1][topk - 1]
            for t in ours ^ theirs:
                assert scores[s, t] == boundary, f"layer {layer} token {s}: key {t} differs without a tie"
            ties += 1
            layer_cut = min(layer_cut, s)
        cut = layer_cut
    # Selection really dropped keys.
    assert any(len(sel[-1]) == topk < length for sel in selected)
    return cut, ties, out


@pytest.fixture(scope="module")
def models(tiny_models, tmp_path_factory):
    scratch = tmp_path_factory.mktemp("dsa-reference")
    built = {}
    for preset in PRESETS:
        model_dir = tiny_models.get(preset)
        built[preset] = (model_dir, load_reference(model_dir, scratch))
    return built


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("preset", PRESETS)
def test_selected_keys_match_transformers(models, preset, length):
    model_dir, reference = models[preset]
    cut, ties, _ = check_selection(reference, model_dir, prompt(reference.config.vocab_size, length))
    assert ties <= max(2, length // 50), f"{ties} tied selections: the tiny model is too degenerate"
    assert cut >= length // 2, f"a tie at position {cut} leaves too little to compare"


@pytest.mark.parametrize("form", ["absorbed", "expanded"])
@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("preset", PRESETS)
def test_logits_and_greedy_match_transformers(models, preset, length, form):
    model_dir, reference = models[preset]
    ids = prompt(reference.config.vocab_size, length)
    cut, _, _ = check_selection(reference, model_dir, ids)
    assert cut >= length // 2
    with torch.no_grad():
        ref_logits = reference(torch.tensor([ids])).logits[0].numpy()
    ours = latent_logits(model_dir, ids, form)
    # Positions from the first exactly tied selection on may legitimately differ.
    assert np.abs(ours[:cut] - ref_logits[:cut]).max() <= 1e-4 * np.abs(ref_logits).max()
    if length == 32:
        mask = torch.ones(1, len(ids), dtype=torch.long)
        with torch.no_grad():
            ref_tokens = reference.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=32,
                                            attention_mask=mask, eos_token_id=None)[0, len(ids):].tolist()
        assert latent_generate(model_dir, ids, 32, form, ignore_eos=True) == ref_tokens


@pytest.mark.parametrize("preset", PRESETS)
def test_dense_path_when_topk_covers_the_context(tiny_models, tmp_path, preset):
    model_dir = tiny_models.get(preset, config={"index_topk": 64})
    reference = load_reference(model_dir, tmp_path)
    ids = prompt(reference.config.vocab_size, 60)
    with torch.no_grad():
        ref_logits = reference(torch.tensor([ids])).logits[0].numpy()
    out = json.loads(run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
                                "--selected").stdout)
    assert all(s == [] for layer in out["selected"] for s in layer), "dense path expected"
    ours = np.asarray(out["logits"])
    assert np.abs(ours - ref_logits).max() <= 1e-4 * np.abs(ref_logits).max()


@pytest.mark.parametrize("preset", PRESETS)
def test_auto_expands_only_the_positions_before_the_first_selection(tiny_models, tmp_path, preset):
    """--attention auto on a DSA prompt past index_topk (48, above these dims' expanded break-even
    of 43 tokens): positions below 48 run expanded, bit for bit the forced expanded form's (a
    position's logits never depend on later ones), and those from 48 on, which attend what their
    indexer selected, run absorbed (model::ExpandedPositions), so they differ from it; every
    position matches transformers up to the first tied selection."""
    model_dir = tiny_models.get(preset, config={"index_topk": 48})
    reference = load_reference(model_dir, tmp_path)
    ids = prompt(reference.config.vocab_size, 120)
    cut, _, _ = check_selection(reference, model_dir, ids)
    ours = latent_logits(model_dir, ids, "auto")
    expanded = latent_logits(model_dir, ids, "expanded")
    assert np.array_equal(ours[:48], expanded[:48])
    assert not np.array_equal(ours[48:], expanded[48:])
    with torch.no_grad():
        ref_logits = reference(torch.tensor([ids])).logits[0].numpy()
    assert cut > 48
    assert np.abs(ours[:cut] - ref_logits[:cut]).max() <= 1e-4 * np.abs(ref_logits).max()


@pytest.mark.parametrize("preset", PRESETS)
def test_info_shows_both_rows(tiny_models, preset):
    model_dir = tiny_models.get(preset)
    config = json.loads((model_dir / "config.json").read_text())
    info = json.loads(run_latent("info", "--model", str(model_dir), "--json").stdout)
    for layer in info["cache_layers"]:
        names = [r["name"] for r in layer["rows"]]
        shared = config.get("indexer_types", ["full"] * 99)[layer["layer"]] == "shared"
        assert names == (["mla.latent"] if shared else ["mla.latent", "dsa.index_k"])
        if not shared:
            assert layer["rows"][1]["bytes_per_token"] == 4 * config["index_head_dim"]


@pytest.mark.parametrize("edit", [as_index_topk_pattern, as_index_topk_list])
def test_glm_index_topk_pattern_places_the_shared_indexers(tiny_models, tmp_path, edit):
    """index_topk_pattern as GLM-5's string ("FS...") and as the list of indexer types that
    transformers also takes."""
    model_dir = rewrite_config(tiny_models.get("glm_moe_dsa"), tmp_path / "model", edit)
    assert_variant_matches(model_dir)


@pytest.mark.parametrize("preset", PRESETS)
def test_moe_layer_freq_beside_mlp_layer_types_is_ignored(tiny_models, tmp_path, preset):
    """transformers reads the layer kinds from mlp_layer_types alone (these classes never read
    moe_layer_freq); a stated moe_layer_freq beside the list changes nothing."""
    model_dir = rewrite_config(tiny_models.get(preset), tmp_path / "model",
                               lambda c: c.update(moe_layer_freq=2))
    assert "mlp_layer_types" in json.loads((model_dir / "config.json").read_text())
    assert_variant_matches(model_dir)
