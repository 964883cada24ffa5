"""Fault injection at load (issue 18, point 5): a damaged checkpoint, config, tokenizer or an
impossible cache size must give one clear error that names the file and the problem, exit code 2
(latent's code for bad input), and no crash, for `latent generate` and `latent serve` alike.

Each case copies one tiny sharded checkpoint (tools/make_tiny_model.py, deepseek_v3 preset, f32,
several shards), damages the copy and runs latent on it. Runs in about 10 s; LATENT_BIN runs it
against another build (`make test-asan` runs it under ASan+UBSan).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import LATENT, REPO

TOKENIZERS = REPO.parent / "shared" / "tokenizers"


# -- safetensors surgery --------------------------------------------------------------------------

def read_safetensors(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path: Path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def shards(model: Path) -> list[Path]:
    return sorted(model.glob("*.safetensors"))


def float_tensor(model: Path, min_dims: int = 1) -> tuple[Path, str, dict]:
    """A float32 tensor of at least `min_dims` dims with unequal dims (so a transposed shape is
    a different shape): its shard, name and header entry."""
    for shard in shards(model):
        header, _ = read_safetensors(shard)
        for name, entry in sorted(header.items()):
            if name == "__metadata__" or entry["dtype"] != "F32" or len(entry["shape"]) < min_dims:
                continue
            if min_dims == 2 and entry["shape"][0] == entry["shape"][1]:
                continue
            return shard, name, entry
    raise AssertionError(f"no F32 tensor with {min_dims}+ dims in {model}")


# -- running latent -------------------------------------------------------------------------------

def run(command: str, model: Path, *extra: str, env: dict | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    if not LATENT.exists():
        raise RuntimeError(f"{LATENT} is missing: run `make build` first")
    args = [str(LATENT), command, "--model", str(model)]
    if command == "generate":
        args += ["--ids", "1,2,3", "--max-tokens", "2"]
    elif command == "serve":
        args += ["--host", "127.0.0.1", "--port", "0"]
    elif command == "tokenize":
        args += ["--text", "Hello"]
    return subprocess.run(args + list(extra), capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def assert_load_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit code 2, and exactly one error line, which holds every needle."""
    errors = [line for line in proc.stderr.splitlines() if line.startswith("latent: ")
              and "error" in line]
    assert proc.returncode == 2, f"exit {proc.returncode}:\n{proc.stderr}"
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("latent: error: "), proc.stderr
    for needle in needles:
        assert needle in errors[0], f"{needle!r} not in {errors[0]!r}"
    return errors[0]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory) -> Path:
    from conftest import make_tiny_model

    out = tmp_path_factory.mktemp("faults") / "base"
    make_tiny_model(out, "deepseek_v3", "--max-shard-size", "100KB")
    assert len(shards(out)) >= 2, "the fixture needs a sharded checkpoint"
    return out


@pytest.fixture
def model(base_model, tmp_path) -> Path:
    out = tmp_path / "model"
    shutil.copytree(base_model, out)
    return out


