"""`latent info` on a directory holding only config.json: the real configs of DeepSeek V3, Kimi K2,
GLM-5 and Kimi Linear 48B (tests/data/configs, sources in its README.md) against transformers'
parameter count, the published sizes, hand-computed cache and expert-parallel bytes; and, on tiny
checkpoints, config-only figures against the checkpoint's own (the same tensor list and rows)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from conftest import REPO, run_latent

CONFIGS = REPO / "tests" / "data" / "configs"

# Published total sizes (model cards; MTP layers excluded, as latent and transformers count) and
# how far the count may be from the rounded figure.
PUBLISHED = {
    "deepseek_v3": (671e9, 0.001),      # "671B total parameters" (DeepSeek-V3 model card)
    "kimi_k2": (1.03e12, 0.005),        # "1T total" / 1.03T on the hub (Kimi-K2-Instruct)
    "glm_5": (744e9, 0.001),            # "744B parameters (40B active)" (GLM-5 model card)
    "kimi_linear_48b": (48e9, 0.03),    # "48B total" in the name; the hub lists 49.1B
}


def info(model_dir, *extra):
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


def config_only(model_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / f"{model_dir.name}-config"
    out.mkdir()
    shutil.copy(model_dir / "config.json", out / "config.json")
    return out


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_equals_transformers_and_the_published_size(name):
    import torch
    import transformers

    got = info(CONFIGS / name)
    assert got["source"] == "config.json"
    published, tolerance = PUBLISHED[name]
    assert abs(got["num_parameters"] - published) <= tolerance * published, got["num_parameters"]
    # transformers' own count, on a model built on the meta device (no memory).
    config = json.loads((CONFIGS / name / "config.json").read_text())
    config.pop("quantization_config", None)
    model_type = config.pop("model_type")
    model_type = "deepseek_v3" if model_type == "kimi_k2" else model_type  # no kimi_k2 class
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(model_type, **config))
    assert got["num_parameters"] == model.num_parameters()


# Per token: MLA latent kv_lora_rank + qk_rope_head_dim = 576 values, in bf16 2 bytes each, in
# DeepSeek's fp8 layout 512 e4m3 + 4 f32 scales + 64 bf16 = 656 bytes; the DSA index key 128
# values (256 bytes bf16, 128 + 4 fp8).
CACHE_PER_TOKEN = {
    "deepseek_v3": {"bf16": 61 * 576 * 2, "fp8": 61 * 656},
    "kimi_k2": {"bf16": 61 * 576 * 2, "fp8": 61 * 656},
    "glm_5": {"bf16": 78 * (576 * 2 + 128 * 2), "fp8": 78 * (656 + 132)},
    "kimi_linear_48b": {"bf16": 7 * 576 * 2, "fp8": 7 * 656},  # 7 MLA layers of 27
}


@pytest.mark.parametrize("name", sorted(CACHE_PER_TOKEN))
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_cache_bytes_per_token_by_hand(name, dtype):
    got = info(CONFIGS / name, "--cache-dtype", dtype)
    assert got["cache_dtype"] == dtype
    assert got["cache_bytes_per_token"] == CACHE_PER_TOKEN[name][dtype]
    config = json.loads((CONFIGS / name / "config.json").read_text())
    context = config.get("max_position_embeddings", config.get("model_max_length"))
    # Once, with the other resolved values, as the checkpoint form reports it.
    assert got["config"]["max_position_embeddings"] == context
    assert "max_position_embeddings" not in got
    at = got["cache_at_context"]
    assert at["context"] == context and at["sequences"] == 1  # the defaults
    # Whole 64-token blocks (the default); these contexts are multiples of 64.
    assert at["bytes"] == context * CACHE_PER_TOKEN[name][dtype] + got["cache_bytes_per_sequence"]


def test_kimi_linear_at_128k_against_an_all_mla_model():
    got = info(CONFIGS / "kimi_linear_48b", "--context", "131072", "--sequences", "4")
    kinds = got["layer_kinds"]
    assert (kinds["mla"], kinds["linear_attention"]) == (7, 20)
    # Per KDA layer, f32 (ops/kda.h): conv [K-1, 3 H dk] = 3 x 3 x 4096, state H x dk x dv =
    # 32 x 128 x 128, the chunk's rows 64 x H x (4 dk + 65).
    state = 20 * 4 * (3 * 3 * 4096 + 32 * 128 * 128 + 64 * 32 * (4 * 128 + 65))
    assert got["cache_bytes_per_sequence"] == state == 139_427_840
    at = got["cache_at_context"]
    assert at["bytes"] == 4 * (131072 * 7 * 1152 + state)
    assert at["state_bytes"] == 4 * state
    # An all-MLA model of the same 27 layers caches the 576-value latent in every layer.
    mla = got["all_attention_equivalent"]
    assert mla["rows"] == ["mla.latent"]
    assert mla["cache_bytes_per_token"] == 27 * 1152
    assert mla["cache_at_context"]["bytes"] == 4 * 131072 * 27 * 1152
    assert at["bytes"] < 0.3 * mla["cache_at_context"]["bytes"]  # 7/27 of the rows, plus state
    # Models without state have no such comparison.
    assert "all_attention_equivalent" not in info(CONFIGS / "deepseek_v3")


# Routed experts: (MoE layers, experts, hidden, moe_intermediate).
EXPERTS = {
    "deepseek_v3": (58, 256, 7168, 2048),
    "kimi_k2": (60, 384, 7168, 2048),
    "glm_5": (75, 256, 6144, 2048),
}


def expert_bytes(hidden: int, inter: int) -> dict[str, int]:
    """One routed expert's gate, up [I, D] and down [D, I], by hand."""
    elements = 3 * inter * hidden
    scales = 3 * math.ceil(inter / 128) * math.ceil(hidden / 128)  # f32, 128 x 128 blocks
    rows = 2 * inter + hidden
    return {"bf16": 2 * elements, "fp8": elements + 4 * scales, "int8": elements + 4 * rows}


