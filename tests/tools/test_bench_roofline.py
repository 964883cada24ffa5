"""bench/compare.py's pure arithmetic: the decode step's bytes and FLOPs at a batch (experts any
token touches, cache rows), the roofline fraction, and the ratios and results section built from
a made-up run (headline rows = latent's default, opt-in rows marked, transformers' best, the
peer's failures recorded). No benchmark runs: well under a second.

Run: .venv/bin/python -m pytest -q tests/tools/test_bench_roofline.py
"""

from __future__ import annotations

import itertools
import math
import json
import struct
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import compare  # noqa: E402


def test_expected_distinct_experts_matches_enumeration():
    # 4 experts, top 2, 2 tokens: enumerate every pair of choices (36): mean union size 3.
    subsets = list(itertools.combinations(range(4), 2))
    mean = sum(len(set(a) | set(b)) for a in subsets for b in subsets) / len(subsets) ** 2
    assert compare.expected_distinct_experts(4, 2, 2) == pytest.approx(mean) == pytest.approx(3.0)
    assert compare.expected_distinct_experts(64, 6, 1) == pytest.approx(6.0)
    assert compare.expected_distinct_experts(64, 6, 64) == pytest.approx(64 * (1 - (58 / 64) ** 64))
    assert compare.expected_distinct_experts(64, 6, 0) == 0.0


def write_checkpoint(path: Path) -> dict:
    """A config.json and a safetensors file whose header lists the tensors (model_arithmetic
    reads only headers): 1 layer, hidden 8, 2 heads, 4 routed experts of top 2."""
    cfg = {"n_routed_experts": 4, "num_experts_per_tok": 2, "hidden_size": 8, "vocab_size": 10,
           "num_hidden_layers": 1, "kv_lora_rank": 4, "qk_rope_head_dim": 2, "num_attention_heads": 2,
           "qk_nope_head_dim": 3, "v_head_dim": 3}
    shapes = {"model.embed_tokens.weight": [10, 8], "lm_head.weight": [10, 8],
              "model.layers.0.self_attn.q_proj.weight": [12, 8],  # other: 96 params
              "model.layers.0.input_layernorm.weight": [8],  # other, not a linear
              "model.layers.0.mlp.experts.gate_up_proj": [4, 6, 8]}  # routed, fused: 192 params
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    blob = json.dumps(header).encode()
    (path / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob)
    (path / "config.json").write_text(json.dumps(cfg))
    return cfg


def test_decode_step_bytes_and_flops(tmp_path):
    write_checkpoint(tmp_path)
    arith = compare.model_arithmetic(tmp_path)
    # Linears per token: q_proj 96 + the fused experts' 192 at 2 of 4 = 192 multiply-adds.
    assert arith["linear_flops_per_token"] == 2 * (96 + 192 * 2 / 4)
    assert arith["parts_bytes"]["routed_experts_all"] == 2 * 192
    assert arith["cache_bytes_per_context_token"] == 1 * (4 + 2) * 2
    # Absorbed attention per position: 2 heads x ((4 + 2) scores + 4 values) x 2 flops.
    assert arith["decode_attention_flops_per_position"] == 2 * 2 * (6 + 4)

    one = compare.decode_step(arith, 1, 5)
    assert one["bytes"] == pytest.approx(compare.decode_bytes(arith, 5))  # batch 1: top-k experts
    step = compare.decode_step(arith, 3, 5)
    experts = 4 * (1 - 0.5 ** 3)
    other = 2 * (96 + 8)
    assert step["experts_touched_per_moe_layer"] == pytest.approx(experts)
    assert step["weight_bytes"] == pytest.approx(other + 2 * 192 * experts / 4 + 3 * 2 * 8 + 2 * 80)
    assert step["cache_row_bytes"] == 3 * 5 * 12
    assert step["flops"] == pytest.approx(3 * (2 * 192 + 2 * 80 + 40 * 5))