def serve_until_ready(model: Path) -> str:
    """`latent serve`'s stderr up to its "ready:" line, the model loaded (or its exit); then
    stops it."""
    proc = subprocess.Popen([str(LATENT), "serve", "--model", str(model), "--host", "127.0.0.1",
                             "--port", "0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("latent serve: ready: "):
                break
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return "".join(lines)


def warnings_in(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("latent: warning: ")]


def test_the_undamaged_model_loads(model):
    proc = run("generate", model)
    assert proc.returncode == 0, proc.stderr
    assert warnings_in(proc.stderr) == [], proc.stderr
    stderr = serve_until_ready(model)
    assert "latent serve: ready: " in stderr and warnings_in(stderr) == [], stderr


# -- checkpoint faults ----------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["generate", "serve"])
def test_truncated_shard(model, command):
    shard = shards(model)[-1]
    raw = shard.read_bytes()
    shard.write_bytes(raw[:-100])
    assert_load_error(run(command, model), shard.name, "out of range", "file truncated?")


def test_shard_truncated_inside_its_header(model):
    shard = shards(model)[0]
    shard.write_bytes(shard.read_bytes()[:50])
    assert_load_error(run("generate", model), shard.name, "is larger than the file",
                      "file truncated")


def test_shard_of_four_bytes(model):
    shard = shards(model)[0]
    shard.write_bytes(b"\0\0\0\0")
    assert_load_error(run("generate", model), shard.name, "truncated: 4 bytes")


def test_header_lies_about_offsets(model):
    # The second tensor (in data order) of a shard with several starts 4 bytes early.
    for shard in shards(model):
        header, data = read_safetensors(shard)
        tensors = sorted((e["data_offsets"], n) for n, e in header.items() if n != "__metadata__")
        if len(tensors) >= 2:
            break
    else:
        raise AssertionError("no shard holds two tensors")
    (begin, end), name = tensors[1]
    header[name]["data_offsets"] = [begin - 4, end - 4]
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), shard.name, f"tensor '{name}' overlaps")


def test_header_lies_about_offsets_past_the_end(model):
    shard, name, entry = float_tensor(model)
    header, data = read_safetensors(shard)
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin, (len(data) + 1) << 40]
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), shard.name, f"tensor '{name}'", "out of range")


def test_header_lies_about_the_dtype(model):
    shard, name, entry = float_tensor(model)
    header, data = read_safetensors(shard)
    header[name]["dtype"] = "BF16"
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), shard.name, f"tensor '{name}'", "size mismatch",
                      "BF16")


def test_header_names_an_unknown_dtype(model):
    shard, name, entry = float_tensor(model)
    header, data = read_safetensors(shard)
    header[name]["dtype"] = "F128"
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), shard.name, f"tensor '{name}'",
                      "unknown dtype 'F128'")


def test_header_entry_removed_with_its_bytes_left(model):
    """The bytes of a tensor whose header entry was removed belong to no tensor: the error names
    the hole's byte range, not the tensor after it as if it were at fault."""
    for shard in shards(model):
        header, data = read_safetensors(shard)
        tensors = sorted((e["data_offsets"], n) for n, e in header.items() if n != "__metadata__")
        if len(tensors) >= 3:
            break
    else:
        raise AssertionError("no shard holds three tensors")
    (begin, end), name = tensors[1]
    del header[name]
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), shard.name,
                      f"hole in the data buffer: bytes {begin}..{end} belong to no tensor "
                      "listed in the header")


def test_header_offset_past_2_to_the_64(model):
    """2^64 - 8 + size is too large for any reader's integers, not a malformed number."""
    shard, name, entry = float_tensor(model)
    header, data = read_safetensors(shard)
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [2**64 - 8, 2**64 - 8 + end - begin]
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), shard.name, f"tensor '{name}'", "is too large",
                      "past the end of the file")


def add_stray_tensor(model: Path, name: str) -> None:
    """A tensor the config does not describe, appended to the last shard (and the index)."""
    shard = shards(model)[-1]
    header, data = read_safetensors(shard)
    header[name] = {"dtype": "F32", "shape": [2], "data_offsets": [len(data), len(data) + 8]}
    write_safetensors(shard, header, data + bytes(8))
    index_path = model / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"][name] = shard.name
    index_path.write_text(json.dumps(index))


@pytest.mark.parametrize("command", ["generate", "serve"])
def test_stray_tensor_is_loaded_with_a_warning(model, command):
    """transformers warns of unexpected keys and loads; so does latent, in one line that says how
    many tensors it ignores and names them."""
    add_stray_tensor(model, "model.layers.1.mlp.bogus.weight")
    if command == "generate":
        proc = run("generate", model)
        assert proc.returncode == 0, proc.stderr
        stderr = proc.stderr
    else:
        stderr = serve_until_ready(model)
        assert "latent serve: ready: " in stderr, stderr
    warnings = warnings_in(stderr)
    assert len(warnings) == 1, stderr
    assert "ignoring 1 checkpoint tensor(s) that config.json does not describe" in warnings[0]
    assert "'model.layers.1.mlp.bogus.weight'" in warnings[0]


