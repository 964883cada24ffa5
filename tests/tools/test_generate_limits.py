"""`latent generate` refuses a --max-tokens that cannot fit the model's positions with a clear
error, before any work: a huge one used to wrap the prompt + max_tokens sum and end in an
internal error (the --ids path) or generate past the context (a large one).

Run: .venv/bin/python -m pytest -q tests/tools/test_generate_limits.py
"""

from __future__ import annotations

import json

from conftest import demo_with, run_latent


def test_generate_refuses_max_tokens_past_the_positions(tiny_models):
    model = tiny_models.get("deepseek_v3")
    positions = json.loads((model / "config.json").read_text())["max_position_embeddings"]
    for max_tokens in (positions, 2**63 - 1):
        out = run_latent("generate", "--model", str(model), "--ids", "1,2,3", "--max-tokens",
                         str(max_tokens), check=False)
        assert out.returncode == 2
        assert (f"prompt (3 tokens) + --max-tokens ({max_tokens}) exceeds the model's "
                f"max_position_embeddings ({positions})") in out.stderr, out.stderr
    # One that fits runs.
    ok = run_latent("generate", "--model", str(model), "--ids", "1,2,3", "--max-tokens", "2")
    assert ok.returncode == 0


def test_ids_refuses_the_engine_flags_it_would_ignore(tiny_models):
    """--ids decodes one sequence without the engine: its batch, cache-size, prefix-cache,
    invariant and tokenizer flags would do nothing, so they are refused by name; --chat renders
    --prompt's text only. The flags --ids does use (--block-tokens, --cache-dtype) still run."""
    model = tiny_models.get("deepseek_v3")
    base = ["generate", "--model", str(model), "--ids", "1,2,3", "--max-tokens", "2"]
    for flag in (["--max-batch-tokens", "8"], ["--max-seqs", "2"], ["--num-blocks", "8"],
                 ["--cache-memory", "0.1"], ["--no-prefix-cache"], ["--check-invariants"],
                 ["--tokenizer", str(model)], ["--chat"]):
        out = run_latent(*base, *flag, check=False)
        # A flag error is bad input like any other: exit 2 (not CLI11's own 108).
        assert out.returncode == 2 and f"--ids excludes {flag[0]}" in out.stderr + out.stdout, flag
    out = run_latent("generate", "--model", str(model), "--prompts", "x.jsonl", "--chat",
                     check=False)
    assert out.returncode == 2 and "--prompts excludes --chat" in out.stderr + out.stdout
    assert run_latent(*base, "--block-tokens", "16", "--cache-dtype", "bf16").returncode == 0


def test_generate_refuses_a_named_tokenizer_directory_without_one(tiny_models, tmp_path):
    """--tokenizer naming a directory with no tokenizer was taken as "no tokenizer": each text
    line then failed with "this model has no tokenizer" instead of naming the path."""
    model = tiny_models.get("deepseek_v3")
    out = run_latent("generate", "--model", str(model), "--tokenizer", str(tmp_path), "--prompt",
                     "hi", "--max-tokens", "1", check=False)
    assert out.returncode == 2
    assert f"tokenizer directory {tmp_path}: no tokenizer.json or tiktoken.model" in out.stderr


def test_ids_is_raw_greedy_whatever_generation_config_says(tmp_path):
    """--ids is the "alone" reference: the argmax of the logits, 16 tokens unless --max-tokens
    says, with none of generation_config.json's sampling defaults or max_new_tokens, which every
    other entry point applies; its --help says so, as it did not."""
    ids = "3,17,29"
    plain = json.loads(run_latent("generate", "--model", str(demo_with(tmp_path / "p")), "--ids",
                                  ids, "--ignore-eos").stdout)["ids"]
    assert len(plain) == 16
    sampled = demo_with(tmp_path / "s", temperature=1.5, top_k=50, min_p=0.0,
                        repetition_penalty=1.3, max_new_tokens=5)
    assert json.loads(run_latent("generate", "--model", str(sampled), "--ids", ids,
                                 "--ignore-eos").stdout)["ids"] == plain
    # What the engine makes of the same file: a greedy line of 16 tokens is the reference; the
    # file's defaults give it 5 tokens and a repetition penalty.
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps({"ids": [3, 17, 29], "ignore_eos": True, "temperature": 0,
                                 "repetition_penalty": 1.0, "max_tokens": 16}) + "\n")
    (line,) = [json.loads(l) for l in run_latent("generate", "--model", str(sampled), "--prompts",
                                                 str(lines)).stdout.splitlines()]
    assert line["ids"] == plain
    helped = run_latent("generate", "--help").stdout
    assert "raw greedy" in helped and "sampling defaults and max_new_tokens do not apply" in \
        " ".join(helped.split())
