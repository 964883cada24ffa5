"""`latent info` against transformers: parameter count (num_parameters()) and the MLA cache row
(kv_lora_rank + qk_rope_head_dim values per layer and token)."""

from __future__ import annotations

import json

import pytest

from conftest import load_reference, run_latent

PRESETS = ["deepseek_v2_lite", "deepseek_v2", "deepseek_v3", "deepseek_v3_no_interleave", "kimi_k2"]
# DeepSeek V3's real attention dims on a tiny body: 576-value rows, 1152 bytes in bf16.
V3_ATTENTION_DIMS = {"kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                     "v_head_dim": 128, "num_attention_heads": 2}


def info(model_dir, *extra):
    return json.loads(run_latent("info", "--model", str(model_dir), "--json", *extra).stdout)


def bf16_products_of(kernels):
    """What runs bf16 products in the kernel table `kernels` (BestKernelsName, without a
    "+onednn") on this CPU: TDPBF16PS tiles, vdpbf16ps where the CPU has AVX512-BF16, else f32."""
    with open("/proc/cpuinfo") as f:
        bf16_dot = "avx512_bf16" in f.read().split()
    vector = "vdpbf16ps" if bf16_dot else "f32 fma"
    return {"avx512-amx": "amx", "avx512-packed": vector, "avx512-bf16dot": vector,
            "avx512": vector, "avx2": "f32 fma", "avx2-packed": "f32 fma", "ref": "f32 fma"}[kernels]


VARIANTS = [(p, ()) for p in PRESETS] + [
    ("deepseek_v3", ("--dtype", "bfloat16")),
    ("deepseek_v3", ("--fp8", "--fp8-block", "16")),
    ("deepseek_v3", ("--fp8", "--fp8-block", "32")),
    ("deepseek_v2", ("--max-shard-size", "40KB")),
]


@pytest.mark.parametrize("preset,extra", VARIANTS, ids=lambda v: str(v))
def test_parameter_count_and_cache_rows(tiny_models, tmp_path, preset, extra):
    model_dir = tiny_models.get(preset, *extra)
    reference = load_reference(model_dir, tmp_path)
    config = reference.config
    got = info(model_dir)

    assert got["num_parameters"] == reference.num_parameters()
    assert got["num_layers"] == config.num_hidden_layers
    row_values = config.kv_lora_rank + config.qk_rope_head_dim
    dtype_bytes = 4 if got["cache_dtype"] == "f32" else 2
    assert got["cache_dtype"] == ("f32" if "--dtype" not in extra and "--fp8" not in extra else "bf16")
    for layer in got["cache_layers"]:
        assert [r["name"] for r in layer["rows"]] == ["mla.latent"]
        assert layer["rows"][0]["values"] == row_values
        assert layer["rows"][0]["bytes_per_token"] == row_values * dtype_bytes
    assert got["cache_bytes_per_token"] == config.num_hidden_layers * row_values * dtype_bytes
    if "--fp8" in extra:
        block = int(extra[extra.index("--fp8-block") + 1])
        assert "F8_E4M3" in got["dtypes"]
        assert got["quantization"]["weight_block_size"] == [block, block]
    # --precision auto: bf16 compute for bf16 and fp8 checkpoints, f32 for f32 ones.
    low_precision = "--dtype" in extra or "--fp8" in extra
    assert got["precision"]["requested"] == "auto"
    assert got["precision"]["active"] == ("bf16" if low_precision else "f32")
    assert info(model_dir, "--precision", "f32")["precision"]["active"] == "f32"
    # What runs the bf16 products follows the kernels; f32 precision has none.
    products = got["precision"]["bf16_products"]
    if low_precision:
        kernels = got["precision"]["kernels"]
        assert products == ("onednn" if kernels.endswith("+onednn")
                            else bf16_products_of(kernels)), got["precision"]
    else:
        assert products == "none"
    assert info(model_dir, "--precision", "f32")["precision"]["bf16_products"] == "none"
    # fp8 weights: their packed codes widened to bf16 where the packed or AMX kernels run and the
    # CPU has AVX512-BF16 and VBMI, for TDPBF16PS on AMX where the scale blocks hold whole tiles of
    # 32 k, else for vdpbf16ps; none without fp8 weights or in f32 precision.
    fp8 = got["precision"]["fp8_products"]
    if "--fp8" in extra:
        with open("/proc/cpuinfo") as f:
            flags = f.read().split()
        kernels = got["precision"]["kernels"]
        fp8_packed = "avx512_bf16" in flags and "avx512vbmi" in flags and \
            kernels in ("avx512-packed", "avx512-amx")
        expected = "f32 fma"
        if fp8_packed:
            expected = "amx" if kernels == "avx512-amx" and block % 32 == 0 else "vdpbf16ps"
        assert fp8 == expected, got["precision"]
    else:
        assert fp8 == "none"
    assert info(model_dir, "--precision", "f32")["precision"]["fp8_products"] == "none"


def test_sharded_checkpoint_really_has_shards(tiny_models):
    model_dir = tiny_models.get("deepseek_v2", "--max-shard-size", "40KB")
    assert (model_dir / "model.safetensors.index.json").exists()
    assert len(list(model_dir.glob("model-*.safetensors"))) > 1


def test_deepseek_v3_dims_cache_576_values(tiny_models, tmp_path):
    model_dir = tiny_models.get("deepseek_v3", "--dtype", "bfloat16", config=V3_ATTENTION_DIMS)
    got = info(model_dir)
    assert got["num_parameters"] == load_reference(model_dir, tmp_path).num_parameters()
    assert got["cache_dtype"] == "bf16"
    rows = [layer["rows"][0] for layer in got["cache_layers"]]
    assert all(r["values"] == 576 and r["bytes_per_token"] == 1152 for r in rows)
    # DeepSeek's fp8 latent layout: 512 e4m3 + 4 f32 scales + 64 bf16 rope values.
    fp8 = info(model_dir, "--cache-dtype", "fp8")
    assert all(layer["rows"][0]["bytes_per_token"] == 656 for layer in fp8["cache_layers"])


def test_cache_blocks_default_to_the_engines(tiny_models, tmp_path):
    # info sizes the cache as serve and generate run it: 64-token blocks unless --block-tokens.
    model_dir = tiny_models.get("deepseek_v3")
    got = info(model_dir)
    assert got["cache_block"]["tokens"] == 64
    lines = tmp_path / "lines.jsonl"
    lines.write_text('{"ids": [1, 2], "max_tokens": 1}\n')
    ran = run_latent("generate", "--model", str(model_dir), "--prompts", str(lines))
    summary = json.loads(ran.stderr.split("latent: summary ", 1)[1].splitlines()[0])
    assert summary["block_tokens"] == got["cache_block"]["tokens"]
    config_dir = tmp_path / "config-only"
    config_dir.mkdir()
    (config_dir / "config.json").write_text((model_dir / "config.json").read_text())
    assert info(config_dir)["cache_block"] == got["cache_block"]  # tokens and bytes
    assert info(model_dir, "--block-tokens", "16")["cache_block"]["tokens"] == 16


def test_attention_kernels_follow_the_cpu_rows_and_precision(tiny_models):
    """`latent info` names what runs the attention's products. DeepSeek V3.2's dims (a latent of
    512 and value heads of 128: whole tiles; index keys of 128) in bf16: the absorbed decode over
    bf16 rows, the expanded prefill and the DSA indexer on what runs the linears' bf16 products
    (TDPBF16PS on AMX, else vdpbf16ps, else f32); the prefill tokens that attend DSA-selected
    positions take f32 products. Over fp8 rows the decode stays on tiles where it ran on them
    (each block decoded to bf16) and takes f32 products elsewhere; the indexer over fp8 keys takes
    f32 products. f32 precision takes f32 products everywhere; --quantize int8 turns kv_b to int8
    (f32 activations) but keeps the indexer's query projection. The text output says the same.
    (The expected names read this CPU's flags: not for the emulated build's smaller CPUs.)"""
    model_dir = tiny_models.get("deepseek_v32", "--dtype", "bfloat16",
                                config={**V3_ATTENTION_DIMS, "index_head_dim": 128})
    got = info(model_dir)
    products = bf16_products_of(got["precision"]["kernels"].removesuffix("+onednn"))
    f32 = "f32 fma"
    assert got["attention_kernels"] == {"decode": products, "prefill": products,
                                        "prefill_selected": f32, "indexer": products}
    fp8 = info(model_dir, "--cache-dtype", "fp8")["attention_kernels"]
    assert fp8 == {"decode": "amx" if products == "amx" else f32, "prefill": products,
                   "prefill_selected": f32, "indexer": f32}
    assert info(model_dir, "--precision", "f32")["attention_kernels"] == {
        "decode": f32, "prefill": f32, "prefill_selected": f32, "indexer": f32}
    assert info(model_dir, "--quantize", "int8")["attention_kernels"] == {
        "decode": f32, "prefill": f32, "prefill_selected": f32, "indexer": products}
    out = run_latent("info", "--model", str(model_dir), "--cache-dtype", "fp8").stdout
    assert (f"attention:        decode on {fp8['decode']}, prefill on {products}, DSA-selected "
            f"prefill on {f32}, DSA indexer on {f32} (over fp8 rows)") in out


def test_attention_kernels_per_layer_kind(tiny_models):
    """Each layer is asked with its own calls: LongCat-Flash's two latents per layer (rows named
    mla.latent.0 and .1), and dots3_note's layers of two shapes: the DSA layers here with a latent
    and value heads of whole 16-column tiles, the sliding-window ones (their own shape: a latent of
    26, value heads of 9) not, so on AMX the tiles take the first kind only and the vdpbf16ps
    kernels the second; elsewhere the layers agree. The sliding-window layers' prefill runs on
    the prefill kernel (a first position per query); DSA-selected prefill tokens take f32
    products, and only the DSA layers name them."""
    longcat = info(tiny_models.get("longcat_flash", "--dtype", "bfloat16"))
    assert set(longcat["attention_kernels"]) == {"decode", "prefill"}
    model_dir = tiny_models.get("dots3_note", "--dtype", "bfloat16", config={
        "kv_lora_rank": 32, "v_head_dim": 16, "qk_nope_head_dim": 16, "head_dim": 24})
    got = info(model_dir)
    products = bf16_products_of(got["precision"]["kernels"].removesuffix("+onednn"))
    mixed = "amx on 3 layers, vdpbf16ps on 3 layers" if products == "amx" else products
    assert got["attention_kernels"] == {"decode": mixed, "prefill": mixed,
                                        "prefill_selected": "f32 fma", "indexer": products}


def test_text_output_names_the_essentials(tiny_models):
    out = run_latent("info", "--model", str(tiny_models.get("kimi_k2"))).stdout
    assert "deepseek_v3 (model_type kimi_k2)" in out
    assert "mla.latent" in out and "parameters:" in out
    assert "precision:        f32 (--precision auto; kernels " in out


@pytest.mark.parametrize("mutation,message", [
    (lambda c: c.update(model_type="llama"), "unsupported model_type 'llama' (supported: deepseek_v2, deepseek_v3, kimi_k2, deepseek_v32, glm_moe_dsa, youtu, glm4_moe_lite, axk1, mistral4, minicpm3, longcat_flash, axk2, hy_v4, mistral_large4_text, dots3_note_text, kimi_linear, bailing_hybrid, glm5_next_text)"),
    (lambda c: c.pop("kv_lora_rank"), "missing required field 'kv_lora_rank'"),
    (lambda c: c.update(num_experts_per_tok=99), "num_experts_per_tok (99) exceeds n_routed_experts"),
    (lambda c: c.update(hidden_size=62), "has shape"),
])
def test_bad_checkpoint_gets_a_clear_error(tiny_models, tmp_path, mutation, message):
    import shutil

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_models.get("deepseek_v3"), model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    mutation(config)
    (model_dir / "config.json").write_text(json.dumps(config))
    proc = run_latent("info", "--model", str(model_dir), check=False)
    assert proc.returncode == 2
    assert message in proc.stderr, proc.stderr
    assert proc.stderr.startswith("latent: error: ")
