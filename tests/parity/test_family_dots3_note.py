"""dots3-note (dots3_note_text) against transformers on a tiny random model (f32): logits in both MLA
forms at 1, 7, 64, 300 tokens and at 3 x sliding_window, 32-token greedy continuations, the DSA
selections, and `latent info` (per-layer rows of two widths, window retention, bytes per token).
The preset's six layers are DSA layers (0, 1, 5) and sliding-window layers (2-4, window 16) with
their own MLA shape and rope theta."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import run_latent
from family_reference import (assert_selections_match, assert_variant_matches,
                              indexer_selections, info, info_text, latent_selections,
                              parity_tests, prompt, reference_case, reference_greedy,
                              rewrite_config)

PRESET = "dots3_note"
WINDOW = 16  # the preset's sliding_window
LENGTHS = [1, 7, 3 * WINDOW, 64, 300]
GENERATE_TOKENS = 32
GENERATE_PROMPT = 20  # past index_topk (8) and the window (16)



def check_window(reference):
    assert reference.config.sliding_window == WINDOW


case = reference_case(PRESET, "Dots3NoteForCausalLM", LENGTHS, GENERATE_PROMPT, GENERATE_TOKENS,
                      check=check_window)
test_logits_match_transformers, test_greedy_continuation_matches_transformers = parity_tests(LENGTHS)


def test_window_changes_the_logits(case):
    """The window matters on this model: transformers without it (a window past the prompt)
    gives other logits past the first window, so the parity above checks the window."""
    _, reference, logits, _ = case
    ids, ref = logits[3 * WINDOW]
    config = reference.config
    try:
        config.sliding_window = 10 * len(ids)
        with torch.no_grad():
            full = reference(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    finally:
        config.sliding_window = WINDOW
    scale = np.abs(ref).max()
    assert np.abs(full[:WINDOW] - ref[:WINDOW]).max() <= 1e-5 * scale
    assert np.abs(full[WINDOW:] - ref[WINDOW:]).max() > 1e-2 * scale



def test_info_rows_per_layer_kind(case):
    model_dir, reference, _, _ = case
    config = reference.config
    got = info(model_dir)
    assert got["num_parameters"] == reference.num_parameters()
    assert got["architecture"] == "dots3_note"
    assert got["model_type"] == "dots3_note_text"
    assert got["unused_tensors"] == []
    dsa_layer = config.per_layer_config[0]
    c, r, i = dsa_layer.kv_lora_rank, dsa_layer.qk_rope_head_dim, config.index_head_dim
    swa = config.per_layer_config[2]
    cs, rs = swa.kv_lora_rank, swa.qk_rope_head_dim
    assert (cs + rs) != (c + r)  # two widths of latent rows
    dsa = [("mla.latent", c + r, "full"), ("dsa.index_k", i, "full")]
    window = [("mla.latent", cs + rs, "window")]
    want = [dsa, dsa, window, window, window, dsa]
    assert len(got["cache_layers"]) == config.num_hidden_layers
    for l, layer in enumerate(got["cache_layers"]):
        assert [(row["name"], row["values"], row["retention"]) for row in layer["rows"]] == want[l], l
        for row in layer["rows"]:
            assert row["bytes_per_token"] == 4 * row["values"]
            if row["retention"] == "window":
                assert row["window_tokens"] == WINDOW
    total = sum(v for rows in want for _, v, _ in rows)
    assert got["cache_bytes_per_token"] == 4 * total
    assert info(model_dir, "--cache-dtype", "bf16")["cache_bytes_per_token"] == 2 * total
    # On a long context the window rows hold at most window + two blocks' worth of tokens.
    at = got["cache_at_context"]
    full_bytes = 4 * sum(v for rows in want for _, v, kind in rows if kind == "full")
    window_bytes = 4 * sum(v for rows in want for _, v, kind in rows if kind == "window")
    n, b = at["context"], got["cache_block"]["tokens"]
    assert n == config.max_position_embeddings and at["sequences"] == 1
    held = at["window_tokens_held"]
    assert WINDOW <= held <= WINDOW + 2 * b
    # Whole blocks, as the engine holds them: this preset's full rows take more bytes per token
    # than its window rows, so a window block holds as many tokens as a full one (GroupedLayout)
    # and every block has the full rows' size.
    assert full_bytes > window_bytes and at["block_bytes"] == full_bytes * b
    assert at["blocks_per_sequence"] == -(-n // b) + held // b
    assert at["bytes"] == at["blocks_per_sequence"] * at["block_bytes"]
    text = info_text(model_dir)
    assert "window 16" in text, text


def test_dsa_selection_matches_transformers(case):
    """The DSA layers' top-k (layers 0, 1, 5); the sliding layers select nothing."""
    model_dir, reference, logits, _ = case
    ids, _ = logits[64]
    captured = indexer_selections(reference, reference.model.layers, ids)
    assert sorted(captured) == [0, 1, 5]
    selected = latent_selections(model_dir, ids)
    assert_selections_match(selected, captured, reference.config.index_topk, len(ids))
    for l in (2, 3, 4):
        assert all(not s for s in selected[l])


