"""tools/compare_dump.py: latent's LATENT_DUMP points against transformers' forward hooks, layer by
layer, on tiny models of each family (f32: every point within 1e-4 of the largest reference value).
About 10 s per model (transformers' import and load dominate).

Run: .venv/bin/python -m pytest -q tests/tools/test_compare_dump.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import compare_dump  # noqa: E402


@pytest.mark.parametrize("preset", ["deepseek_v2_lite", "deepseek_v3", "glm_moe_dsa", "axk2",
                                    "hy_v4"])
def test_every_point_matches_transformers(tiny_models, preset, capsys):
    model = tiny_models.get(preset)
    # 12 tokens: past the DSA presets' index_topk (8), so the indexer selects.
    status = compare_dump.main(["--model", str(model), "--length", "12", "--json"])
    out = capsys.readouterr().out
    import json

    rows = json.loads(out)
    layers = {r["layer"] for r in rows}
    points = {r["point"] for r in rows}
    assert -1 in layers and 0 in layers and len(layers) >= 3, layers
    assert {"embed", "attn_in", "kv_latent", "attn_out", "ffn_in", "hidden"} <= points, points
    assert ("moe_out" in points) and ("mlp_out" in points), points
    bad = [r for r in rows if not r["ok"]]
    assert status == 0 and not bad, bad


def test_a_wrong_point_is_reported():
    ref = {("attn_out", 0): np.ones((2, 3)), ("hidden", 0): np.ones((2, 3))}
    ours = {("attn_out", 0): np.ones((2, 3)) * (1 + 1e-3), ("hidden", 0): np.ones((2, 4))}
    rows = {r["point"]: r for r in compare_dump.compare(ours, ref, 1e-4)}
    assert not rows["attn_out"]["ok"] and rows["attn_out"]["relative"] == pytest.approx(1e-3)
    assert not rows["hidden"]["ok"] and "shape" in rows["hidden"]["error"]
    assert compare_dump.compare({}, ref, 1e-4)[0]["error"] == "latent printed no such point"


def test_dump_lines_parse():
    text = "latent: loading\nLATENT_DUMP q layer=2 shape=2x2 1 2 3.5 -4\n"
    parsed = compare_dump.parse_dump(text)
    assert list(parsed) == [("q", 2)]
    assert parsed[("q", 2)].tolist() == [[1, 2], [3.5, -4]]