def test_layers_past_num_hidden_layers_are_ignored_with_a_warning(model):
    """num_hidden_layers one short of the layers stored: the last layer is not an MTP layer
    (num_nextn_predict_layers 0), so its tensors are named; as one, they load silently."""
    config_path = model / "config.json"
    config = json.loads(config_path.read_text())
    layers = config["num_hidden_layers"]
    config["num_hidden_layers"] = layers - 1
    config_path.write_text(json.dumps(config))
    proc = run("generate", model)
    assert proc.returncode == 0, proc.stderr
    warnings = warnings_in(proc.stderr)
    assert len(warnings) == 1, proc.stderr
    assert f"'model.layers.{layers - 1}." in warnings[0] and ", ...)" in warnings[0], warnings[0]

    config["num_nextn_predict_layers"] = 1
    config_path.write_text(json.dumps(config))
    proc = run("generate", model)
    assert proc.returncode == 0, proc.stderr
    assert warnings_in(proc.stderr) == [], proc.stderr


def test_missing_shard_listed_in_the_index(model):
    shard = shards(model)[1]
    shard.unlink()
    assert_load_error(run("generate", model), "model.safetensors.index.json",
                      f"shard '{shard.name}'", "does not exist")


def test_index_names_a_tensor_its_shard_lacks(model):
    index_path = model / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"]["model.layers.0.ghost.weight"] = shards(model)[0].name
    index_path.write_text(json.dumps(index))
    assert_load_error(run("generate", model), "model.safetensors.index.json",
                      "'model.layers.0.ghost.weight'", "missing from shard")


def test_tensor_of_the_wrong_shape_for_the_config(model):
    shard, name, entry = float_tensor(model, min_dims=2)
    header, data = read_safetensors(shard)
    rows, cols = header[name]["shape"][:2]
    header[name]["shape"][:2] = [cols, rows]  # same bytes, transposed
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), f"tensor '{name}'",
                      f"has shape [{cols}, {rows}", "config.json implies")


@pytest.mark.parametrize("value,kind", [(float("nan"), "NaN"), (float("inf"), "infinity"),
                                        (float("-inf"), "infinity")])
@pytest.mark.parametrize("command", ["generate", "serve"])
def test_non_finite_weight_is_reported(model, value, kind, command):
    shard, name, entry = float_tensor(model)
    header, data = read_safetensors(shard)
    begin, _ = header[name]["data_offsets"]
    element = 3 if math.prod(entry["shape"]) > 3 else 0
    at = begin + 4 * element
    data = data[:at] + struct.pack("<f", value) + data[at + 4:]
    write_safetensors(shard, header, data)
    assert_load_error(run(command, model), shard.name, f"tensor '{name}'",
                      "1 NaN or infinite value", f"the first ({kind}) at element {element}")


def test_non_finite_scan_can_be_turned_off(model):
    """LATENT_CHECK_WEIGHTS=0 skips the scan (for a huge checkpoint known to be good); the
    damaged weight is then loaded, and only the NaN logits it makes stop the run, with no word of
    the tensor: what the scan is there to prevent."""
    shard, name, entry = float_tensor(model)
    header, data = read_safetensors(shard)
    begin, _ = header[name]["data_offsets"]
    data = data[:begin] + struct.pack("<f", float("nan")) + data[begin + 4:]
    write_safetensors(shard, header, data)
    assert_load_error(run("generate", model), f"tensor '{name}'", "NaN or infinite value")
    proc = run("generate", model, env={"LATENT_CHECK_WEIGHTS": "0"})
    assert_load_error(proc, "the model produced non-finite logits (NaN/inf)")
    assert name not in proc.stderr


