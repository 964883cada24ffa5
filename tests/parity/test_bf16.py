"""bf16 and fp8 checkpoints: latent against transformers running in bf16.

transformers in f32 on the same bf16 weights is the exact answer; transformers in bf16 rounds
every activation to bf16 (8 significant bits), so it differs from the exact answer by its own
rounding error, measured in the same run. latent has two precisions:
  * `--precision f32` keeps the weights as stored and computes in f32: it must match the exact
    answer to 1e-4 x max|logit| (latent adds no error of its own), and so be no further from
    transformers-bf16 than 1.5x transformers-bf16's own distance from the exact answer (plus
    1e-3 x max|logit| for the spread between positions);
  * the default on these checkpoints, bf16 compute (`--precision auto` = bf16: activations rounded
    to bf16 at each linear's input, and in the expanded form's attention q, keys, probabilities
    and values, with f32 accumulation, f32 everywhere else), rounds less than transformers-bf16
    does (which also rounds every output, the residual stream and all of the attention), so it
    must be no further from the exact answer than transformers-bf16 is, and
    within the same bound of transformers-bf16 as above. It must also differ from the f32 path
    (the bf16 path really ran).
Greedy tokens of the f32 path are compared against the exact (f32) reference; those of the
default, which bf16 noise may flip at near ties, start with the exact first token and then each
is the argmax (within 1e-3 x max|logit|) of latent's own bf16 logits over the sequence so far."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import latent_generate, latent_logits, load_reference, run_latent

GREEDY_TOKENS = 16


def references(model_dir, tmp_path, length, seed):
    """(ids, exact logits, transformers-bf16 logits, exact greedy tokens) for a random prompt."""
    exact = load_reference(model_dir, tmp_path, dtype=torch.float32)
    bf16 = load_reference(model_dir, tmp_path, dtype=torch.bfloat16)
    ids = torch.randint(2, exact.config.vocab_size, (length,),
                        generator=torch.Generator().manual_seed(seed)).tolist()
    with torch.no_grad():
        ref_exact = exact(torch.tensor([ids])).logits[0].float().numpy()
        ref_bf16 = bf16(torch.tensor([ids])).logits[0].float().numpy()
        exact_tokens = exact.generate(torch.tensor([ids]), do_sample=False,
                                      max_new_tokens=GREEDY_TOKENS,
                                      attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    hf_bf16_error = np.abs(ref_bf16 - ref_exact).max()
    assert hf_bf16_error > 0, "bf16 reference equals f32: the bf16 path was not exercised"
    return ids, ref_exact, ref_bf16, exact_tokens[0, len(ids):].tolist()


def active_precision(model_dir, *flags):
    info = json.loads(run_latent("info", "--model", str(model_dir), "--json", *flags).stdout)
    return info["precision"]["active"]


def test_bf16_checkpoint_f32_precision_matches_exact(tiny_models, tmp_path):
    model_dir = tiny_models.get("deepseek_v3", "--dtype", "bfloat16")
    ids, ref_exact, ref_bf16, exact_tokens = references(model_dir, tmp_path, 40, 3)
    scale = np.abs(ref_exact).max()
    hf_bf16_error = np.abs(ref_bf16 - ref_exact).max()
    assert active_precision(model_dir, "--precision", "f32") == "f32"
    for form in ("absorbed", "expanded"):
        ours = latent_logits(model_dir, ids, form, precision="f32")
        assert np.abs(ours - ref_exact).max() <= 1e-4 * scale
        assert np.abs(ours - ref_bf16).max() <= 1.5 * hf_bf16_error + 1e-3 * scale
        assert latent_generate(model_dir, ids, GREEDY_TOKENS, form, precision="f32") == exact_tokens


# (preset, make_tiny_model flags): a bf16 checkpoint, and DeepSeek-style fp8 blocks (the linear
# weights e4m3 with block scales; everything else f32), whose reference is its dequantized copy.
# Not DSA: its top-8 over random indexer scores is a discrete choice that bf16 noise flips, in
# transformers too (whose bf16 logits then differ from the exact ones by about max|logit|);
# tests/property runs DSA with bf16 compute for batch invariance instead.
# v3_fp8_whole_head_blocks: head dims and latent rank that fp8 blocks of 16 tile exactly, so the
# absorbed form's W_UK fold runs on a transposed, packed copy of kv_b's key rows (its blocks stay
# whole; model/deepseek_weights.cc, AddKeyFolds) where the CPU packs fp8 weights. Seed 2: a model
# whose routing no bf16 rounding of latent's flips (seeds 0 and 3 flip an expert in both forms,
# with the old fold too). A shifted key row or scale in the copy fails the bound (tried).
DEFAULT_CASES = {
    "v3_bf16": ("deepseek_v3", ("--dtype", "bfloat16")),
    "v3_fp8_blocks": ("deepseek_v3", ("--fp8", "--fp8-block", "16", "--dtype", "float32")),
    # Blocks of 32 hold whole tiles of k: on AMX CPUs (and the emulated AMX build) these weights
    # run the TDPBF16PS fp8 kernel (kernels/amx/linear_fp8_amx.cc), blocks of 16 the vdpbf16ps one.
    "v3_fp8_tile_blocks": ("deepseek_v3", ("--fp8", "--fp8-block", "32", "--dtype", "float32")),
    "v3_fp8_whole_head_blocks": (
        "deepseek_v3",
        ("--fp8", "--fp8-block", "16", "--dtype", "float32", "--seed", "2", "--config-json",
         json.dumps({"qk_nope_head_dim": 16, "v_head_dim": 16, "kv_lora_rank": 32}))),
    # A value head and a latent of two whole 16-column tiles: on AMX CPUs (and the emulated AMX
    # build) the expanded form's attention (kernels/amx/attention_queries_amx.cc) and, over the
    # engine's bf16 rows, the absorbed decode's (kernels/amx/attention_amx.cc) run on TDPBF16PS;
    # the other presets' odd dims stay on vdpbf16ps. Dense layers only: with these dims, bf16
    # rounding flips an expert of some token for most seeds, in transformers or in either form
    # here, which moves logits by a quarter of the largest and leaves the bound without meaning.
    "v3_bf16_tile_values": (
        "deepseek_v3",
        ("--dtype", "bfloat16", "--config-json",
         json.dumps({"v_head_dim": 32, "kv_lora_rank": 32, "first_k_dense_replace": 3}))),
}


@pytest.mark.parametrize("case_id", list(DEFAULT_CASES))
def test_default_bf16_compute_within_transformers_bf16_error(tiny_models, tmp_path, case_id):
    preset, flags = DEFAULT_CASES[case_id]
    model_dir = tiny_models.get(preset, *flags)
    ids, ref_exact, ref_bf16, exact_tokens = references(model_dir, tmp_path, 40, 5)
    scale = np.abs(ref_exact).max()
    hf_bf16_error = np.abs(ref_bf16 - ref_exact).max()
    assert active_precision(model_dir) == "bf16"
    assert active_precision(model_dir, "--precision", "bf16") == "bf16"
    for form in ("absorbed", "expanded"):
        ours = latent_logits(model_dir, ids, form)
        assert np.array_equal(ours, latent_logits(model_dir, ids, form, precision="bf16"))
        exact_path = latent_logits(model_dir, ids, form, precision="f32")
        assert not np.array_equal(ours, exact_path), "bf16 compute changed nothing"
        error = np.abs(ours - ref_exact).max()
        print(f"{case_id} {form}: |latent bf16 - exact| {error:.3g}, "
              f"|transformers bf16 - exact| {hf_bf16_error:.3g}, scale {scale:.3g}")
        assert error <= hf_bf16_error
        assert np.abs(ours - ref_bf16).max() <= 1.5 * hf_bf16_error + 1e-3 * scale
        # Greedy decoding: the first token is the exact answer's; bf16 noise may flip later near
        # ties, so each later token must be (within noise) the argmax of latent's own bf16
        # logits over the sequence so far, run as one prefill (teacher forcing).
        tokens = latent_generate(model_dir, ids, GREEDY_TOKENS, form, ignore_eos=True)
        assert len(tokens) == GREEDY_TOKENS and tokens[0] == exact_tokens[0]
        forced = latent_logits(model_dir, ids + tokens[:-1], form)[len(ids) - 1:]
        margins = forced.max(axis=-1) - forced[np.arange(len(tokens)), tokens]
        print(f"{case_id} {form}: greedy {tokens}, exact {exact_tokens}, "
              f"largest margin {margins.max():.3g}")
        assert margins.max() <= 1e-3 * scale


def test_decode_over_bf16_rows_within_transformers_bf16_error(tiny_models, tmp_path):
    """The engine's decode: one token at a time over cached bf16 rows (the absorbed form; on AMX
    CPUs, with this case's latent of 32, kernels/amx/attention_amx.cc) stays as close to the exact
    logits as the one-chunk pass over f32 rows bounds it above, and differs from it (the bf16
    rows were read)."""
    preset, flags = DEFAULT_CASES["v3_bf16_tile_values"]
    model_dir = tiny_models.get(preset, *flags)
    ids, ref_exact, ref_bf16, _ = references(model_dir, tmp_path, 40, 5)
    scale = np.abs(ref_exact).max()
    hf_bf16_error = np.abs(ref_bf16 - ref_exact).max()
    out = run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
                     "--attention", "absorbed", "--chunk-tokens", "1", "--cache-dtype", "bf16")
    ours = np.asarray(json.loads(out.stdout)["logits"], dtype=np.float32)
    assert not np.array_equal(ours, latent_logits(model_dir, ids, "absorbed"))
    error = np.abs(ours - ref_exact).max()
    print(f"decode over bf16 rows: |latent - exact| {error:.3g}, "
          f"|transformers bf16 - exact| {hf_bf16_error:.3g}, scale {scale:.3g}")
    assert error <= hf_bf16_error
    assert np.abs(ours - ref_bf16).max() <= 1.5 * hf_bf16_error + 1e-3 * scale


def test_decode_over_fp8_rows_within_bound_of_bf16_rows(tiny_models, tmp_path):
    """The same decode over fp8 rows (`--cache-dtype fp8`: e4m3 latents with a scale per 128,
    the rotary key bf16). On AMX CPUs, with this case's latent of 32, kernels/amx/attention_amx.cc
    decodes each block's rows and rounds them to bf16 (elsewhere the vector kernels take f32
    products over them). e4m3 keeps 3 mantissa bits against bf16's 8, so a stored value moves by
    up to 16x what bf16 rows move it; the logits move about linearly in a small perturbation of the
    rows (tests/property/test_fp8_rows.py measured 10.7-16.3x over f32 rows; here 6.2x on an AMX
    Xeon, where the bf16 rows' error also holds the bf16 compute's own). Bound: fp8 rows' distance
    from the exact logits, and from the bf16 rows' logits, within 16x the bf16 rows' error. Rows
    decoded with scales 1.25x too large moved them by 45x; a row off by one or values read from
    the wrong rows move them by about the largest logit."""
    preset, flags = DEFAULT_CASES["v3_bf16_tile_values"]
    model_dir = tiny_models.get(preset, *flags)
    ids, ref_exact, _, _ = references(model_dir, tmp_path, 40, 5)
    scale = np.abs(ref_exact).max()

    def decode(dtype):
        out = run_latent("logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
                         "--attention", "absorbed", "--chunk-tokens", "1", "--cache-dtype", dtype)
        return np.asarray(json.loads(out.stdout)["logits"], dtype=np.float32)

    bf16, fp8 = decode("bf16"), decode("fp8")
    bf16_error = np.abs(bf16 - ref_exact).max()
    fp8_error = np.abs(fp8 - ref_exact).max()
    print(f"decode over fp8 rows: |fp8 - exact| {fp8_error:.3g}, |bf16 rows - exact| "
          f"{bf16_error:.3g}, |fp8 - bf16 rows| {np.abs(fp8 - bf16).max():.3g}, scale {scale:.3g}")
    assert not np.array_equal(fp8, bf16)
    assert fp8_error <= 16 * bf16_error
    assert np.abs(fp8 - bf16).max() <= 16 * bf16_error


# The absorbed form's W_UK fold over a transposed, packed copy of kv_b's key rows (made at load
# where the CPU packs weights) against LATENT_KEY_FOLD=transposed, the fold over kv_b's rows as
# stored: the same products, summed in another order (fp8: the block scale applied to the sum,
# not to each weight). bf16 compute rounds every linear's input to 8 bits, so a last-bit change
# there can move a logit by bf16's resolution (the fp8 case moves up to 3e-3 of the largest); a
# wrong copy moves them by about the largest logit. mistral_large4's NoPE layers hold qk_nope +
# qk_rope key rows per head (with these dims a copy cut at qk_nope rows per head would still
# divide kv_b evenly: the case a wrong copy once took).
FOLD_CASES = {
    "v3_bf16": DEFAULT_CASES["v3_bf16"],
    "v3_fp8_whole_head_blocks": DEFAULT_CASES["v3_fp8_whole_head_blocks"],
    "mistral_large4_nope_bf16": (
        "mistral_large4",
        ("--dtype", "bfloat16", "--config-json",
         json.dumps({"qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16}))),
}


@pytest.mark.parametrize("case_id", list(FOLD_CASES))
def test_packed_key_fold_matches_the_fold_over_stored_rows(tiny_models, monkeypatch, case_id):
    preset, flags = FOLD_CASES[case_id]
    model_dir = tiny_models.get(preset, *flags)
    ids = list(range(3, 40))
    packed = latent_logits(model_dir, ids, "absorbed")
    monkeypatch.setenv("LATENT_KEY_FOLD", "transposed")
    stored = latent_logits(model_dir, ids, "absorbed")
    scale = np.abs(stored).max()
    assert np.abs(packed - stored).max() <= 2e-2 * scale


def test_f32_checkpoint_defaults_to_f32(tiny_models):
    model_dir = tiny_models.get("deepseek_v3")
    assert active_precision(model_dir) == "f32"
    assert active_precision(model_dir, "--precision", "bf16") == "bf16"
    ids = list(range(2, 30))
    exact = latent_logits(model_dir, ids, precision="f32")
    assert np.array_equal(latent_logits(model_dir, ids), exact)
    # Asked for, bf16 compute rounds the inputs of f32 weights too (transformers in bf16 feeds
    # every linear bf16 activations). How far that lands depends on routing near-ties (a flipped
    # expert changes a token's output discretely): test_default_bf16_compute_... bounds it.
    rounded = latent_logits(model_dir, ids, precision="bf16")
    assert not np.array_equal(rounded, exact) and np.isfinite(rounded).all()


def test_unknown_precision_is_refused(tiny_models):
    proc = run_latent("logits", "--model", str(tiny_models.get("deepseek_v3")), "--ids", "2,3",
                      "--precision", "fp16", check=False)
    assert proc.returncode != 0
    assert "--precision: unknown precision 'fp16' (supported: auto, bf16, f32)" in proc.stderr


# (preset, make_tiny_model flags): a bf16 DSA model (V3.2: MLA, MoE, the indexer), and V3 with
# DeepSeek-style fp8 blocks (on CPUs with AVX512-BF16 and VBMI its linears run the vdpbf16ps
# kernel over the packed codes, kernels/avx512/linear_fp8_packed.cc; blocks of 32 on AMX the
# TDPBF16PS one, kernels/amx/linear_fp8_amx.cc).
INVARIANCE_CASES = {
    "v32_bf16": ("deepseek_v32", ("--dtype", "bfloat16")),
    "v3_fp8_blocks": ("deepseek_v3", ("--fp8", "--fp8-block", "16", "--dtype", "float32")),
    "v3_fp8_tile_blocks": DEFAULT_CASES["v3_fp8_tile_blocks"],
    "v3_bf16_tile_values": DEFAULT_CASES["v3_bf16_tile_values"],
    # index_topk 64, above these dims' expanded break-even (43 tokens): prompts of 130 run
    # positions 0-63 expanded and the rest absorbed over their selections, chunks holding both.
    "v32_bf16_topk64": ("deepseek_v32", ("--dtype", "bfloat16", "--config-json",
                                         json.dumps({"index_topk": 64}))),
}
# Flags for both the alone and the batched runs of a case: v3_bf16_tile_values runs twice, once
# in the expanded form for every token (chunks of any size, and decode) and once in the default
# (its decode absorbed), the attention on AMX tiles either way where the CPU has them.
INVARIANCE_CASES["v3_bf16_tile_values_expanded"] = INVARIANCE_CASES["v3_bf16_tile_values"]
# ... and once over fp8 rows (`--cache-dtype fp8`), whose absorbed decode runs on AMX tiles too.
INVARIANCE_CASES["v3_bf16_tile_values_fp8_rows"] = INVARIANCE_CASES["v3_bf16_tile_values"]
INVARIANCE_FLAGS = {"v3_bf16_tile_values_expanded": ("--attention", "expanded"),
                    "v3_bf16_tile_values_fp8_rows": ("--cache-dtype", "fp8")}


@pytest.mark.parametrize("case_id", list(INVARIANCE_CASES))
def test_default_bf16_compute_is_batch_invariant(tiny_models, tmp_path, case_id):
    """bf16 compute keeps the engine's guarantee: each request's greedy tokens in a batch (any
    token budget and block size, so chunked prefill and mixed steps) equal the same request run
    alone through the engine, bit for bit. (tests/property compares against `latent generate
    --ids`, which keeps an f32 cache, so it runs f32 checkpoints; the engine holds bf16 rows for
    a bf16 checkpoint.)"""
    import random

    preset, flags = INVARIANCE_CASES[case_id]
    model_dir = tiny_models.get(preset, *flags)
    rng = random.Random(99)
    requests = [{"ids": [rng.randint(2, 250) for _ in range(rng.choice([1, 3, 9, 40, 130]))],
                 "max_tokens": 8, "ignore_eos": True, "arrival_step": rng.randint(0, 6)}
                for _ in range(10)]

    def run(reqs, name, *flags):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in reqs))
        out = run_latent("generate", "--model", str(model_dir), "--prompts", str(path),
                         "--check-invariants", *INVARIANCE_FLAGS.get(case_id, ()), *flags).stdout
        return [json.loads(line)["ids"] for line in out.splitlines()]

    alone = [run([r], f"alone{i}")[0] for i, r in enumerate(requests)]
    for block_tokens, budget in [(1, 1), (16, 7), (64, 4096)]:
        batched = run(requests, f"batch{budget}", "--block-tokens", str(block_tokens),
                      "--max-batch-tokens", str(budget))
        assert batched == alone, (block_tokens, budget)