def test_decode_step_parts_sum_to_the_step_and_bound_each_on_its_own(tmp_path):
    write_checkpoint(tmp_path)
    arith = compare.model_arithmetic(tmp_path)
    assert arith["routed_linear_flops_per_token"] == 2 * 192 * 2 / 4
    step = compare.decode_step(arith, 3, 5)
    parts = step["parts"]
    assert set(parts) == {"lm_head", "routed_experts", "other_weights", "attention_over_rows"}
    assert sum(p["bytes"] for p in parts.values()) == pytest.approx(step["bytes"])
    assert sum(p["flops"] for p in parts.values()) == pytest.approx(step["flops"])
    assert parts["routed_experts"]["flops"] == pytest.approx(3 * 2 * 192 * 2 / 4)
    # One part memory-bound, one compute-bound: the sum of each one's bound, which is more than
    # the whole step's max(bytes, FLOPs) bound.
    two = {"a": {"bytes": 10e9, "flops": 0.0}, "b": {"bytes": 0.0, "flops": 20e9}}
    bound = compare.parts_roofline_s(two, read_gb_s=100, peak_gflops=100)
    assert bound["by_part_s"] == {"a": pytest.approx(0.1), "b": pytest.approx(0.2)}
    assert bound["bound_s"] == pytest.approx(0.3)
    assert compare.roofline_fraction(1.0, 10e9, 20e9, 100, 100)["bound_s"] == pytest.approx(0.2)
    assert compare.parts_roofline_s(two, None, 100) is None


def test_roofline_fraction_takes_the_larger_time():
    mem = compare.roofline_fraction(0.5, step_bytes=20e9, step_flops=1e9, read_gb_s=100, peak_gflops=100)
    assert (mem["bound_by"], mem["bound_s"], mem["fraction"]) == ("memory", 0.2, pytest.approx(0.4))
    comp = compare.roofline_fraction(0.5, step_bytes=1e9, step_flops=30e9, read_gb_s=100, peak_gflops=100)
    assert (comp["bound_by"], comp["bound_s"], comp["fraction"]) == ("compute", 0.3, pytest.approx(0.6))
    assert "fraction" not in compare.roofline_fraction(None, 1e9, 1e9, 100, 100)
    assert "reason" in compare.roofline_fraction(0.5, 1e9, 1e9, 100, None)


def made_up_run(tmp_path, cb_ok: bool) -> dict:
    write_checkpoint(tmp_path)
    arith = compare.model_arithmetic(tmp_path)
    mode = {"pp": 16, "tg": 4, "batches": [1, 64], "prefill_pp": 32}
    pt = lambda b, pp, dec, pre: {"batch": b, "pp": pp, "decode_tokens_per_s": dec, "prefill_tokens_per_s": pre,
                                  "itl_ms_p50": 1e3 / dec, "itl_ms_min": 0.8e3 / dec, "ttft_ms_p50": 1e3 * pp / pre,
                                  "flags": {"precision": "bf16", "kernels": "avx2"}}
    latent = {"points": [pt(1, 16, 10.0, 100.0), pt(64, 16, 200.0, 300.0)], "prefill_points": [pt(1, 32, 10.0, 400.0)],
              "default_flags": {"precision": "bf16", "kernels": "avx2"},
              "f32": {"points": [pt(64, 16, 150.0, 200.0)], "prefill_points": [pt(1, 32, 9.0, 300.0)]},
              "onednn": {"points": [pt(64, 16, 50.0, 1.0), pt(64, 16, 250.0, 1.0)], "prefill_points": []},
              "w8a8": {"points": [pt(64, 16, 400.0, 1.0)], "prefill_points": [pt(1, 32, 20.0, 500.0)]},
              "fp8_checkpoint": {"checkpoint": "m-fp8", "points": [pt(64, 16, 300.0, 1.0)],
                                 "prefill_points": [pt(1, 32, 15.0, 450.0)]},
              "sampled": {"points": [pt(64, 16, 180.0, 1.0)]}}
    llama = {"bench": {"prefill_tokens_per_s": 800.0, "decode_tokens_per_s": 12.0},
             "batched_bench": {"points": [{"batch": 64, "decode_tokens_per_s": 100.0, "prefill_tokens_per_s": 1.0}]},
             "q8_0": {"bench": {"error": "exit -6: GGML_ASSERT(*cur_backend_id != -1)"},
                      "batched_bench": {"points": [], "error": "exit -6: GGML_ASSERT"}}}
    cb = ({"ok": True, "batch": 64, "generated_tokens_per_s": 80.0} if cb_ok
          else {"ok": False, "batch": 64, "error": "Error in generation loop: index_copy_(): shapes (RuntimeError: x)"})
    hf = {"points": [{"batch": 64, "decode_tokens_per_s": 40.0, "prefill_tokens_per_s": 1.0}], "continuous_batching": cb}
    machine = {"read_gb_s_used": 50.0, "read_gb_s_source": "test",
               "bf16_peak": {"gflops": 100.0, "library": "torch", "shape": "m 1, n 2, k 3",
                             "candidates": [{"library": "torch", "m": 1, "n": 2, "k": 3, "gflops": 100.0}]}}
    res = {"workload": mode, "systems": {"latent": latent, "llama.cpp": llama, "transformers": hf},
           "model_arithmetic": arith, "long_context": {}}
    res["roofline"] = compare.roofline(arith, machine, latent, llama["bench"], hf, mode, llama["batched_bench"])
    res["ratios"] = compare.compute_ratios(res)
    res.update({"invocation": "bench/compare --quick", "mode": "quick", "finished": "now", "elapsed_s": 1.0,
                "commit": {"head": "abc", "dirty": False}, "commands": [],
                "checkpoint": {"description": "test", "num_parameters": 1e9, "bytes": 2**30},
                "machine": {"cpu": "cpu", "cores": 2, "mem_gib": 1, "load_avg_start": [1, 1, 1],
                            "load_avg_end": [2, 2, 2], "figures": machine}})
    return res


