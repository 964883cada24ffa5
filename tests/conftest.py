"""Shared pytest helpers: the latent binary, tiny models made with tools/make_tiny_model.py, and
transformers loaded on the same checkpoints as the reference."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# LATENT_BIN runs the tests against another build of latent (make test-asan: the ASan build).
LATENT = Path(os.environ.get("LATENT_BIN", REPO / "build" / "latent"))
sys.path.insert(0, str(REPO / "tools"))
# The Python package as `make build` leaves it (src/python/CMakeLists.txt), for tests/python.
BUILD_PYTHON = REPO / "build" / "python"
sys.path.insert(0, str(BUILD_PYTHON))


def run_latent(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    if not LATENT.exists():
        raise RuntimeError(f"{LATENT} is missing: run `make build` first")
    proc = subprocess.run([str(LATENT), *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"latent {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def make_tiny_model(out: Path, preset: str, *extra: str, config: dict | None = None,
                    seed: int = 0) -> dict:
    """Makes a tiny model with tools/make_tiny_model.py and returns its JSON summary.

    In this process, not as a subprocess: a run of the tool is about 10 s of CPU, nearly all of
    it importing torch and transformers, which a test process has already done (the suite makes
    about a hundred models). The tool seeds torch's global generator; its state is put back
    after, so a model made here changes nothing else in the process. The command line itself is
    tested by tests/tools/test_make_tiny_model.py."""
    import torch
    import make_tiny_model as mtm

    argv = ["--preset", preset, "--out", str(out), "--seed", str(seed), *extra]
    if config:
        argv += ["--config-json", json.dumps(config)]
    rng_state = torch.random.get_rng_state()
    try:
        # Through JSON, as the tool prints it: lists, not tuples.
        return json.loads(json.dumps(mtm.make_tiny_model(mtm.parse_args(argv))))
    except (mtm.UsageError, SystemExit) as e:
        raise AssertionError(f"make_tiny_model {' '.join(argv)} failed: {e}") from e
    finally:
        torch.random.set_rng_state(rng_state)


class TinyModels:
    """Makes each (preset, options) model once per test session."""

    def __init__(self, root: Path):
        self.root = root
        self.cache: dict[str, Path] = {}

    def get(self, preset: str, *extra: str, config: dict | None = None, seed: int = 0) -> Path:
        key = json.dumps([preset, extra, config, seed], sort_keys=True)
        if key not in self.cache:
            out = self.root / f"m{len(self.cache)}-{preset}"
            make_tiny_model(out, preset, *extra, config=config, seed=seed)
            self.cache[key] = out
        return self.cache[key]


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> TinyModels:
    return TinyModels(tmp_path_factory.mktemp("tiny-models"))


def reference_dir(model_dir: Path, scratch: Path) -> Path:
    """A directory transformers can load for `model_dir`: kimi_k2 becomes deepseek_v3 (transformers
    has no kimi_k2 mapping), and fp8 checkpoints are dequantized to f32 (the tool's helper)."""
    config = json.loads((model_dir / "config.json").read_text())
    if "quantization_config" in config:
        from make_tiny_model import dequantize_fp8_checkpoint

        out = scratch / (model_dir.name + "-dequantized")
        if not out.exists():
            dequantize_fp8_checkpoint(model_dir, out)
        model_dir = out
        config = json.loads((model_dir / "config.json").read_text())
    if config.get("model_type") == "kimi_k2":
        out = scratch / (model_dir.name + "-as-v3")
        if not out.exists():
            shutil.copytree(model_dir, out)
            config["model_type"] = "deepseek_v3"
            (out / "config.json").write_text(json.dumps(config, indent=2))
        model_dir = out
    return model_dir


def load_reference(model_dir: Path, scratch: Path, dtype=None):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        reference_dir(model_dir, scratch), dtype=dtype or torch.float32,
        attn_implementation="eager",
        # The grouped-GEMM experts kernel needs 16-byte strides, which odd tiny dims lack; eager
        # is the plain per-expert loop.
        experts_implementation="eager")
    model.eval()
    return model


def latent_logits(model_dir: Path, ids: list[int], form: str = "auto", experts: bool = False,
                  precision: str = "auto"):
    """`precision`: latent's --precision; "f32" for parity against transformers in f32 (auto
    is bf16 compute on bf16 and fp8 checkpoints)."""
    import numpy as np

    args = ["logits", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
            "--attention", form, "--precision", precision]
    if experts:
        args.append("--experts")
    out = json.loads(run_latent(*args).stdout)
    logits = np.asarray(out["logits"], dtype=np.float32)
    return (logits, out["experts"]) if experts else logits


