#!/usr/bin/env python3
"""Writes the safetensors fixtures that tests/unit/safetensors_test.cc reads.

Usage: make_safetensors_fixtures.py OUT_DIR

The good files are written by the real `safetensors` package, so the C++ reader is checked against
what Hugging Face checkpoints actually contain, not against our own idea of the format. The
malformed files are written byte by byte (u64-LE header length + JSON + data), because the package
refuses to write them. manifest.json describes every file: for good ones each tensor's name, dtype,
shape, byte range and values (as torch decodes them); for bad ones the substrings the error must
contain, which always include the file name and, when one tensor is at fault, its name.
"""

import json
import math
import os
import shutil
import struct
import sys

import torch
from safetensors.torch import save_file

ALL_DTYPES = "all_dtypes.safetensors"
INDEX = "model.safetensors.index.json"
SAFETENSORS_DTYPE = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.float8_e4m3fn: "F8_E4M3",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.int32: "I32",
    torch.int64: "I64",
    torch.bool: "BOOL",
}
# F8_E8M0 (DeepSeek V3.2 ue8m0 scales) only when this torch has the dtype.
E8M0 = getattr(torch, "float8_e8m0fnu", None)
if E8M0 is not None:
    SAFETENSORS_DTYPE[E8M0] = "F8_E8M0"


def codes(dtype, values, int_dtype):
    """A tensor of `dtype` holding exactly these bit patterns (incl. NaNs torch won't make)."""
    return torch.tensor(values, dtype=int_dtype).view(dtype)


def json_float(x):
    # Strict JSON (nlohmann) has no NaN or infinities; the C++ test maps these strings back.
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def expected_values(t):
    """Every element, flattened, exactly: floats as torch widens them to f32, ints as ints."""
    flat = t.flatten()
    if t.dtype == torch.bool:
        return [int(v) for v in flat.tolist()]
    if t.dtype.is_floating_point:
        return [json_float(v) for v in flat.float().tolist()]
    return flat.tolist()


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return n, json.loads(f.read(n))


def describe_file(path, tensors, rel):
    """Manifest entry of a file written by save_file: absolute byte ranges come from its header."""
    n, header = read_header(path)
    entries = []
    for name, t in tensors.items():
        begin, end = header[name]["data_offsets"]
        entries.append({
            "name": name,
            "dtype": SAFETENSORS_DTYPE[t.dtype],
            "shape": list(t.shape),
            "begin": 8 + n + begin,
            "end": 8 + n + end,
            "values": expected_values(t),
        })
    return {"path": rel, "metadata": header.get("__metadata__", {}), "tensors": entries}


def all_dtype_tensors():
    f32 = torch.tensor(
        [[0.0, -0.0, 1.0, -2.5, 3.14159],
         [2.0**-149, 3.4028234663852886e38, -1e-20, math.inf, -math.inf],
         [math.nan, 0.1, 65504.0, 1 / 3, -7.0]],
        dtype=torch.float32)
    # f16: ones, the largest finite value, the smallest subnormal, -0, inf, NaN, and rounded values.
    f16 = codes(torch.float16, [0x3C00, 0x7BFF, 0x0001, -0x8000, 0x7C00, 0x7E00], torch.int16)
    f16 = f16.reshape(2, 3, 1)
    bf16 = torch.tensor([1.0, -1.0, 3.0e38, 2.0**-133, math.inf, math.nan, 0.1],
                        dtype=torch.bfloat16)
    tensors = {
        "f32.matrix": f32,
        "f16.cube": f16,
        "bf16.row": bf16,
        # Every e4m3fn code (incl. both NaNs and the subnormals), in an odd 2-d shape.
        "f8_e4m3.all_codes": torch.arange(256, dtype=torch.int32).to(torch.uint8)
        .view(torch.float8_e4m3fn).reshape(16, 16),
        "i8.cube": torch.tensor([-128, 127, 0, -1, 1, 42, -42, 100], dtype=torch.int8)
        .reshape(2, 2, 2),
        "u8.row": torch.tensor([0, 1, 128, 255, 7], dtype=torch.uint8),
        "i32.pairs": torch.tensor([[-(2**31), 2**31 - 1, 0], [-1, 1, 123456789]],
                                  dtype=torch.int32),
        # 2^53 + 1 is not a double: the manifest keeps ints exact, so this checks all 64 bits.
        "i64.edges": torch.tensor([-(2**63), 2**63 - 1, 0, -1, 2**53 + 1], dtype=torch.int64),
        "bool.mask": torch.tensor([[True, False, True], [False, False, True]]),
        "scalar.f32": torch.tensor(2.5, dtype=torch.float32),
        "scalar.i64": torch.tensor(-7, dtype=torch.int64),
        "empty.f32": torch.zeros(0, 4, dtype=torch.float32),
        "empty.bf16": torch.zeros(3, 0, 2, dtype=torch.bfloat16),
        "rank6.f32": torch.arange(12, dtype=torch.float32).reshape(1, 2, 1, 3, 1, 2) / 8,
    }
    if E8M0 is not None:
        tensors["f8_e8m0.all_codes"] = (
            torch.arange(256, dtype=torch.int32).to(torch.uint8).view(E8M0).reshape(2, 128))
    return tensors