def poison_final_norm(model: Path) -> None:
    """A NaN in model.norm.weight: every logit NaN, the scan turned off to let it through."""
    for shard in shards(model):
        header, data = read_safetensors(shard)
        if "model.norm.weight" in header:
            begin, _ = header["model.norm.weight"]["data_offsets"]
            write_safetensors(shard, header,
                              data[:begin] + struct.pack("<f", float("nan")) + data[begin + 4:])
            return
    raise AssertionError(f"no model.norm.weight in {model}")


def test_non_finite_logits_fail_generate_ids_and_logits(model):
    """generate --ids took the argmax of NaN logits (token 0, exit 0) where the engine path
    fails; `latent logits` printed `nan`, which no JSON parser reads."""
    poison_final_norm(model)
    unchecked = {"LATENT_CHECK_WEIGHTS": "0"}
    assert_load_error(run("generate", model, env=unchecked),
                      "the model produced non-finite logits (NaN/inf)")
    proc = subprocess.run([str(LATENT), "logits", "--model", str(model), "--ids", "1,2"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **unchecked})
    assert_load_error(proc, "the model produced non-finite logits (NaN/inf)",
                      ": position 0, token 0 is nan (--f32-out writes the logits as they are)")
    assert proc.stdout == ""


# -- files in the model directory that are not regular files --------------------------------------

# A FIFO blocked every command at open (or at the read); /dev/zero was read until memory ran out.
# A hang here would fail by the timeout, well above a load's second or two.
SPECIAL_FILE_TIMEOUT = 60


def special_file(model: Path, name: str) -> Path:
    return shards(model)[0] if name == "SHARD" else model / name


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json",
                                  "generation_config.json", "SHARD"])
def test_a_fifo_in_the_model_directory_is_refused(model, name):
    path = special_file(model, name)
    path.unlink()
    os.mkfifo(path)
    assert_load_error(run("generate", model, timeout=SPECIAL_FILE_TIMEOUT), str(path),
                      "not a regular file")


def test_a_fifo_tokenizer_is_refused(model):
    path = model / "tokenizer.json"  # the fixture has none: the tokenizer tests write one
    os.mkfifo(path)
    assert_load_error(run("tokenize", model, timeout=SPECIAL_FILE_TIMEOUT), str(path),
                      "not a regular file (a FIFO)")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_a_link_to_dev_zero_is_refused(model, name):
    path = special_file(model, name)
    path.unlink()
    path.symlink_to("/dev/zero")
    assert_load_error(run("generate", model, timeout=SPECIAL_FILE_TIMEOUT), str(path),
                      "not a regular file (a character device)")


def test_a_json_file_over_the_size_cap_is_refused(model):
    path = model / "generation_config.json"
    with open(path, "r+b") as f:
        f.truncate(65 << 20)  # sparse: nothing is written
    assert_load_error(run("generate", model), str(path), "is 68157440 bytes, more than the 64 MiB")


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json", "SHARD"])
def test_a_symlink_loop_in_the_model_directory_is_named(model, name):
    """std::filesystem threw its own error (exit 1, "internal error"; RuntimeError in Python)."""
    path = special_file(model, name)
    path.unlink()
    path.symlink_to(path.name)
    assert_load_error(run("generate", model), str(path), "Too many levels of symbolic links")


# -- config faults --------------------------------------------------------------------------------