def test_window_blocks_stay_bounded_over_a_long_decode(case, tmp_path):
    """Sliding-window retention through the engine: one sequence decodes 10 x window tokens
    (prompt in chunks of 8); the window rows' blocks it holds stay O(window) (the engine's peak),
    its full rows keep every block, and the tokens equal transformers' greedy ones."""
    model_dir, reference, _, _ = case
    ids = prompt(reference.config.vocab_size, 20, seed=5)
    steps = 10 * WINDOW
    want = reference_greedy(reference, ids, steps)
    path = tmp_path / "requests.jsonl"
    path.write_text(json.dumps({"ids": ids, "max_tokens": steps, "ignore_eos": True}) + "\n")
    chunk = 8
    proc = run_latent("generate", "--model", str(model_dir), "--prompts", str(path),
                      "--block-tokens", "4", "--max-batch-tokens", str(chunk), "--check-invariants")
    got = json.loads(proc.stdout.splitlines()[0])["ids"]
    summary = json.loads([l for l in proc.stderr.splitlines() if l.startswith("latent: summary ")][-1]
                         [len("latent: summary "):])
    assert got == want
    per_block = summary["window_block_tokens"]
    assert per_block > 0
    context = len(ids) + steps
    bound = -(-(WINDOW + chunk) // per_block) + 2  # a step reads its window and its chunk
    assert 0 < summary["peak_window_blocks"] <= bound < -(-context // per_block)
    assert summary["used_blocks_at_end"] == 0


def as_released(config):
    """The released checkpoint's form of the config: no per_layer_config but swa_* keys for the
    sliding layers' shape, and the DSA layers named "full_attention" (no use_dsa)."""
    swa = config.pop("per_layer_config")["2"]
    for key, value in swa.items():
        config["swa_" + key] = value
    config["layer_types"] = ["full_attention" if t == "indexed_attention" else t
                             for t in config["layer_types"]]
    config.pop("use_dsa", None)


def test_released_form_runs_dsa_as_transformers_does(tiny_models, tmp_path):
    """transformers reads use_dsa as true without per_layer_config, so the released form's
    "full_attention" layers are DSA layers: on a 64-token prompt (past index_topk 8, where DSA
    and dense attention differ)."""
    model_dir = rewrite_config(tiny_models.get(PRESET), tmp_path / "model", as_released)
    reference = assert_variant_matches(model_dir, "Dots3NoteForCausalLM")
    kinds = [t for t in reference.config.layer_types if t != "sliding_attention"]
    assert kinds == ["indexed_attention"] * 3


def rope_as_thetas(config):
    """The rope settings as rope_theta / swa_rope_theta (the released config's keys), which
    transformers applies to whatever the layer kinds are named; its nested rope_parameters have
    no entry for "full_attention", which transformers would look up once use_dsa renames."""
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope["indexed_attention"]["rope_theta"]
    config["swa_rope_theta"] = rope["sliding_attention"]["rope_theta"]


@pytest.mark.parametrize("form", ["canonical", "released"])
@pytest.mark.parametrize("use_dsa", [False, None])
def test_use_dsa_false_or_null_as_transformers_reads_it(tiny_models, tmp_path, form, use_dsa):
    """use_dsa false names every DSA layer "full_attention" (dense attention, indexer weights
    unused); null renames nothing, so the canonical form keeps its "indexed_attention" layers
    and the released form its "full_attention" ones. On a 64-token prompt (past index_topk 8,
    where DSA and dense attention differ), against transformers."""
    def edit(config):
        if form == "released":
            as_released(config)
        config["use_dsa"] = use_dsa
        rope_as_thetas(config)

    model_dir = rewrite_config(tiny_models.get(PRESET), tmp_path / "model", edit)
    reference = assert_variant_matches(model_dir, "Dots3NoteForCausalLM")
    dsa = use_dsa is None and form == "canonical"
    kinds = [t for t in reference.config.layer_types if t != "sliding_attention"]
    assert kinds == ["indexed_attention" if dsa else "full_attention"] * 3
    indexed = [any(row["name"] == "dsa.index_k" for row in layer["rows"])
               for layer in info(model_dir)["cache_layers"]]
    assert sum(indexed) == (3 if dsa else 0)


def test_sliding_window_size_is_the_window(tiny_models, tmp_path):
    """The released config's sliding_window_size, read where sliding_window is absent."""
    def edit(config):
        config.pop("sliding_window")
        config["sliding_window_size"] = 24

    model_dir = rewrite_config(tiny_models.get(PRESET), tmp_path / "model", edit)
    reference = assert_variant_matches(model_dir, "Dots3NoteForCausalLM")
    assert reference.config.sliding_window == 24
