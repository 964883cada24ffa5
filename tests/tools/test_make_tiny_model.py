"""Tests for tools/make_tiny_model.py.

Run: cd /work/main && .venv/bin/python -m pytest -q tests/tools/test_make_tiny_model.py

Checkpoints are made once per session: every preset by running the tool as a subprocess (all
started together: each run is dominated by importing torch/transformers), the dtype / fp8 /
shard / tokenizer variants through main() in this process meanwhile. Then they are checked
with transformers and safetensors.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "make_tiny_model.py"
sys.path.insert(0, str(REPO / "tools"))
import make_tiny_model as mtm  # noqa: E402

TOKENIZERS = Path(os.environ.get("LATENT_TOKENIZERS_DIR", "/work/shared/tokenizers"))
DS_V3_TOKENIZER = TOKENIZERS / "deepseek_v3"
PROMPT_LEN = 16
FP8_TEST_BLOCK = 24  # non-default, non-power-of-two block: partial blocks on every dim

# --------------------------------------------------------------------------------------------
# Running the tool
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    out: Path
    returncode: int
    stdout: str
    stderr: str

    def check(self) -> "Run":
        assert self.returncode == 0, f"tool failed ({self.returncode}):\n{self.stderr}"
        return self

    @property
    def summary(self) -> dict:
        self.check()
        lines = self.stdout.strip().splitlines()
        assert len(lines) == 1, f"stdout must be one JSON line, got: {self.stdout!r}"
        return json.loads(lines[0])

    @property
    def config(self) -> dict:
        return json.loads((self.out / "config.json").read_text())


def make_synthetic_tokenizer(path: Path) -> Path:
    """300 base tokens + 2 added specials at ids 300/301: needs vocab 302 > every preset's."""
    path.mkdir(parents=True)
    added = [
        {"id": 300, "content": "<bos>", "special": True, "lstrip": False, "rstrip": False,
         "normalized": False, "single_word": False},
        {"id": 301, "content": "<eos>", "special": True, "lstrip": False, "rstrip": False,
         "normalized": False, "single_word": False},
    ]
    tok = {
        "version": "1.0",
        "added_tokens": added,
        "model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(300)}, "unk_token": "w0"},
    }
    (path / "tokenizer.json").write_text(json.dumps(tok))
    tok_cfg = {"bos_token": {"__type": "AddedToken", "content": "<bos>"}, "eos_token": "<eos>"}
    (path / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    (path / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<bos>", "eos_token": "<eos>"}))
    return path


SYNTH_OVERRIDES = {"num_hidden_layers": 2, "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}}


# The command line as a user runs it (a subprocess: argument parsing, the one JSON line on
# stdout, the exit code) for one preset and one usage error; every other preset goes through
# mtm.main() in this process, the same code after parsing, without a torch import each (a run
# of the tool is about 10 s of CPU, nearly all of it imports).
CLI_PRESET = "deepseek_v3"


def subprocess_jobs(synthetic_tok: Path) -> dict[str, list[str]]:
    """One preset through the real CLI, plus one usage error (exit code 2)."""
    jobs = {CLI_PRESET: ["--preset", CLI_PRESET]}
    jobs["err_vocab_too_small"] = [
        "--preset", "deepseek_v3", "--tokenizer", str(synthetic_tok), "--config-json", '{"vocab_size": 290}',
    ]
    return jobs


def in_process_jobs(synthetic_tok: Path) -> dict[str, list[str]]:
    """Every other preset and the variants, through mtm.main() in this process (saves a torch
    import each)."""
    jobs = {name: ["--preset", name] for name in mtm.PRESETS if name != CLI_PRESET}
    jobs |= {
        "v3_bf16": ["--preset", "deepseek_v3", "--dtype", "bfloat16"],
        "v3_fp8_f32": ["--preset", "deepseek_v3", "--fp8", "--dtype", "float32", "--fp8-block", str(FP8_TEST_BLOCK)],
        "kimi_fp8_sharded": ["--preset", "kimi_k2", "--fp8", "--max-shard-size", "20KB"],
        "v3_synthetic_tok": [
            "--preset", "deepseek_v3", "--seed", "7", "--tokenizer", str(synthetic_tok),
            "--config-json", json.dumps(SYNTH_OVERRIDES),
        ],
    }
    if DS_V3_TOKENIZER.is_dir():
        jobs["v3_real_tok"] = ["--preset", "deepseek_v3", "--tokenizer", str(DS_V3_TOKENIZER)]
    return jobs


def run_in_process(args: list[str], out: Path) -> Run:
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        returncode = mtm.main([*args, "--out", str(out)])
    return Run(out, returncode, stdout.getvalue(), stderr.getvalue())


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Run]:
    base = tmp_path_factory.mktemp("tiny_models")
    synthetic_tok = make_synthetic_tokenizer(base / "synthetic_tokenizer")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # several small processes at once
    procs = {
        name: subprocess.Popen(
            [sys.executable, str(TOOL), *args, "--out", str(base / name)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for name, args in subprocess_jobs(synthetic_tok).items()
    }
    # While the subprocesses import torch, make the variants here.
    results = {name: run_in_process(args, base / name) for name, args in in_process_jobs(synthetic_tok).items()}
    for name, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        results[name] = Run(base / name, proc.returncode, stdout, stderr)
    results["synthetic_tokenizer"] = Run(synthetic_tok, 0, "", "")
    return results


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def read_tensors(ckpt: Path) -> dict[str, tuple[str, str, torch.Tensor]]:
    """name -> (shard file, safetensors dtype string, tensor) over all shards."""
    tensors = {}
    for fname in mtm.shard_files(ckpt):
        with safe_open(ckpt / fname, "pt") as f:
            for key in f.keys():
                tensors[key] = (fname, f.get_slice(key).get_dtype(), f.get_tensor(key))
    return tensors


def prompt(vocab_size: int, seed: int = 1234) -> torch.Tensor:
    return torch.randint(0, vocab_size, (1, PROMPT_LEN), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def forward_with_routing(model, ids):
    """Logits and, per MoE layer, the router's (logits [tokens, E], top-k expert ids [tokens, k])."""
    picks: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = [
        layer.mlp.gate.register_forward_hook(lambda mod, inp, out, i=i: picks.__setitem__(i, (out[0], out[2])))
        for i, layer in enumerate(model.model.layers)
        if hasattr(layer.mlp, "gate")
    ]
    try:
        logits = model(input_ids=ids).logits[0].float()
    finally:
        for hook in hooks:
            hook.remove()
    return logits, picks


def assert_logits_informative(logits: torch.Tensor) -> None:
    assert torch.isfinite(logits).all()
    std = logits.std(dim=-1)
    assert std.min() > 1.0, f"near-uniform logits: std over vocab {std.tolist()}"
    assert len(set(logits.argmax(-1).tolist())) >= PROMPT_LEN // 4, "argmax barely depends on the token"


def assert_routing_informative(picks: dict, n_experts: int, n_moe_layers: int) -> None:
    assert len(picks) == n_moe_layers
    for layer, (router_logits, idx) in picks.items():
        # Default init gives router logits with std ~0.15: distinct choices, but decided by noise.
        spread = router_logits.float().std(dim=-1).mean()
        assert spread > 1.0, f"layer {layer}: router logits std {spread:.3f}, choices are noise"
        sets = {tuple(sorted(row.tolist())) for row in idx}
        used = set(idx.flatten().tolist())
        assert len(sets) >= PROMPT_LEN // 2, f"layer {layer}: only {len(sets)} distinct expert sets"
        assert len(used) >= math.ceil(n_experts / 2), f"layer {layer}: only experts {sorted(used)} used"


def is_quantized(name: str, ndim: int) -> bool:
    """Independent statement of which tensors an fp8 checkpoint quantizes."""
    if ndim != 2 or not name.endswith(("_proj.weight", "_with_mqa.weight")):
        return False
    return ".self_attn." in name or ".mlp." in name


# --------------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------------

SAVED_NAME = {"num_mtp_layers": "num_nextn_predict_layers"}  # attribute_map alias in DeepseekV3Config


# Presets built on transformers' DeepSeek classes; the other families' presets are checked by
# test_family_preset_checkpoint (and, numerically, by their parity tests).
DEEPSEEK_ARCHS = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "glm_moe_dsa")
DEEPSEEK_PRESETS = sorted(p for p, spec in mtm.PRESETS.items() if spec["arch"] in DEEPSEEK_ARCHS)
FAMILY_PRESETS = sorted(p for p, spec in mtm.PRESETS.items() if spec["arch"] not in DEEPSEEK_ARCHS)


@pytest.mark.parametrize("preset", FAMILY_PRESETS)
def test_family_preset_checkpoint(runs, preset):
    """The families with their own transformers classes: the summary names the text model, the
    config.json its wrapper when there is one (mistral4_vl), the checkpoint is one float32 file
    in the layout save_pretrained writes (per-expert for most, fused where the family's hub
    format is), transformers loads it with the parameter count the summary gives, and its
    logits depend on the tokens."""
    run = runs[preset]
    summary = run.summary
    spec = mtm.PRESETS[preset]
    text_type = spec.get("saved_model_type", spec["arch"])
    assert summary["out"] == str(run.out)
    assert summary["preset"] == preset and summary["model_type"] == text_type and summary["fp8"] is False
    config = run.config
    assert config["model_type"] == spec.get("wrapper", text_type)
    text_config = config.get("text_config", config)
    assert text_config["model_type"] == spec["arch"]
    gen = json.loads((run.out / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"]) == (text_config["bos_token_id"], text_config["eos_token_id"])

    tensors = read_tensors(run.out)
    assert mtm.shard_files(run.out) == [mtm.SINGLE_FILE]
    assert {dtype for _, dtype, _ in tensors.values()} == {"F32"}

    # AutoModelForCausalLM maps neither mistral4 nor the mistral3 wrapper: their own classes.
    own_class = {"mistral4": "Mistral4ForCausalLM", "mistral3": "Mistral3ForConditionalGeneration"}
    if config["model_type"] in own_class:
        import transformers

        model = getattr(transformers, own_class[config["model_type"]]).from_pretrained(
            run.out, dtype=torch.float32, experts_implementation="eager").eval()
    else:
        model = mtm.load_reference_model(run.out)
    if config["model_type"] != "mistral3":  # The wrapper holds a vision tower too; test_family_router checks its count.
        assert model.num_parameters() == summary["num_parameters"]
    with torch.no_grad():
        logits = model(input_ids=prompt(text_config["vocab_size"])).logits[0]
    assert_logits_informative(logits)


@pytest.mark.parametrize("preset", DEEPSEEK_PRESETS)
def test_preset_checkpoint(runs, preset):
    run = runs[preset]
    summary = run.summary
    spec = mtm.PRESETS[preset]
    saved_type = spec.get("saved_model_type", spec["arch"])
    assert summary["out"] == str(run.out)
    assert summary["preset"] == preset and summary["model_type"] == saved_type and summary["fp8"] is False

    # config.json: what transformers wrote, carrying every preset value.
    config = run.config
    assert config["model_type"] == saved_type
    assert config["architectures"] == [{"deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
                                        "deepseek_v32": "DeepseekV32ForCausalLM",
                                        "glm_moe_dsa": "GlmMoeDsaForCausalLM"}[spec["arch"]]]
    assert "quantization_config" not in config and config["dtype"] == "float32"
    for key, value in spec["config"].items():
        assert config[SAVED_NAME.get(key, key)] == value, key
    gen = json.loads((run.out / "generation_config.json").read_text())
    assert gen["do_sample"] is False
    assert (gen["bos_token_id"], gen["eos_token_id"]) == (config["bos_token_id"], config["eos_token_id"])

    # Safetensors: per-expert tensors (never the fused in-memory layout), all float32.
    tensors = read_tensors(run.out)
    assert mtm.shard_files(run.out) == [mtm.SINGLE_FILE]
    assert not any("gate_up_proj" in k for k in tensors)
    assert {dtype for _, dtype, _ in tensors.values()} == {"F32"}
    n_experts = config["n_routed_experts"]
    moe_layers = range(config["first_k_dense_replace"], config["num_hidden_layers"])
    for layer in moe_layers:
        for e in range(n_experts):
            for proj in ("gate_proj", "up_proj", "down_proj"):
                assert f"model.layers.{layer}.mlp.experts.{e}.{proj}.weight" in tensors
    if spec["arch"] == "deepseek_v3":
        assert f"model.layers.{moe_layers[0]}.mlp.gate.e_score_correction_bias" in tensors

    model = mtm.load_reference_model(run.out)
    assert model.num_parameters() == summary["num_parameters"]

    # The loader fuses experts back as gate_up_proj[e] = cat(gate, up), down_proj[e] = down.
    layer = moe_layers[0]
    experts = model.model.layers[layer].mlp.experts
    for e in (0, n_experts - 1):
        prefix = f"model.layers.{layer}.mlp.experts.{e}."
        gate_up = torch.cat([tensors[prefix + "gate_proj.weight"][2], tensors[prefix + "up_proj.weight"][2]])
        assert torch.equal(experts.gate_up_proj[e], gate_up)
        assert torch.equal(experts.down_proj[e], tensors[prefix + "down_proj.weight"][2])

    logits, picks = forward_with_routing(model, prompt(config["vocab_size"]))
    assert_logits_informative(logits)
    assert_routing_informative(picks, n_experts, len(moe_layers))


@pytest.mark.parametrize("preset", ["deepseek_v2_lite", "deepseek_v3"])
def test_attention_is_not_uniform(runs, preset):
    """Re-randomized q/k give peaked attention, so position/rope/mask bugs change outputs."""
    model = mtm.load_reference_model(runs[preset].check().out)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        attentions = model(input_ids=prompt(model.config.vocab_size), output_attentions=True).attentions
    uniform_entropy = torch.log(torch.arange(1, PROMPT_LEN + 1, dtype=torch.float32))
    for layer, attn in enumerate(attentions):
        entropy = -(attn[0] * attn[0].clamp_min(1e-30).log()).sum(-1)  # [heads, query]
        ratio = (entropy[:, 4:] / uniform_entropy[4:]).mean()
        assert ratio < 0.8, f"layer {layer}: attention entropy is {ratio:.2f} of uniform"


def test_kimi_k2_loads_as_deepseek_v3_from_a_config_copy(runs, tmp_path):
    """The plain route: rewrite model_type in a copy of the config, load DeepseekV3ForCausalLM."""
    from transformers import DeepseekV3ForCausalLM

    run = runs["kimi_k2"].check()
    config = run.config
    assert config["model_type"] == "kimi_k2" and config["architectures"] == ["DeepseekV3ForCausalLM"]
    for item in run.out.iterdir():
        (tmp_path / item.name).symlink_to(item)
    (tmp_path / "config.json").unlink()
    (tmp_path / "config.json").write_text(json.dumps({**config, "model_type": "deepseek_v3"}))
    plain = DeepseekV3ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, experts_implementation="eager")
    helper = mtm.load_reference_model(run.out)
    ids = prompt(config["vocab_size"])
    with torch.no_grad():
        assert torch.equal(plain(input_ids=ids).logits, helper(input_ids=ids).logits)
    assert plain.num_parameters() == run.summary["num_parameters"]


def test_list_presets(capsys):
    assert mtm.main(["--list-presets"]) == 0
    listed = capsys.readouterr().out
    for name in mtm.PRESETS:
        assert name in listed


def test_seed_determines_weights():
    spec = mtm.PRESETS["kimi_k2"]
    config = mtm.build_config(spec["arch"], mtm.assemble_config_kwargs(spec, {}, None))
    a = mtm.build_model(spec["arch"], config, 5, torch.float32).state_dict()
    b = mtm.build_model(spec["arch"], config, 5, torch.float32).state_dict()
    c = mtm.build_model(spec["arch"], config, 6, torch.float32).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"])


# --------------------------------------------------------------------------------------------
# bfloat16
# --------------------------------------------------------------------------------------------


def test_bf16_is_rounded_fp32_with_router_in_fp32(runs):
    bf16, fp32 = runs["v3_bf16"], runs["deepseek_v3"]
    assert bf16.summary["dtype"] == "bfloat16" and bf16.config["dtype"] == "bfloat16"
    assert bf16.summary["num_parameters"] == fp32.summary["num_parameters"]
    low, full = read_tensors(bf16.out), read_tensors(fp32.out)
    assert low.keys() == full.keys()
    for name, (_, dtype, tensor) in low.items():
        reference = full[name][2]
        if name.endswith("mlp.gate.weight") or name.endswith("e_score_correction_bias"):
            assert dtype == "F32", name  # transformers' _keep_in_fp32_modules_strict
            assert torch.equal(tensor, reference), name
        else:
            assert dtype == "BF16", name
            assert torch.equal(tensor, reference.to(torch.bfloat16)), name  # same seed, same values
    model = mtm.load_reference_model(bf16.out, dtype=torch.bfloat16)
    assert model.model.layers[1].mlp.gate.weight.dtype == torch.float32
    logits, _ = forward_with_routing(model, prompt(model.config.vocab_size))
    assert_logits_informative(logits)


# --------------------------------------------------------------------------------------------
# fp8
# --------------------------------------------------------------------------------------------


def check_fp8_pair(q: torch.Tensor, scale: torch.Tensor, block: int) -> torch.Tensor:
    """Shape/format checks for one quantized weight; returns the dequantized float32 weight."""
    n, k = q.shape
    assert q.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
    assert tuple(scale.shape) == (math.ceil(n / block), math.ceil(k / block))
    expanded = scale.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    # scale = amax/448 per block, so every (non-zero) block's largest |q| is exactly 448.
    qf = q.float().abs()
    for bn in range(scale.shape[0]):
        for bk in range(scale.shape[1]):
            assert qf[bn * block:(bn + 1) * block, bk * block:(bk + 1) * block].max() == 448.0
    return q.float() * expanded


def test_fp8_checkpoint_matches_fp32_original(runs, tmp_path):
    run, original = runs["v3_fp8_f32"], runs["deepseek_v3"]
    assert run.summary["fp8"] is True
    assert run.summary["num_parameters"] == original.summary["num_parameters"]
    assert run.config["quantization_config"] == {
        "quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
        "weight_block_size": [FP8_TEST_BLOCK, FP8_TEST_BLOCK],
    }
    quant, full = read_tensors(run.out), read_tensors(original.out)
    expected_quantized = {k for k, (_, _, t) in full.items() if is_quantized(k, t.ndim)}
    assert {k for k in quant if k.endswith("_scale_inv")} == {k + "_scale_inv" for k in expected_quantized}
    assert quant.keys() == full.keys() | {k + "_scale_inv" for k in expected_quantized}
    for family in ("self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
                   "self_attn.kv_b_proj", "self_attn.o_proj", "layers.0.mlp.gate_proj",
                   "mlp.experts.11.down_proj", "mlp.shared_experts.up_proj"):
        assert any(family in k for k in expected_quantized), family

    for name, (_, dtype, tensor) in full.items():
        if name not in expected_quantized:  # embed, lm_head, norms, router, bias: untouched
            assert quant[name][1] == dtype == "F32" and torch.equal(quant[name][2], tensor), name
            continue
        assert quant[name][1] == "F8_E4M3"
        deq = check_fp8_pair(quant[name][2], quant[name + "_scale_inv"][2], FP8_TEST_BLOCK)
        # e4m3 round-to-nearest: |err| <= 2^-4 |w| (normals) or half the subnormal step 2^-9.
        scale = quant[name + "_scale_inv"][2].repeat_interleave(FP8_TEST_BLOCK, 0)[: tensor.shape[0]]
        scale = scale.repeat_interleave(FP8_TEST_BLOCK, 1)[:, : tensor.shape[1]]
        bound = tensor.abs() * 2**-4 + scale * 2**-10
        assert ((deq - tensor).abs() <= bound * (1 + 1e-6)).all(), name
        rel = (deq - tensor).norm() / tensor.norm()
        assert rel < 2**-4, f"{name}: relative error {rel:.4f}"

    deq_dir = tmp_path / "dequantized"
    mtm.dequantize_fp8_checkpoint(run.out, deq_dir)
    deq_config = json.loads((deq_dir / "config.json").read_text())
    assert "quantization_config" not in deq_config and deq_config["dtype"] == "float32"
    dequantized = read_tensors(deq_dir)
    assert dequantized.keys() == full.keys()
    assert {dtype for _, dtype, _ in dequantized.values()} == {"F32"}
    name = next(iter(sorted(expected_quantized)))
    expected = mtm.dequantize_fp8_block(quant[name][2], quant[name + "_scale_inv"][2], FP8_TEST_BLOCK)
    assert torch.equal(dequantized[name][2], expected)

    reference, deq_model = mtm.load_reference_model(original.out), mtm.load_reference_model(deq_dir)
    assert deq_model.num_parameters() == run.summary["num_parameters"]
    ids = prompt(deq_config["vocab_size"])
    deq_logits, _ = forward_with_routing(deq_model, ids)
    ref_logits, _ = forward_with_routing(reference, ids)
    assert_logits_informative(deq_logits)
    # Same model up to fp8 rounding (which also flips some expert choices): clearly related.
    cos = torch.nn.functional.cosine_similarity(deq_logits, ref_logits, dim=-1)
    assert cos.mean() > 0.8


def test_fp8_sharded_checkpoint(runs, tmp_path):
    run = runs["kimi_fp8_sharded"]
    summary = run.summary
    assert summary["fp8"] is True and summary["dtype"] == "bfloat16"  # bf16 is the --fp8 default
    assert run.config["dtype"] == "bfloat16" and run.config["model_type"] == "kimi_k2"
    assert run.config["quantization_config"]["weight_block_size"] == [mtm.DEFAULT_FP8_BLOCK] * 2
    assert not (run.out / mtm.SINGLE_FILE).exists()
    index = json.loads((run.out / mtm.INDEX_FILE).read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1
    assert sorted(p.name for p in run.out.glob("*.safetensors")) == shards

    tensors = read_tensors(run.out)
    assert {k: f for k, (f, _, _) in tensors.items()} == index["weight_map"]
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for _, _, t in tensors.values())
    quantized = {k for k, (_, dtype, _) in tensors.items() if dtype == "F8_E4M3"}
    assert quantized and quantized == {k for k, (_, _, t) in tensors.items() if is_quantized(k, t.ndim)}
    for name, (fname, dtype, tensor) in tensors.items():
        if name in quantized:
            scale_file, _, scale = tensors[name + "_scale_inv"]
            assert scale_file == fname  # a weight and its scale live in the same shard
            check_fp8_pair(tensor, scale, mtm.DEFAULT_FP8_BLOCK)
        elif name.endswith(("_scale_inv", "mlp.gate.weight", "e_score_correction_bias")):
            assert dtype == "F32", name
        else:
            assert dtype == "BF16", name

    deq_dir = tmp_path / "dequantized"
    mtm.dequantize_fp8_checkpoint(run.out, deq_dir)
    deq_index = json.loads((deq_dir / mtm.INDEX_FILE).read_text())
    assert sorted(set(deq_index["weight_map"].values())) == shards
    assert not any(k.endswith("_scale_inv") for k in deq_index["weight_map"])
    model = mtm.load_reference_model(deq_dir)
    assert model.num_parameters() == summary["num_parameters"]
    config = model.config
    logits, picks = forward_with_routing(model, prompt(config.vocab_size))
    assert_logits_informative(logits)
    assert_routing_informative(picks, config.n_routed_experts, config.num_hidden_layers - config.first_k_dense_replace)


def test_dequantize_rejects_non_fp8(runs, tmp_path):
    with pytest.raises(ValueError, match="not an fp8 checkpoint"):
        mtm.dequantize_fp8_checkpoint(runs["deepseek_v3"].check().out, tmp_path / "x")


# --------------------------------------------------------------------------------------------
# Tokenizer and overrides
# --------------------------------------------------------------------------------------------


def test_real_deepseek_v3_tokenizer(runs):
    from transformers import AutoTokenizer

    # ../shared sits beside the repository (CI included); a missing copy fails, never skips.
    assert DS_V3_TOKENIZER.is_dir(), f"{DS_V3_TOKENIZER} is missing"

    run = runs["v3_real_tok"]
    tok = json.loads((DS_V3_TOKENIZER / "tokenizer.json").read_text())
    max_id = max([*tok["model"]["vocab"].values(), *(t["id"] for t in tok["added_tokens"])])
    config = run.config
    assert config["vocab_size"] == run.summary["vocab_size"] == max_id + 1
    assert "raising vocab_size" in run.stderr
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (run.out / name).read_bytes() == (DS_V3_TOKENIZER / name).read_bytes()
    # <｜begin▁of▁sentence｜> / <｜end▁of▁sentence｜> are ids 0 / 1 in this tokenizer.
    assert (config["bos_token_id"], config["eos_token_id"]) == (0, 1)
    with safe_open(run.out / mtm.SINGLE_FILE, "pt") as f:
        assert f.get_slice("model.embed_tokens.weight").get_shape() == [max_id + 1, config["hidden_size"]]
        assert f.get_slice("lm_head.weight").get_shape() == [max_id + 1, config["hidden_size"]]
    tokenizer = AutoTokenizer.from_pretrained(run.out)
    ids = tokenizer("Hello, tiny MLA world! 你好")["input_ids"]
    assert len(ids) > 3 and max(ids) < config["vocab_size"]


def test_synthetic_tokenizer_and_config_overrides(runs):
    run, tok_dir = runs["v3_synthetic_tok"], runs["synthetic_tokenizer"].out
    config = run.config
    assert config["vocab_size"] == 302  # ids 0..301; the preset has 257
    assert (config["bos_token_id"], config["eos_token_id"]) == (300, 301)
    gen = json.loads((run.out / "generation_config.json").read_text())
    assert (gen["bos_token_id"], gen["eos_token_id"]) == (300, 301)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (run.out / name).read_bytes() == (tok_dir / name).read_bytes()
    # Overrides: scalars replaced, nested rope_parameters replaced whole (no stale yarn keys).
    assert config["num_hidden_layers"] == 2
    assert config["rope_parameters"] == SYNTH_OVERRIDES["rope_parameters"]
    model = mtm.load_reference_model(run.out)
    assert model.num_parameters() == run.summary["num_parameters"]
    logits, _ = forward_with_routing(model, prompt(302))
    assert_logits_informative(logits)


def test_explicit_vocab_too_small_exits_2(runs):
    run = runs["err_vocab_too_small"]
    assert run.returncode == 2 and run.stdout == ""
    assert "vocab_size 290" in run.stderr and "302" in run.stderr
    assert not run.out.exists()


def test_read_tokenizer_info_qwen3():
    qwen = TOKENIZERS / "qwen3"
    assert qwen.is_dir(), f"{qwen} is missing"
    info = mtm.read_tokenizer_info(qwen)
    tok = json.loads((qwen / "tokenizer.json").read_text())
    by_content = {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert info["special_ids"] == {"eos_token_id": by_content["<|im_end|>"]}  # bos_token is null
    assert info["max_id"] == max(by_content.values())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--config-json", "{not json"], "not valid JSON"),
        (["--config-json", "[1, 2]"], "must be a JSON object"),
        (["--config-json", '{"hidden_size": "big"}'], "rejected the config"),
        (["--config-json", '{"qk_rope_head_dim": 7}'], "must be even"),
        (["--tokenizer", "/nonexistent/tokenizer/dir"], "not a directory"),
        (["--config-json", '{"n_routed_experts": 13}'], "cannot be split into n_group 4"),
        (["--config-json", '{"num_hidden_layers": -1}'], "num_hidden_layers must not be negative"),
        (["--max-shard-size", "bogus"], "--max-shard-size 'bogus': expected a positive size"),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert mtm.main(["--preset", "deepseek_v3", "--out", str(out), *extra]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert not out.exists()


def test_out_naming_a_file_exits_2(tmp_path, capsys):
    out = tmp_path / "file"
    out.write_text("keep me")
    assert mtm.main(["--preset", "deepseek_v3", "--out", str(out)]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert out.read_text() == "keep me"


def test_v2_odd_rope_row_is_rejected(tmp_path, capsys):
    out = tmp_path / "out"
    assert mtm.main(["--preset", "deepseek_v2", "--out", str(out), "--config-json", '{"qk_nope_head_dim": 17}']) == 2
    assert "qk_nope_head_dim + qk_rope_head_dim to be even" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--preset", "deepseek_v3"], ["--preset", "deepseek_v3", "--out", "x", "--fp8-block", "0"]])
def test_argparse_errors_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        mtm.main(argv)
    assert exc.value.code == 2


def test_rerun_into_same_dir_replaces_weights(tmp_path, capsys):
    out = tmp_path / "out"
    assert mtm.main(["--preset", "kimi_k2", "--out", str(out), "--max-shard-size", "20KB"]) == 0
    assert (out / mtm.INDEX_FILE).exists()
    assert mtm.main(["--preset", "kimi_k2", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "generation_config.json", mtm.SINGLE_FILE]
    capsys.readouterr()