def write_good(out):
    files = []
    tensors = all_dtype_tensors()
    save_file(tensors, os.path.join(out, ALL_DTYPES),
              metadata={"format": "pt", "made_by": "latent"})
    files.append(describe_file(os.path.join(out, ALL_DTYPES), tensors, ALL_DTYPES))

    gen = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.bfloat16):
        return torch.randn(*shape, generator=gen).to(dtype)

    # Random e4m3 codes without the two NaN codes, like a real fp8 weight.
    fp8 = torch.randint(0, 0x7F, (4, 8), generator=gen, dtype=torch.int32)
    sign = torch.randint(0, 2, (4, 8), generator=gen, dtype=torch.int32) << 7
    fp8 = (fp8 | sign).to(torch.uint8)
    shards = [
        {"model.embed_tokens.weight": randn(8, 4),
         "model.layers.0.input_layernorm.weight": randn(4, dtype=torch.float32)},
        {"model.layers.0.mlp.down_proj.weight": fp8.view(torch.float8_e4m3fn),
         "model.layers.0.mlp.down_proj.weight_scale_inv": torch.tensor([[0.25]]),
         "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": randn(6, 4)},
        {"lm_head.weight": randn(8, 4), "model.norm.weight": randn(4, dtype=torch.float32)},
    ]
    checkpoints = [write_sharded(os.path.join(out, "sharded"), shards, "sharded")]

    single = {"model.norm.weight": randn(4, dtype=torch.float32), "lm_head.weight": randn(2, 4)}
    os.makedirs(os.path.join(out, "single"))
    save_file(single, os.path.join(out, "single", "model.safetensors"), metadata={"format": "pt"})
    checkpoints.append({
        "dir": "single",
        "files": [describe_file(os.path.join(out, "single", "model.safetensors"), single,
                                "single/model.safetensors")],
    })
    return files, checkpoints


def shard_name(i, n):
    return f"model-{i + 1:05d}-of-{n:05d}.safetensors"


def write_index(directory, weight_map, total_size=0):
    with open(os.path.join(directory, INDEX), "w") as f:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": weight_map}, f, indent=2)


def write_sharded(directory, shards, rel):
    """A Hugging Face sharded checkpoint: save_file per shard plus the index transformers writes."""
    os.makedirs(directory)
    weight_map, total, files = {}, 0, []
    for i, tensors in enumerate(shards):
        name = shard_name(i, len(shards))
        save_file(tensors, os.path.join(directory, name), metadata={"format": "pt"})
        files.append(describe_file(os.path.join(directory, name), tensors, f"{rel}/{name}"))
        for key, t in tensors.items():
            weight_map[key] = name
            total += t.numel() * t.element_size()
    write_index(directory, dict(sorted(weight_map.items())), total)
    return {"dir": rel, "files": files}


# ---- Malformed files, written by hand. ----


def raw(header, data=b"", header_len=None):
    """u64-LE header length + header + data. `header` is a dict, or str/bytes written verbatim
    (for JSON that json.dumps cannot produce: duplicate keys, broken syntax)."""
    if isinstance(header, dict) or isinstance(header, list):
        header = json.dumps(header)
    if isinstance(header, str):
        header = header.encode()
    n = len(header) if header_len is None else header_len
    return struct.pack("<Q", n) + header + data