@pytest.mark.parametrize("field,value,message", [
    ("hidden_size", 0, "field 'hidden_size' must be positive, got 0"),
    ("num_attention_heads", -4, "field 'num_attention_heads' must be positive, got -4"),
    ("num_hidden_layers", 10**15, "'num_hidden_layers'"),
    ("vocab_size", 2**62, "'vocab_size'"),
    ("kv_lora_rank", 10**12, "'kv_lora_rank'"),
    ("max_position_embeddings", 0, "'max_position_embeddings' must be positive"),
    ("qk_rope_head_dim", 7, "qk_rope_head_dim (7) must be even"),
    ("num_experts_per_tok", 10**6, "num_experts_per_tok (1000000) exceeds n_routed_experts"),
    ("intermediate_size", 1.5, "field 'intermediate_size' must be an integer"),
    # Once std::bad_alloc (one entry per routed expert) or int64 overflow in a weight's shape.
    ("n_routed_experts", 2**30, "n_routed_experts (1073741824) x MoE layers (2) is more expert "
                                "MLPs than any model has"),
    ("n_shared_experts", 2**40, "field 'n_shared_experts' is 1099511627776, larger than any model"),
    ("num_attention_heads", 2**30, "num_attention_heads x (qk_nope_head_dim + qk_rope_head_dim + "
                                   "v_head_dim) is 44023414784, larger than any model"),
    # Never sampled, so generation would never stop; 2^64 - 1 once wrapped to -1.
    ("eos_token_id", 10**6, "'eos_token_id' 1000000 is not a token id (vocab_size 257"),
    ("eos_token_id", [1, -1], "'eos_token_id' -1 is not a token id"),
    ("eos_token_id", 2**64 - 1, "'eos_token_id' 18446744073709551615 is not a token id"),
    ("bos_token_id", 10**6, "'bos_token_id' 1000000 is not a token id (vocab_size 257"),
    ("bos_token_id", -1, "'bos_token_id' -1 is not a token id"),
])
@pytest.mark.parametrize("command", ["generate", "serve"])
def test_config_with_impossible_sizes(model, field, value, message, command):
    config_path = model / "config.json"
    config = json.loads(config_path.read_text())
    config[field] = value
    config_path.write_text(json.dumps(config))
    assert_load_error(run(command, model), "config.json", message)


@pytest.mark.parametrize("mutate,message", [
    # Every rotary frequency NaN, and the output garbage, without a word.
    (lambda c: c["rope_parameters"].update(rope_theta=0),
     "config.json rope_parameters: field 'rope_theta' must be positive"),
    (lambda c: c["rope_parameters"].update(rope_theta=-10000.0), "'rope_theta' must be positive"),
    # ceil(rows / block) overflowed, an empty scale tensor passed validation and the kernels read
    # past it.
    (lambda c: c.update(quantization_config={"quant_method": "fp8",
                                             "weight_block_size": [2**63 - 1, 16]}),
     "'weight_block_size' entries must be positive and at most 2147483647"),
    # Once accepted unread: static activation scales would have been ignored, a misspelt
    # scheme or scale format taken for the default.
    (lambda c: c.update(quantization_config={"quant_method": "fp8", "weight_block_size": [16, 16],
                                             "activation_scheme": "static"}),
     "quantization_config: activation_scheme 'static' is not supported"),
    (lambda c: c.update(quantization_config={"quant_method": "fp8", "weight_block_size": [16, 16],
                                             "activation_scheme": "foo"}),
     "quantization_config: unknown activation_scheme 'foo' (supported: dynamic)"),
    (lambda c: c.update(quantization_config={"quant_method": "fp8", "weight_block_size": [16, 16],
                                             "scale_fmt": "bogus"}),
     "quantization_config: unknown scale_fmt 'bogus' (supported: float, ue8m0)"),
])
def test_config_with_impossible_nested_settings(model, mutate, message):
    config_path = model / "config.json"
    config = json.loads(config_path.read_text())
    mutate(config)
    config_path.write_text(json.dumps(config))
    assert_load_error(run("generate", model), "config.json", message)


# -- fp8 faults -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def base_fp8_model(tmp_path_factory) -> Path:
    from conftest import make_tiny_model

    out = tmp_path_factory.mktemp("faults-fp8") / "base"
    make_tiny_model(out, "deepseek_v3", "--fp8", "--fp8-block", "16")
    return out