def test_ratios_headline_is_the_default_and_peer_failures_are_recorded(tmp_path):
    res = made_up_run(tmp_path, cb_ok=False)
    r = res["ratios"]
    headline = [n for n, x in r.items() if x["headline"]]
    assert headline[:5] == ["decode_b64_vs_llamacpp", "prefill_512_vs_llamacpp", "decode_b64_vs_llamacpp_q8_0",
                            "prefill_512_vs_llamacpp_q8_0", "decode_b64_vs_transformers"]
    assert not any(r[n]["headline"] for n in ("decode_b64_vs_llamacpp_f32", "decode_b64_vs_llamacpp_onednn",
                                              "decode_b64_w8a8_vs_llamacpp_q8_0"))
    assert r["decode_b64_vs_llamacpp"]["value"] == 2.0 and r["prefill_512_vs_llamacpp"]["value"] == 0.5
    assert r["decode_b64_vs_llamacpp_onednn"]["value"] == 2.5  # warm: the second point
    assert r["decode_b64_vs_llamacpp_f32"]["value"] == 1.5
    # llama.cpp's Q8_0 abort is the peer's failure: no value, the reason says so.
    assert r["decode_b64_vs_llamacpp_q8_0"]["value"] is None
    assert "GGML_ASSERT" in r["decode_b64_vs_llamacpp_q8_0"]["reason"]
    # transformers: generate_batch failed, so its best is generate; the failure is kept.
    t = r["decode_b64_vs_transformers"]
    assert t["value"] == 5.0 and t["target"] == ">= 5.0" and t["inputs"]["transformers_api"] == "generate"
    assert "index_copy_" in t["inputs"]["transformers_failed"]["generate_batch"]
    # Roofline at 64: the step time is 64 / 200 t/s; the bound is the larger time.
    db = res["roofline"]["decode_batch"]
    assert db["measured_s"] == pytest.approx(0.32)
    assert db["bound_s"] == pytest.approx(max(db["bytes"] / 50e9, db["flops"] / 100e9))
    assert r["decode_b64_roofline_fraction"]["value"] == pytest.approx(db["bound_s"] / 0.32, rel=1e-3)
    prefill_gflops = compare.prefill_flops(res["model_arithmetic"], 32) / (32 / 400.0) / 1e9
    assert r["prefill_512_fraction_of_bf16_peak"]["value"] == pytest.approx(prefill_gflops / 100, rel=1e-3)
    # By parts: the sum of each part's own bound; 2x llama.cpp's 100 t/s at 64 is a 0.32 s step.
    pr = db["parts_roofline"]
    assert pr["bound_s"] == pytest.approx(sum(pr["by_part_s"].values()))
    assert pr["bound_s"] >= db["bound_s"] and pr["fraction"] == pytest.approx(pr["bound_s"] / 0.32)
    assert pr["step_s_at_2x_llamacpp"] == pytest.approx(0.32)
    # Batch-1: the median step in the table, the fastest step (best against read_bw's best) apart.
    lat1 = res["roofline"]["systems"]["latent"]
    assert lat1["decode_best_step_ms"] == pytest.approx(80.0)
    assert lat1["decode_best_fraction_of_read_bw"] == pytest.approx(lat1["decode_fraction_of_read_bw"] / 0.8)
    assert "decode_best_step_ms" not in res["roofline"]["systems"]["llama.cpp"]
    md = compare.markdown(res)
    assert "best against best" in md and "By parts" in md and "2x llama.cpp's decode rate" in md
    assert "### Ratios: latent's default" in md and "### Opt-in variants (not the default)" in md
    assert md.index("decode_b64_vs_llamacpp_f32") > md.index("### Opt-in variants")
    assert "recorded as the peer's failure" in md and "of the roofline" in md


