"""What a family's parity test compares against, and the checks every family's test makes:
transformers' f32 logits for seeded random prompts of several lengths and its greedy
continuation of one more prompt (`reference_case`, the module fixture `case`), latent's logits
and greedy tokens against them (`parity_tests`), the DSA indexers' selections, `latent info`'s
JSON, the KDA state rows, and clear errors for bad configs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import latent_generate, latent_logits, run_latent

FORMS = ["absorbed", "expanded"]


def prompt(vocab: int, length: int, seed: int = 1) -> list[int]:
    return torch.randint(2, vocab, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def load_reference(model_dir, class_name: str = "AutoModelForCausalLM"):
    """transformers' `class_name` over `model_dir` in f32, eager attention and experts."""
    import transformers

    model = getattr(transformers, class_name).from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager")
    return model.eval()


def reference_logits_and_greedy(reference, lengths: list[int], generate_prompt: int,
                                generate_tokens: int):
    """({length: (ids, logits [length, vocab])}, (prompt ids, greedy tokens)) from `reference`."""
    vocab = reference.config.get_text_config().vocab_size  # a wrapper holds the text model's
    logits: dict[int, tuple[list[int], np.ndarray]] = {}
    with torch.no_grad():
        for n in lengths:
            ids = prompt(vocab, n)
            logits[n] = (ids, reference(input_ids=torch.tensor([ids])).logits[0].float().numpy())
    ids = prompt(vocab, generate_prompt, seed=2)
    tokens = reference_greedy(reference, ids, generate_tokens)
    return logits, (ids, tokens)


def reference_greedy(reference, ids: list[int], tokens: int) -> list[int]:
    """`reference`'s greedy continuation of `ids`, `tokens` long (no stop at EOS)."""
    with torch.no_grad():
        out = reference.generate(
            torch.tensor([ids]), do_sample=False, max_new_tokens=tokens,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            eos_token_id=None)[0, len(ids):].tolist()
    assert len(out) == tokens
    return out


def reference_case(preset: str, class_name: str, lengths: list[int], generate_prompt: int,
                   generate_tokens: int, check=None):
    """The module fixture `case`: (model dir, reference, {length: (ids, logits)}, (prompt ids,
    greedy tokens)) for the tiny model of `preset`; `check(reference)` first, when given."""

    @pytest.fixture(scope="module")
    def case(tiny_models):
        model_dir = tiny_models.get(preset)
        reference = load_reference(model_dir, class_name)
        if check is not None:
            check(reference)
        logits, greedy = reference_logits_and_greedy(reference, lengths, generate_prompt,
                                                     generate_tokens)
        return model_dir, reference, logits, greedy

    return case


def assert_logits_match(ours: np.ndarray, ref: np.ndarray):
    """latent's logits within 1e-4 of the largest reference logit, on a model whose logits are
    not near-uniform."""
    assert ours.shape == ref.shape
    assert ref.std(axis=-1).min() > 0.5, "tiny model gives near-uniform logits"
    err = np.abs(ours - ref).max()
    print(f"max |dlogit| {err:.3g}, max |logit| {np.abs(ref).max():.3g}, "
          f"ratio {err / np.abs(ref).max():.3g}")
    assert err <= 1e-4 * np.abs(ref).max(), f"max |dlogit| {err}"


def parity_tests(lengths: list[int], forms: list[str] = FORMS):
    """The module's test_logits_match_transformers (every length, both MLA forms) and
    test_greedy_continuation_matches_transformers, over its `case` fixture."""

    @pytest.mark.parametrize("form", forms)
    @pytest.mark.parametrize("length", lengths)
    def test_logits_match_transformers(case, length, form):
        model_dir, _, logits, _ = case
        ids, ref = logits[length]
        assert_logits_match(latent_logits(model_dir, ids, form), ref)

    @pytest.mark.parametrize("form", forms)
    def test_greedy_continuation_matches_transformers(case, form):
        model_dir, _, _, (ids, tokens) = case
        assert latent_generate(model_dir, ids, len(tokens), form, ignore_eos=True) == tokens

    return test_logits_match_transformers, test_greedy_continuation_matches_transformers