@pytest.fixture
def fp8_model(base_fp8_model, tmp_path) -> Path:
    out = tmp_path / "model"
    shutil.copytree(base_fp8_model, out)
    return out


def test_the_undamaged_fp8_model_loads(fp8_model):
    proc = run("generate", fp8_model)
    assert proc.returncode == 0, proc.stderr


def test_fp8_output_head(fp8_model):
    """lm_head stored as fp8 blocks with its scales, in a checkpoint whose config.json has an fp8
    quantization_config: the error named the config as if it had none."""
    import torch
    from make_tiny_model import quantize_fp8_block
    from safetensors.torch import load_file, save_file

    (shard,) = shards(fp8_model)
    tensors = load_file(shard)
    tensors["lm_head.weight"], tensors["lm_head.weight_scale_inv"] = quantize_fp8_block(
        tensors["lm_head.weight"].to(torch.float32), 16)
    save_file(tensors, shard, metadata={"format": "pt"})
    error = assert_load_error(
        run("generate", fp8_model), "tensor 'lm_head.weight' is F8_E4M3",
        "fp8 is read only for linear and expert weights",
        "(an embedding, output head, router, norm or indexer weights_proj) must be F32, BF16 or F16")
    assert "quantization_config" not in error


def test_fp8_weights_without_a_quantization_config(fp8_model):
    config_path = fp8_model / "config.json"
    config = json.loads(config_path.read_text())
    del config["quantization_config"]
    config_path.write_text(json.dumps(config))
    assert_load_error(run("generate", fp8_model), "is F8_E4M3 but config.json has no fp8 "
                      "quantization_config")


@pytest.mark.parametrize("eos,message", [
    (-1, "'eos_token_id' -1 is not a token id"),
    ([1, 257], "'eos_token_id' 257 is not a token id (vocab_size 257: ids are 0 to 256)"),
])
def test_generation_config_eos_outside_the_vocabulary(model, eos, message):
    path = model / "generation_config.json"
    generation = json.loads(path.read_text())
    generation["eos_token_id"] = eos
    path.write_text(json.dumps(generation))
    assert_load_error(run("generate", model), "generation_config.json", message)


def test_config_that_is_not_json(model):
    (model / "config.json").write_text('{"model_type": "deepseek_v3", ')
    assert_load_error(run("generate", model), "config.json", "invalid JSON")


# -- tokenizer faults -----------------------------------------------------------------------------

def damaged_tokenizer(model: Path, damage) -> None:
    tokenizer = json.loads((TOKENIZERS / "llama2" / "tokenizer.json").read_text())
    damage(tokenizer)
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))


@pytest.mark.parametrize("damage,message", [
    (lambda t: t.pop("model"), 'tokenizer.json: no "model"'),
    (lambda t: t["model"].pop("vocab"), 'tokenizer.json: BPE model: "vocab" must be an object'),
    (lambda t: t["normalizer"]["normalizers"][0].pop("prepend"),
     'tokenizer.json: Prepend normalizer: missing "prepend"'),
    (lambda t: t["added_tokens"][0].pop("content"), 'tokenizer.json: added token: missing "content"'),
])
@pytest.mark.parametrize("command", ["tokenize", "serve"])  # generate --ids reads no tokenizer
def test_tokenizer_json_missing_fields(model, damage, message, command):
    damaged_tokenizer(model, damage)
    assert_load_error(run(command, model), message, str(model))


# -- cache faults ---------------------------------------------------------------------------------

@pytest.mark.parametrize("flags", [("--num-blocks", "2000000000"), ("--cache-memory", "1000000")])
def test_cache_larger_than_memory(model, flags):
    # serve (the engine's paged cache); generate --ids runs without the engine and its cache.
    assert_load_error(run("serve", model, *flags), "the KV cache needs", "of memory",
                      "lower --num-blocks or --cache-memory")
