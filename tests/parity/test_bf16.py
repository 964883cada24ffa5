"""bf16 checkpoints: latent against transformers running in bf16.

latent keeps bf16 weights as stored but computes in f32. transformers in bf16 rounds every
activation to bf16 (8 significant bits), so the two differ by transformers' own rounding error.
The tolerance is therefore stated relative to that error, measured in the same run: transformers
in f32 on the same bf16 weights is the exact answer, and
  1. latent must match it to 1e-4 x max|logit| (the f32 bound: latent adds no error of its own);
  2. latent must be no further from transformers-bf16 than 1.5x transformers-bf16's own distance
     from the exact answer (plus 1e-3 x max|logit| for the spread between positions), i.e. the
     disagreement is transformers' bf16 rounding, not a bug of latent's.
Greedy tokens are compared against the exact (f32) reference, which bf16 noise can flip."""

from __future__ import annotations

import numpy as np
import torch

from conftest import latent_generate, latent_logits, load_reference


def test_bf16_checkpoint_within_transformers_bf16_error(tiny_models, tmp_path):
    model_dir = tiny_models.get("deepseek_v3", "--dtype", "bfloat16")
    exact = load_reference(model_dir, tmp_path, dtype=torch.float32)
    bf16 = load_reference(model_dir, tmp_path, dtype=torch.bfloat16)
    ids = torch.randint(2, exact.config.vocab_size, (40,),
                        generator=torch.Generator().manual_seed(3)).tolist()
    with torch.no_grad():
        ref_exact = exact(torch.tensor([ids])).logits[0].float().numpy()
        ref_bf16 = bf16(torch.tensor([ids])).logits[0].float().numpy()
        exact_tokens = exact.generate(torch.tensor([ids]), do_sample=False, max_new_tokens=16,
                                      attention_mask=torch.ones(1, len(ids), dtype=torch.long))
    scale = np.abs(ref_exact).max()
    hf_bf16_error = np.abs(ref_bf16 - ref_exact).max()
    assert hf_bf16_error > 0, "bf16 reference equals f32: the bf16 path was not exercised"

    for form in ("absorbed", "expanded"):
        ours = latent_logits(model_dir, ids, form)
        assert np.abs(ours - ref_exact).max() <= 1e-4 * scale
        assert np.abs(ours - ref_bf16).max() <= 1.5 * hf_bf16_error + 1e-3 * scale
        assert latent_generate(model_dir, ids, 16, form) == exact_tokens[0, len(ids):].tolist()
