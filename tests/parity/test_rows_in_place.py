"""Attention and the DSA indexer read the paged cache rows in place (bf16 rows widened, fp8 rows
decoded in registers), and fall back to gathering f32 copies for a row the kernels do not read in
place (LATENT_ROWS_GATHER=1 forces that path for every type). Both must give the same logits bit
for bit, in both MLA forms, over one chunk, chunks of 7 and one token at a time (decode steps over
cached rows), on DSA layers (deepseek_v32, whose top-8 drops keys at 40 tokens) and on
sliding-window rows of another width (dots3_note); fp8 rows (`--cache-dtype fp8`) with a latent
the kernels read in place (kv_lora_rank 32) and one they do not (27: gathered, the 16-value index
keys still in place). 36 `latent logits` runs: about 20 s on a quiet 2-core machine."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from conftest import LATENT

PROMPT = 40  # past index_topk (8) and dots3_note's window (16)


def logits(model_dir, ids, form, chunk, cache_dtype, tmp_path, gather):
    out = tmp_path / f"logits-{form}-{chunk}-{cache_dtype}-{int(gather)}.f32"
    env = dict(os.environ)
    env.pop("LATENT_ROWS_GATHER", None)
    if gather:
        env["LATENT_ROWS_GATHER"] = "1"
    proc = subprocess.run(
        [str(LATENT), "logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
         "--attention", form, "--chunk-tokens", str(chunk), "--cache-dtype", cache_dtype,
         "--f32-out", str(out)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)


@pytest.mark.parametrize("preset", ["deepseek_v32", "dots3_note"])
def test_rows_in_place_equal_gathered_rows(tiny_models, tmp_path, preset):
    model_dir = tiny_models.get(preset)
    rng = np.random.default_rng(5)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    ids = rng.integers(2, vocab, PROMPT).tolist()
    # Absorbed: one chunk, and one token at a time (decode steps); expanded: chunks of 7 (a chunk
    # expands the rows cached by the ones before it).
    for form, chunk in (("absorbed", PROMPT), ("absorbed", 1), ("expanded", 7)):
        in_place = logits(model_dir, ids, form, chunk, "bf16", tmp_path, gather=False)
        gathered = logits(model_dir, ids, form, chunk, "bf16", tmp_path, gather=True)
        assert np.isfinite(in_place).all()
        assert np.array_equal(in_place, gathered), f"{form}, chunks of {chunk}"
    # f32 rows too (read in place as f32), and the bf16 rows really were bf16 (they differ).
    f32_in_place = logits(model_dir, ids, "absorbed", 7, "f32", tmp_path, gather=False)
    f32_gathered = logits(model_dir, ids, "absorbed", 7, "f32", tmp_path, gather=True)
    assert np.array_equal(f32_in_place, f32_gathered)
    assert not np.array_equal(f32_in_place, logits(model_dir, ids, "absorbed", 7, "bf16", tmp_path, False))


# kv_lora_rank 32: fp8 latent rows read in place (whole 16-value chunks); 27 (the presets'): not,
# so they are gathered while the DSA index keys (16 values) are read in place.
@pytest.mark.parametrize("preset,config", [("deepseek_v32", {"kv_lora_rank": 32}),
                                           ("deepseek_v32", None),
                                           ("dots3_note", {"kv_lora_rank": 32, "swa_kv_lora_rank": 16})])
def test_fp8_rows_in_place_equal_gathered_rows(tiny_models, tmp_path, preset, config):
    model_dir = tiny_models.get(preset, config=config)
    rng = np.random.default_rng(7)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    ids = rng.integers(2, vocab, PROMPT).tolist()
    for form, chunk in (("absorbed", PROMPT), ("absorbed", 1), ("expanded", 7)):
        in_place = logits(model_dir, ids, form, chunk, "fp8", tmp_path, gather=False)
        gathered = logits(model_dir, ids, form, chunk, "fp8", tmp_path, gather=True)
        assert np.isfinite(in_place).all()
        assert np.array_equal(in_place, gathered), f"{form}, chunks of {chunk}"
    # The fp8 rows really were fp8 (they differ from bf16 rows).
    assert not np.array_equal(in_place, logits(model_dir, ids, "expanded", 7, "bf16", tmp_path, False))