def entry(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def malformed_files(out):
    """(file name, bytes, expected error substrings besides the file name)."""
    f32x2 = entry("F32", [2], 0, 8)
    cases = [
        ("empty", b"", ["truncated: 0 bytes", "shorter than the 8-byte header length field"]),
        ("truncated_4_bytes", b"\x10\x00\x00\x00",
         ["truncated: 4 bytes", "shorter than the 8-byte header length field"]),
        ("header_len_too_large", raw({"w": f32x2}, bytes(8), header_len=1000),
         ["header length 1000 is larger than the file", "file truncated or not safetensors"]),
        ("header_len_huge", raw({"w": f32x2}, bytes(8), header_len=2**64 - 1),
         ["header length 18446744073709551615 is larger than the file"]),
        ("header_len_zero", raw("", bytes(8)), ["invalid JSON in safetensors header"]),
        ("invalid_json", raw('{"w": {"dtype": "F32", "shape": [2], '),
         ["invalid JSON in safetensors header"]),
        ("invalid_utf8",
         raw(b'{"w\xff": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}', bytes(8)),
         ["invalid JSON in safetensors header"]),
        ("header_is_array", raw([1, 2, 3]), ["safetensors header is not a JSON object"]),
        ("header_is_string", raw('"F32"'), ["safetensors header is not a JSON object"]),
        ("nested_too_deep", raw({"w": entry("F32", [[2]], 0, 8)}, bytes(8)),
         ["JSON nested deeper than 3 levels"]),
        ("entry_not_object", raw({"w": 5}), ["tensor 'w'", "description is not a JSON object"]),
        ("offsets_out_of_range", raw({"w": entry("F32", [100], 0, 400)}, bytes(16)),
         ["tensor 'w'", "data_offsets [0, 400] out of range", "the data buffer has 16 bytes"]),
        ("overlapping_offsets", raw({"a": f32x2, "b": entry("F32", [2], 4, 12)}, bytes(12)),
         ["tensor 'b' overlaps tensor 'a'"]),
        ("zero_size_inside_other", raw({"a": f32x2, "z": entry("F32", [0], 4, 4)}, bytes(8)),
         ["tensor 'z' overlaps tensor 'a'"]),
        ("unsorted_offsets", raw({"w": entry("F32", [2], 8, 0)}, bytes(8)),
         ["tensor 'w'", "data_offsets [8, 0] are unsorted (begin > end)"]),
        ("hole_between", raw({"a": f32x2, "b": entry("F32", [2], 12, 20)}, bytes(20)),
         ["hole in the data buffer: bytes 8..12 belong to no tensor listed in the header",
          "the next, 'b', starts after them"]),
        ("hole_at_start", raw({"a": entry("F32", [2], 4, 12)}, bytes(12)),
         ["hole in the data buffer: bytes 0..4 belong to no tensor listed in the header",
          "the next, 'a'"]),
        # A header entry removed, its bytes left in the shard.
        ("removed_entry", raw({"a": f32x2, "c": entry("F32", [2], 16, 24)}, bytes(24)),
         ["hole in the data buffer: bytes 8..16 belong to no tensor listed in the header"]),
        ("trailing_bytes", raw({"a": f32x2}, bytes(12)),
         ["4 trailing bytes not covered by any tensor"]),
        ("size_mismatch", raw({"w": entry("F32", [3], 0, 8)}, bytes(8)),
         ["tensor 'w'", "size mismatch: shape [3] x F32 needs 12 bytes but data_offsets span 8"]),
        # F64 is a safetensors dtype latent does not read, Q4 no safetensors dtype at all.
        ("unsupported_dtype_f64", raw({"w": entry("F64", [1], 0, 8)}, bytes(8)),
         ["tensor 'w'", "unsupported dtype 'F64'", "supported: F32"]),
        ("unknown_dtype_q4", raw({"w": entry("Q4", [2], 0, 1)}, bytes(1)),
         ["tensor 'w'", "unknown dtype 'Q4'"]),
        ("dtype_not_string", raw({"w": entry(32, [2], 0, 8)}, bytes(8)),
         ["tensor 'w'", "missing string 'dtype'"]),
        # json.dumps cannot repeat a key; the reader must not silently keep one of the two.
        ("duplicate_tensor_name", raw(
            '{"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, '
            '"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}', bytes(16)),
         ["duplicate tensor name 'w' in header"]),
        ("duplicate_field", raw(
            '{"w": {"dtype": "F32", "dtype": "I32", "shape": [2], "data_offsets": [0, 8]}}',
            bytes(8)),
         ["tensor 'w'", "duplicate key 'dtype'"]),
        ("negative_shape", raw({"w": entry("F32", [-1, 2], 0, 8)}, bytes(8)),
         ["tensor 'w'", "shape entries must be non-negative integers"]),
        ("float_shape", raw({"w": entry("F32", [2.0], 0, 8)}, bytes(8)),
         ["tensor 'w'", "shape entries must be non-negative integers"]),
        ("string_shape", raw({"w": entry("F32", ["2"], 0, 8)}, bytes(8)),
         ["tensor 'w'", "shape entries must be non-negative integers"]),
        ("missing_shape", raw({"w": {"dtype": "F32", "data_offsets": [0, 8]}}, bytes(8)),
         ["tensor 'w'", "missing array 'shape'"]),
        ("shape_is_a_string", raw({"w": entry("F32", "2", 0, 8)}, bytes(8)),
         ["tensor 'w'", "'shape' must be an array, got \"2\""]),
        # nlohmann's parser ends the input at a NUL: what follows was ignored. The safetensors
        # package refuses it (its padding is spaces).
        ("nul_after_the_json",
         raw(json.dumps({"w": f32x2}).encode() + b"\0garbage", bytes(8)),
         ["invalid safetensors header: a NUL byte at byte"]),
        ("shape_too_many_dims", raw({"w": entry("F32", [1] * 7, 0, 4)}, bytes(4)),
         ["tensor 'w'", "shape has 7 dims, more than 6"]),
        ("shape_overflows_u64", raw({"w": entry("I8", [2**40, 2**40], 0, 0)}),
         ["tensor 'w'", "is too large"]),
        # Zero elements in all, but the element count passes 2^63 on the way: Shape::NumElements
        # multiplies in int64, so the reader must refuse it.
        ("shape_overflows_i64", raw({"w": entry("I8", [2**62, 2, 0], 0, 0)}),
         ["tensor 'w'", "is too large"]),
        ("negative_offsets", raw({"w": entry("F32", [2], -8, 0)}, bytes(8)),
         ["tensor 'w'", "data_offsets must be non-negative integers"]),
        # 2^64 - 8 + 8 is past uint64: JSON readers take it for a float, but it is no less an
        # integer, and out of the file.
        ("offsets_past_u64", raw({"w": entry("F32", [2], 2**64 - 8, 2**64)}, bytes(8)),
         ["tensor 'w'", "data_offsets entry 1.8446744073709552e+19 is too large",
          "past the end of the file (the data buffer has 8 bytes)"]),
        ("offsets_float", raw({"w": entry("F32", [2], 0, 8.0)}, bytes(8)),
         ["tensor 'w'", "data_offsets must be non-negative integers"]),
        ("offsets_wrong_arity",
         raw({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8]}}, bytes(8)),
         ["tensor 'w'", "missing 'data_offsets' [begin, end]"]),
        ("metadata_not_object", raw({"__metadata__": ["pt"], "w": f32x2}, bytes(8)),
         ["__metadata__ is not a JSON object"]),
        ("metadata_value_not_string", raw({"__metadata__": {"format": 1}, "w": f32x2}, bytes(8)),
         ["__metadata__ value 'format' is not a string"]),
    ]

    # A real file cut in the middle of its data buffer: the last tensor in data order runs past the
    # end. ParseEntry checks tensors in name order, so pick the first name that is out of range.
    path = os.path.join(out, "valid_for_cutting.safetensors")
    save_file({"alpha": torch.ones(4), "beta": torch.ones(16),
               "gamma": torch.ones(8, dtype=torch.int64)}, path)
    with open(path, "rb") as f:
        whole = f.read()
    os.remove(path)
    n, header = read_header_bytes(whole)
    ends = {k: v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"}
    last = max(ends, key=ends.get)
    begin, end = header[last]["data_offsets"]
    data_kept = (begin + end) // 2
    first_bad = min(k for k in ends if ends[k] > data_kept)
    cases.append(("cut_in_data", whole[: 8 + n + data_kept],
                  [f"tensor '{first_bad}'", "out of range", "(file truncated?)"]))
    cases.append(("cut_in_header", whole[: 8 + n // 2],
                  [f"header length {n} is larger than the file"]))

    listed = []
    for name, data, expect in cases:
        rel = f"malformed/{name}.safetensors"
        with open(os.path.join(out, rel), "wb") as f:
            f.write(data)
        listed.append({"path": rel, "expect": [f"{name}.safetensors"] + expect})
    return listed


def read_header_bytes(b):
    (n,) = struct.unpack("<Q", b[:8])
    return n, json.loads(b[8 : 8 + n])


def malformed_checkpoints(out):
    """Broken checkpoint directories: (dir name, expected error substrings)."""
    root = os.path.join(out, "malformed")
    one = lambda: {"a": torch.ones(2)}  # noqa: E731
    s1, s2 = shard_name(0, 2), shard_name(1, 2)
    listed = []

    def make(name, shards, weight_map=None, index_text=None):
        d = os.path.join(root, name)
        os.makedirs(d)
        for file_name, tensors in shards.items():
            save_file(tensors, os.path.join(d, file_name))
        if index_text is not None:
            with open(os.path.join(d, INDEX), "w") as f:
                f.write(index_text)
        elif weight_map is not None:
            write_index(d, weight_map)
        return d

    def case(name, expect, *args, **kwargs):
        make(name, *args, **kwargs)
        listed.append({"dir": f"malformed/{name}", "expect": expect})

    case("sharded_missing_tensor",
         [INDEX, "tensor 'b' is named in the index but missing from shard", s1],
         {s1: one(), s2: {"c": torch.ones(2)}}, {"a": s1, "b": s1, "c": s2})
    case("sharded_missing_shard",
         [INDEX, f"shard '{s2}' (holding 'b') does not exist"],
         {s1: one()}, {"a": s1, "b": s2})
    case("sharded_duplicate_tensor",
         ["duplicate tensor name 'b'", s1, s2],
         {s1: {"a": torch.ones(2), "b": torch.ones(2)},
          s2: {"b": torch.ones(2), "c": torch.ones(2)}},
         {"a": s1, "b": s1, "c": s2})
    # outside.safetensors is a valid file, so only the path check stands between the index and it.
    save_file(one(), os.path.join(root, "outside.safetensors"))
    case("sharded_path_traversal",
         [INDEX, "weight_map entry 'a' names an invalid shard file '../outside.safetensors'"],
         {}, {"a": "../outside.safetensors"})
    case("sharded_absolute_path",
         [INDEX, "weight_map entry 'a' names an invalid shard file '/"],
         {}, {"a": os.path.abspath(os.path.join(root, "outside.safetensors"))})
    case("sharded_dotdot", [INDEX, "names an invalid shard file '..'"], {}, {"a": ".."})
    case("sharded_weight_map_not_string", [INDEX, "weight_map entry 'a' is not a file name"],
         {s1: one()}, {"a": 1})
    case("sharded_no_weight_map", [INDEX, "missing object 'weight_map'"], {s1: one()},
         index_text='{"metadata": {"total_size": 8}}')
    case("sharded_weight_map_is_a_list",
         [INDEX, "'weight_map' must be an object (tensor name -> shard file), got array"],
         {s1: one()}, index_text='{"weight_map": [["a", "' + s1 + '"]]}')
    case("sharded_empty_weight_map", [INDEX, "weight_map is empty"], {}, {})
    case("sharded_invalid_index_json", [INDEX, "invalid JSON"], {s1: one()},
         index_text='{"weight_map": ')
    # A shard that is itself broken: the error comes from the shard and names it.
    d = make("sharded_truncated_shard", {}, {"a": s1})
    with open(os.path.join(d, s1), "wb") as f:
        f.write(b"\x01\x02")
    listed.append({"dir": "malformed/sharded_truncated_shard",
                   "expect": [s1, "truncated: 2 bytes"]})
    d = make("sharded_shard_is_directory", {}, {"a": s1})
    os.makedirs(os.path.join(d, s1))
    listed.append({"dir": "malformed/sharded_shard_is_directory",
                   "expect": [s1, "not a regular file"]})
    case("empty_dir", ["no model.safetensors or model.safetensors.index.json found"], {})
    return listed


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    # Start clean so a case removed here does not linger from an earlier run.
    for name in (ALL_DTYPES, "sharded", "single", "malformed", "manifest.json"):
        path = os.path.join(out, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)
    os.makedirs(os.path.join(out, "malformed"))

    files, checkpoints = write_good(out)
    manifest = {
        "files": files,
        "checkpoints": checkpoints,
        "malformed_files": malformed_files(out),
        "malformed_checkpoints": malformed_checkpoints(out),
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"wrote {len(files)} good files, {len(checkpoints)} checkpoints, "
          f"{len(manifest['malformed_files'])} malformed files and "
          f"{len(manifest['malformed_checkpoints'])} malformed checkpoints to {out}")


if __name__ == "__main__":
    main()