def assert_variant_matches(model_dir, class_name: str = "AutoModelForCausalLM", length: int = 64):
    """latent's logits in both MLA forms against transformers' (`class_name`) on one `length`-token
    prompt: a config variant of a family's tiny model. Returns the reference model."""
    reference = load_reference(model_dir, class_name)
    ids = prompt(reference.config.get_text_config().vocab_size, length)
    with torch.no_grad():
        ref = reference(input_ids=torch.tensor([ids])).logits[0].float().numpy()
    for form in FORMS:
        assert_logits_match(latent_logits(model_dir, ids, form), ref)
    return reference


def as_index_topk_pattern(config):
    """The config with its IndexShare layers as index_topk_pattern ("FS...") instead of
    indexer_types, as GLM-5's released config states them."""
    types = config.pop("indexer_types")
    config["index_topk_pattern"] = "".join("F" if t == "full" else "S" for t in types)
    assert "S" in config["index_topk_pattern"]


def as_index_topk_list(config):
    """The config with its IndexShare layers as an index_topk_pattern list (["full", "shared",
    ...]), which transformers' classes take as indexer_types itself."""
    config["index_topk_pattern"] = config.pop("indexer_types")
    assert "shared" in config["index_topk_pattern"]


def info(model_dir, *extra) -> dict:
    """`latent info --json` of `model_dir`."""
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


def info_text(model_dir) -> str:
    return run_latent("info", "--model", str(model_dir)).stdout


def kda_rows(config) -> list[tuple[str, int]]:
    """The (name, values) of a KDA layer's state rows for the text config `config`."""
    h, d, k = config.linear_num_heads, config.linear_head_dim, config.linear_conv_kernel_dim
    return [("kda.conv", (k - 1) * 3 * h * d), ("kda.state", h * d * d),
            ("kda.block", 64 * h * (4 * d + 1 + 64))]


def assert_state_row(row: dict):
    """`latent info`'s row is per-sequence f32 state, taking no bytes per token."""
    assert row["retention"] == "sequence" and row["bytes_per_token"] == 0
    assert row["bytes_per_sequence"] == 4 * row["values"]


def assert_hybrid_layers(got: dict, layer_types: list[str], latent_values: int, kda):
    """`latent info`'s layers of a KDA hybrid: one mla.latent row of `latent_values` f32 values on
    each full-attention layer, the state rows `kda` (kda_rows) on the others."""
    for l, layer in enumerate(got["cache_layers"]):
        rows = [(row["name"], row["values"]) for row in layer["rows"]]
        if layer_types[l] == "full_attention":
            assert rows == [("mla.latent", latent_values)], f"layer {l}"
            assert layer["rows"][0]["bytes_per_token"] == 4 * latent_values
        else:
            assert rows == kda, f"layer {l}"
            for row in layer["rows"]:
                assert_state_row(row)


def indexer_selections(reference, layers, ids: list[int]) -> dict[int, np.ndarray]:
    """{layer: [T, topk] its indexer's top-k positions, sorted per token} for the layers of
    `layers` with an indexer, from `reference`'s forward over `ids`."""
    captured = {}

    def hook(layer):
        def fn(module, args, output):
            captured[layer] = np.sort(output.numpy()[0], axis=-1)
        return fn

    handles = [layer.self_attn.indexer.register_forward_hook(hook(i))
               for i, layer in enumerate(layers) if layer.self_attn.indexer is not None]
    try:
        with torch.no_grad():
            reference(input_ids=torch.tensor([ids]))
    finally:
        for h in handles:
            h.remove()
    return captured


def latent_selections(model_dir, ids: list[int]) -> list:
    """latent's DSA selections [layer][token] for `ids`."""
    out = run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
                     "--selected").stdout
    return json.loads(out)["selected"]


def assert_selections_match(selected, captured: dict, topk: int, tokens: int):
    """latent's selections equal the reference's where the context exceeds topk (shorter ones
    attend densely)."""
    for l, ref in captured.items():
        for t in range(topk, tokens):
            assert selected[l][t] == ref[t].tolist(), f"layer {l} token {t}"


def rewrite_config(src, dst, edit, text_config: bool = False):
    """A copy of the model `src` at `dst` whose config.json (its text_config with `text_config`)
    went through `edit`."""
    shutil.copytree(src, dst)
    config = json.loads((dst / "config.json").read_text())
    edit(config["text_config"] if text_config else config)
    (dst / "config.json").write_text(json.dumps(config))
    return dst


def assert_info_fails(model_dir, message: str):
    """`latent info` refuses `model_dir` with exit code 2 and `message` in its error."""
    proc = run_latent("info", "--model", str(model_dir), check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr, proc.stderr