def latent_generate(model_dir: Path, ids: list[int], max_tokens: int, form: str = "auto",
                    ignore_eos: bool = False, precision: str = "auto",
                    cache_dtype: str = "f32") -> list[int]:
    """`latent generate --ids` (no engine). `cache_dtype`: f32 rows by default, the exact
    reference the parity tests compare with transformers and with latent_logits (whose one-chunk
    pass keeps f32 rows); the CLI's own default, auto, is the engine's (bf16 rows for bf16
    checkpoints)."""
    args = ["generate", "--model", str(model_dir), "--ids", ",".join(map(str, ids)),
            "--max-tokens", str(max_tokens), "--attention", form, "--precision", precision,
            "--cache-dtype", cache_dtype]
    if ignore_eos:
        args.append("--ignore-eos")
    out = run_latent(*args)
    return json.loads(out.stdout)["ids"]


def stop_token_case(prefixes: list[str], ids: list[int]) -> tuple[int, str]:
    """Where a greedy output has a token to stop on whose text shows: new where it comes (so the
    stop id ends the sample there), its text non-empty whole characters, and the last character
    before it plus its text a stop string that first occurs there; the last such token (the
    likeliest to come from a draft). `prefixes[k]`: the text of the first k ids. Returns (its
    position, that stop string)."""
    for at in range(len(ids) - 1, 0, -1):
        before, after = prefixes[at], prefixes[at + 1]
        if ids[at] in ids[:at] or not before or after == before or not after.startswith(before):
            continue
        stop = after[len(before) - 1:]
        if "\ufffd" not in after and stop.strip() and stop not in before:
            return at, stop
    raise AssertionError(f"no token to stop on in {ids} {prefixes}")



# The deepseek_v3 tokenizer in ../shared, whose eos_token (tokenizer_config.json) is
# <｜end▁of▁sentence｜>, id TOKENIZER_EOS.
DEEPSEEK_TOKENIZER = REPO.parent / "shared" / "tokenizers" / "deepseek_v3"
TOKENIZER_EOS = 1
# An ordinary token (" river") that two_eos_model lists as an EOS id beside the tokenizer's.
EXTRA_EOS = 12334


def two_eos_model(tiny_models: TinyModels) -> Path:
    """A tiny DeepSeek V3 with the deepseek_v3 tokenizer whose generation_config.json (and
    config.json) list two EOS ids, the extra one first: [EXTRA_EOS, TOKENIZER_EOS]. vLLM's
    update_from_generation_config moves every id but the tokenizer's eos into stop_token_ids, so
    EXTRA_EOS ends a sample with it as the (int) stop_reason and TOKENIZER_EOS with a null one,
    wherever they stand in the list."""
    model = tiny_models.get("deepseek_v3", "--tokenizer", str(DEEPSEEK_TOKENIZER),
                            config={"eos_token_id": [EXTRA_EOS, TOKENIZER_EOS]})
    eos = json.loads((model / "generation_config.json").read_text())["eos_token_id"]
    assert eos == [EXTRA_EOS, TOKENIZER_EOS], eos
    return model


def unlisted_eos_model(tiny_models: TinyModels) -> Path:
    """two_eos_model's kind whose generation_config.json (and config.json) list only EXTRA_EOS,
    not the tokenizer's EOS (as Kimi K2's lists another id than its tokenizer's [EOS]). vLLM
    checks request.eos_token_id, the tokenizer's, whatever generation_config lists: TOKENIZER_EOS
    ends a sample with a null stop_reason, EXTRA_EOS with its id."""
    model = tiny_models.get("deepseek_v3", "--tokenizer", str(DEEPSEEK_TOKENIZER),
                            config={"eos_token_id": [EXTRA_EOS]})
    eos = json.loads((model / "generation_config.json").read_text())["eos_token_id"]
    assert eos in ([EXTRA_EOS], EXTRA_EOS), eos
    return model


def copy_without_tokenizer(model: Path, out: Path) -> Path:
    """`model`'s config.json, generation_config.json and weights in `out`, with no tokenizer."""
    out.mkdir(parents=True)
    for f in model.iterdir():
        if f.name in ("config.json", "generation_config.json") or f.suffix == ".safetensors":
            shutil.copy(f, out / f.name)
    return out


def demo_with(tmp_path: Path, weights: bool = True, **fields) -> Path:
    """The committed demo model in tmp_path/demo_gc with `fields` added to its
    generation_config.json (the rest linked); without `weights`, its model.safetensors is a few
    bytes of garbage that no load survives."""
    demo = REPO / "models" / "demo"
    model = tmp_path / "demo_gc"
    model.mkdir(parents=True)
    for item in demo.iterdir():
        if item.name == "model.safetensors" and not weights:
            (model / item.name).write_bytes(b"not safetensors")
        elif item.name != "generation_config.json":
            (model / item.name).symlink_to(item)
    config = json.loads((demo / "generation_config.json").read_text())
    (model / "generation_config.json").write_text(json.dumps(dict(config, **fields)))
    return model