@pytest.mark.parametrize("name", sorted(EXPERTS))
@pytest.mark.parametrize("ranks", [2, 8])
def test_bytes_per_rank_under_expert_parallelism(name, ranks):
    whole = info(CONFIGS / name)
    got = info(CONFIGS / name, "--ranks", str(ranks))
    layers, experts, hidden, inter = EXPERTS[name]
    one = expert_bytes(hidden, inter)
    assert [r["rank"] for r in got["ranks"]] == list(range(ranks))
    for r in got["ranks"]:
        begin, end = r["routed_experts"]
        assert (begin, end) == (r["rank"] * experts // ranks, (r["rank"] + 1) * experts // ranks)
        others = experts - (end - begin)
        for form in ("bf16", "fp8", "int8"):
            # Everything but the other ranks' routed experts.
            assert r["weights"][form]["bytes"] == whole["weights"][form]["bytes"] - layers * others * one[form]
        assert r["num_parameters"] == whole["num_parameters"] - layers * others * 3 * hidden * inter
        # The cache is on every rank, whole.
        assert r["cache_bytes_per_token"] == whole["cache_bytes_per_token"]
        assert r["cache_bytes_at_context"] == whole["cache_at_context"]["bytes"]


def test_deepseek_v3_fp8_bytes_per_rank_fall_as_the_experts_share():
    """The figures of docs/scale-out.md: 654.1 GB of routed experts and 19.3 GB on every rank (fp8)."""
    got = info(CONFIGS / "deepseek_v3", "--ranks", "8")
    total = got["weights"]["fp8"]["bytes"]
    routed = 58 * 256 * expert_bytes(7168, 2048)["fp8"]
    assert routed == 654_068_416_512
    assert got["ranks"][0]["weights"]["fp8"]["bytes"] == total - routed + routed // 8


def test_text_output(tmp_path):
    out = run_latent("info", "--model", str(CONFIGS / "kimi_linear_48b"), "--context", "131072",
                     "--ranks", "2").stdout
    assert "config.json only" in out
    assert "parameters:       49,122,675,072" in out
    assert "layers 3, 7, 11, 15, 19, 23, 26: mla.latent 576 values, 1,152 bytes/token" in out
    assert "all-MLA equivalent" in out
    assert "rank 1: experts [128, 256)" in out
    # Hybrid models run over ranks (each rank holds its own state copy): no refusal note.
    assert "refuses" not in out


@pytest.mark.parametrize("extra,form", [(("--dtype", "bfloat16"), "bf16"),
                                        (("--fp8", "--fp8-block", "16"), "fp8")])
def test_config_only_equals_the_checkpoint(tiny_models, tmp_path, extra, form):
    """The same tensor list and rows with and without weights: on tiny DeepSeek V3 checkpoints (whose
    routers and score biases transformers stores in f32, as the config-only form assumes), every
    figure equals the checkpoint's, per rank and under --quantize int8 too."""
    model_dir = tiny_models.get("deepseek_v3", *extra)
    ckpt = info(model_dir, "--ranks", "2")
    cfg = info(config_only(model_dir, tmp_path), "--ranks", "2")
    assert cfg["num_parameters"] == ckpt["num_parameters"]
    assert cfg["weights"][form]["bytes"] == ckpt["weights"]["bytes"]
    assert cfg["weights"][form]["checkpoint_bytes"] == ckpt["weights"]["checkpoint_bytes"]
    for c, k in zip(cfg["ranks"], ckpt["ranks"]):
        assert c["routed_experts"] == k["routed_experts"]
        assert c["weights"][form]["bytes"] == k["weight_bytes"]
    int8 = info(model_dir, "--quantize", "int8")
    if form == "bf16":  # the config-only int8 figure converts the bf16 checkpoint
        assert cfg["weights"]["int8"]["bytes"] == int8["weights"]["bytes"]
    for key in ("cache_layers", "cache_bytes_per_token", "cache_bytes_per_sequence", "cache_block",
                "cache_at_context"):
        assert cfg[key] == ckpt[key], key


@pytest.mark.parametrize("preset", ["kimi_linear", "mistral_large4"])
def test_config_only_lists_what_the_checkpoint_holds(tiny_models, tmp_path, preset):
    """Hybrid state, KV sharing and a vision-language wrapper: parameters and every
    cache row equal the checkpoint's."""
    model_dir = tiny_models.get(preset)
    ckpt = info(model_dir)
    cfg = info(config_only(model_dir, tmp_path))
    assert cfg["num_parameters"] == ckpt["num_parameters"]
    for key in ("cache_layers", "cache_bytes_per_token", "cache_bytes_per_sequence", "cache_block",
                "cache_at_context"):
        assert cfg[key] == ckpt[key], key


@pytest.mark.parametrize("preset", ["mistral4_vl", "mistral_large4"])
def test_config_only_fp8_wrapper_states_its_blocks(tiny_models, tmp_path, preset):
    """A wrapper's quantization_config is at its top level (save_pretrained's place): the
    config-only figures use its blocks, not DeepSeek's 128 x 128 default."""
    model_dir = tiny_models.get(preset, "--fp8", "--fp8-block", "16")
    ckpt = info(model_dir)
    cfg = info(config_only(model_dir, tmp_path))
    assert ckpt["quantization"]["weight_block_size"] == [16, 16]
    assert cfg["weights"]["fp8"]["block"] == [16, 16]


V3 = json.loads((CONFIGS / "deepseek_v3" / "config.json").read_text())


@pytest.mark.parametrize("mutation,message", [
    (lambda c: c.pop("kv_lora_rank"), "missing required field 'kv_lora_rank'"),
    (lambda c: c.update(hidden_size=0), "field 'hidden_size' must be positive, got 0"),
    (lambda c: c.update(num_attention_heads=-128), "field 'num_attention_heads' must be positive, got -128"),
    (lambda c: c.update(vocab_size=10**12), "field 'vocab_size' is 1000000000000, larger than any model"),
    (lambda c: c.update(moe_intermediate_size="2048"), "field 'moe_intermediate_size' must be an integer"),
    (lambda c: c.update(num_experts_per_tok=999), "num_experts_per_tok (999) exceeds n_routed_experts (256)"),
    (lambda c: c.update(n_routed_experts=2**30), "n_routed_experts (1073741824) x MoE layers (58) is more expert MLPs than any model has"),
    (lambda c: c.update(hidden_size=2**31 - 1, vocab_size=2**31 - 1),
     "the sizes imply more than 2^58 weights (the largest tensor so far, 'model.embed_tokens.weight'"),
])
def test_bad_config_gets_a_clear_error(tmp_path, mutation, message):
    config = json.loads(json.dumps(V3))
    mutation(config)
    (tmp_path / "config.json").write_text(json.dumps(config))
    proc = run_latent("info", "--model", str(tmp_path), check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("latent: error: ")
    assert message in proc.stderr, proc.stderr


def test_bad_linear_attention_sizes_get_a_clear_error(tmp_path):
    config = json.loads((CONFIGS / "kimi_linear_48b" / "config.json").read_text())
    config["linear_attn_config"]["head_dim"] = 10**6
    (tmp_path / "config.json").write_text(json.dumps(config))
    proc = run_latent("info", "--model", str(tmp_path), check=False)
    assert proc.returncode == 2
    assert "linear attention head_dim (1000000), num_heads (32) and conv kernel taps (4) " \
           "must each be at most 4096" in proc.stderr, proc.stderr
    config["linear_attn_config"]["kda_layers"][0] = 0
    config["linear_attn_config"]["head_dim"] = 128
    (tmp_path / "config.json").write_text(json.dumps(config))
    proc = run_latent("info", "--model", str(tmp_path), check=False)
    assert proc.returncode == 2
    assert "linear_attn_config 'kda_layers' entry 0 is not a layer in 1..27" in proc.stderr


def test_a_directory_with_stray_shards_is_read_as_a_checkpoint(tmp_path):
    """Weights that are there but unreadable are an error, not a silent config-only description."""
    (tmp_path / "config.json").write_text(json.dumps(V3))
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"")
    proc = run_latent("info", "--model", str(tmp_path), check=False)
    assert proc.returncode == 2
    assert "no model.safetensors or model.safetensors.index.json found" in proc.stderr
