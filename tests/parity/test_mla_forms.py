"""The absorbed MLA form (attend over the latent rows, W_UK/W_UV folded in) against the expanded
form (rebuild per-head keys and values from the latent), in f32."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import latent_logits


@pytest.mark.parametrize("preset", ["deepseek_v3", "deepseek_v2_lite"])
@pytest.mark.parametrize("length", [1, 7, 64, 300])
def test_absorbed_equals_expanded(tiny_models, preset, length):
    model_dir = tiny_models.get(preset)
    ids = torch.randint(2, 200, (length,), generator=torch.Generator().manual_seed(length)).tolist()
    absorbed = latent_logits(model_dir, ids, "absorbed")
    expanded = latent_logits(model_dir, ids, "expanded")
    err = np.abs(absorbed - expanded).max()
    assert err <= 1e-5 * np.abs(expanded).max(), f"max |absorbed - expanded| {err}"