def test_transformers_best_takes_generate_batch_when_it_runs_faster(tmp_path):
    t = made_up_run(tmp_path, cb_ok=True)["ratios"]["decode_b64_vs_transformers"]
    assert t["inputs"]["transformers_api"] == "generate_batch" and t["value"] == 2.5


def test_onednn_rows_skipped_where_latent_ignores_it(tmp_path):
    res = made_up_run(tmp_path, cb_ok=False)
    res["systems"]["latent"]["onednn"] = {"skipped": "latent ignores LATENT_GEMM=onednn on this CPU (avx2)"}
    r = compare.compute_ratios(res)["decode_b64_vs_llamacpp_onednn"]
    assert r["value"] is None and "ignores LATENT_GEMM=onednn" in r["reason"] and not r["headline"]
    res["ratios"] = compare.compute_ratios(res)
    assert "`LATENT_GEMM=onednn`: not run: latent ignores" in compare.markdown(res)


def test_fp8_checkpoint_rows_are_against_q8_0_and_not_headline(tmp_path):
    res = made_up_run(tmp_path, cb_ok=False)
    r = res["ratios"]
    for name in ("decode_b64_fp8_ckpt_vs_llamacpp_q8_0", "prefill_512_fp8_ckpt_vs_llamacpp_q8_0"):
        assert not r[name]["headline"] and r[name]["target"] == "none"
        assert r[name]["value"] is None and "GGML_ASSERT" in r[name]["reason"]  # the peer's abort
    res["systems"]["llama.cpp"]["q8_0"] = {
        "bench": {"prefill_tokens_per_s": 300.0},
        "batched_bench": {"points": [{"batch": 64, "decode_tokens_per_s": 150.0, "prefill_tokens_per_s": 1.0}]}}
    r = compare.compute_ratios(res)
    assert r["decode_b64_fp8_ckpt_vs_llamacpp_q8_0"]["value"] == 2.0
    assert r["prefill_512_fp8_ckpt_vs_llamacpp_q8_0"]["value"] == 1.5
    res["ratios"] = r
    md = compare.markdown(res)
    assert "The fp8 copy of the checkpoint (`m-fp8`" in md and "batch 64 decode 300 t/s" in md
    assert md.index("decode_b64_fp8_ckpt_vs_llamacpp_q8_0") > md.index("### Opt-in variants")


def test_sampled_decode_is_a_fraction_of_greedy_and_not_headline(tmp_path):
    res = made_up_run(tmp_path, cb_ok=True)
    r = res["ratios"]["decode_b64_sampled_fraction_of_greedy"]
    assert r["value"] == 0.9 and r["target"] == "none" and not r["headline"]
    assert r["inputs"] == {"sampled": 180.0, "greedy": 200.0}
    md = compare.markdown(res)
    assert "Sampled at temperature 1" in md and "batch 64 decode 180 t/s" in md
    assert md.index("decode_b64_sampled_fraction_of_greedy") > md.index("### Opt-in variants")
    del res["systems"]["latent"]["sampled"]
    r = compare.compute_ratios(res)["decode_b64_sampled_fraction_of_greedy"]
    assert r["value"] is None and "--temperature 1" in r["reason"]
