"""`latent generate --prompts`: request lines and the flags that give their defaults.
- `--ignore-eos` is the default of a line without its own "ignore_eos" (it used to be dropped:
  only the --ids path read it), as --max-tokens is of "max_tokens";
- an integer field out of its range is refused naming the field: ids [4294967301] used to run
  as token 5 (nlohmann's get<int32_t> casts modulo 2^32).

Run: .venv/bin/python -m pytest -q tests/tools/test_generate_request_lines.py
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from conftest import (DEEPSEEK_TOKENIZER, EXTRA_EOS, REPO, TOKENIZER_EOS, copy_without_tokenizer,
                      demo_with, run_latent, stop_token_case, two_eos_model,
                      unlisted_eos_model)


@pytest.fixture(scope="module")
def model(tiny_models):
    return tiny_models.get("deepseek_v3")


def generate(model, tmp_path, lines, *flags):
    """Runs the lines; returns each one's result object, in input order."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(line) + "\n" for line in lines))
    proc = run_latent("generate", "--model", str(model), "--prompts", str(prompts), *flags)
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["index"] for r in results] == list(range(len(lines))), proc.stdout
    return results


def test_ignore_eos_flag_is_the_default_of_a_line(model, tmp_path):
    eos = json.loads((model / "generation_config.json").read_text())["eos_token_id"]
    eos = eos[0] if isinstance(eos, list) else eos
    said = [5, eos, 7, 8, 9]  # the 5th, past max_tokens: a replay's end would be a "stop"
    assert eos not in (5, 7, 8, 9)
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(said))
    lines = [{"ids": [3, 17, 29], "max_tokens": 4},
             {"ids": [3, 17, 29], "max_tokens": 4, "ignore_eos": False}]  # its own value wins
    plain = generate(model, tmp_path, lines, "--debug-replay", str(replay))
    assert [r["ids"] for r in plain] == [said[:2], said[:2]]
    flagged = generate(model, tmp_path, lines, "--debug-replay", str(replay), "--ignore-eos")
    assert [r["ids"] for r in flagged] == [said[:4], said[:2]]
    assert flagged[0]["finish_reason"] == "length"


@pytest.mark.parametrize("field,value", [
    ("ids", [4294967301, 7]),
    ("ids", [7, -2147483649]),
    ("ids", [7, 2**64 + 5]),
    ("stop_token_ids", [4294967297]),
    ("n", 4294967297),
    ("logprobs", 4294967296),
    ("prompt_logprobs", -4294967295),
    ("max_tokens", 2**64 - 1),
])
def test_integer_out_of_range_is_refused(model, tmp_path, field, value):
    line = {"ids": [3, 17, 29], "max_tokens": 2, field: value}
    bad, ok = generate(model, tmp_path, [line, {"ids": [3, 17, 29], "max_tokens": 2}])
    assert f"field '{field}'" in bad.get("error", ""), bad
    assert "out of range" in bad["error"], bad
    assert "error" not in ok and len(ok["ids"]) == 2, ok  # the other lines still run


def test_integer_fields_refuse_fractions_and_take_integral_floats(model, tmp_path):
    bad, ok = generate(model, tmp_path, [{"ids": [3, 17.5]}, {"ids": [3, 17.0], "max_tokens": 2.0}])
    assert "field 'ids' must be an integer" in bad.get("error", ""), bad
    assert "error" not in ok and len(ok["ids"]) == 2, ok


@pytest.mark.parametrize("field", ["continue_final_message", "add_generation_prompt"])
def test_a_mistyped_prompt_end_flag_is_named_as_every_line_field(tmp_path, field):
    """A "messages" line's flags are refused in request lines' words, as they were before the
    server's chat checks took the line's chat fields (which say "'field' must be a boolean")."""
    line = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, field: "yes"}
    # With a line that runs: a file whose every line fails exits 2 (test_cli_errors.py).
    bad, _ = generate(REPO / "models" / "demo", tmp_path, [line, {"ids": [3], "max_tokens": 1}])
    assert f"field '{field}' has the wrong type: \"yes\"" in bad.get("error", ""), bad



def test_the_generation_configs_sampling_fields_are_a_lines_defaults(tmp_path):
    """As the server's requests (and vLLM's): a line that leaves temperature, top_p, top_k, min_p
    or repetition_penalty out takes generation_config.json's, and max_new_tokens is its
    max_tokens unless --max-tokens says; they were ignored (greedy, 16 tokens)."""
    base = {"prompt": "ROMEO.", "ignore_eos": True}
    seeded = [dict(base, seed=s) for s in range(6)]
    # The file's temperature: a line without one samples (a line's default was greedy).
    sampled = generate(demo_with(tmp_path / "t", temperature=1.5, max_new_tokens=5), tmp_path,
                       seeded + [dict(base, temperature=0)])
    assert all(len(r["ids"]) == 5 for r in sampled)
    assert len({tuple(r["ids"]) for r in sampled[:-1]}) > 1
    # top_k 1: every draw is the most likely token, whatever the temperature or seed.
    model = demo_with(tmp_path / "k", temperature=1.5, top_k=1, max_new_tokens=5)
    lines = [dict(base, temperature=0, max_tokens=5)] + seeded[:3]
    lines.append(dict(base, seed=1, top_k=None))  # null is left out too
    lines.append(dict(base, max_tokens=7, temperature=0))  # a line's own values win
    greedy, *defaulted, own = generate(model, tmp_path, lines)
    assert len(greedy["ids"]) == 5
    assert [r["ids"] for r in defaulted] == [greedy["ids"]] * 4
    assert len(own["ids"]) == 7
    (flagged,) = generate(model, tmp_path, [dict(base, seed=1)], "--max-tokens", "3")
    assert flagged["ids"] == greedy["ids"][:3]


@pytest.mark.parametrize("fields, message", [
    (dict(top_p=1.5), "generation_config.json: top_p must be in \\(0, 1\\], got 1.5"),
    (dict(top_k="1"), "generation_config.json: top_k must be a number, got \"1\""),
    # The server refused it, lines took it: every line without max_tokens then made no token.
    (dict(max_new_tokens=0), "generation_config.json: max_new_tokens must be at least 1, got 0"),
])
@pytest.mark.parametrize("weights", [True, False])
def test_a_bad_sampling_field_stops_the_command(tmp_path, fields, message, weights):
    """Before the weights are read: with weights that do not load, the file is what is named."""
    lines = tmp_path / "lines.jsonl"
    lines.write_text(json.dumps({"prompt": "ROMEO."}) + "\n")
    model = demo_with(tmp_path, weights=weights, **fields)
    proc = run_latent("generate", "--model", str(model), "--prompts", str(lines), check=False)
    assert proc.returncode != 0 and re.search(message, proc.stderr), proc.stderr


def test_a_lines_top_k_is_read_as_the_servers(model, tmp_path):
    """-1 (vLLM's off), which the server and generation_config.json took and lines refused; past
    int32 it keeps every token, as the server's; below -1 it is refused in the server's words."""
    line = {"ids": [3, 17, 29], "max_tokens": 4, "ignore_eos": True, "temperature": 1.0}
    lines = [dict(line, seed=5, top_k=k) for k in (-1, 0, 4294967297)]
    lines.append(dict(line, top_k=-2))
    minus_one, off, huge, bad = generate(model, tmp_path, lines)
    assert "error" not in minus_one, minus_one
    assert minus_one["ids"] == off["ids"] == huge["ids"]
    assert "field 'top_k' must be -1 (off), 0 (off) or positive, got -2" in bad.get("error", ""), bad


def test_top_k_minus_one_in_the_file_is_off(tmp_path):
    """vLLM's spelling of off, which the server and LLM took in the file and lines refused."""
    line = {"prompt": "ROMEO.", "max_tokens": 4, "ignore_eos": True}
    model = demo_with(tmp_path, top_k=-1, temperature=0)
    defaulted, off = generate(model, tmp_path, [line, dict(line, top_k=0)])
    assert "error" not in defaulted, defaulted
    assert defaulted["ids"] == off["ids"]


def test_the_defaults_are_said_once_on_stderr(tmp_path):
    """As `latent serve` logs them: a line without "temperature" samples at the file's, where it
    was greedy, and the command said nothing of it. --max-tokens wins over max_new_tokens, so the
    line says what the lines take."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "ROMEO.", "max_tokens": 2}) + "\n")
    model = demo_with(tmp_path, temperature=0.6, top_p=0.95, max_new_tokens=5)
    said = "latent generate: sampling defaults from generation_config.json"
    proc = run_latent("generate", "--model", str(model), "--prompts", str(prompts))
    (line,) = [l for l in proc.stderr.splitlines() if l.startswith(said)]
    assert line.endswith('{"max_tokens":5,"temperature":0.6,"top_p":0.95}'), line
    proc = run_latent("generate", "--model", str(model), "--prompts", str(prompts),
                      "--max-tokens", "3")
    (line,) = [l for l in proc.stderr.splitlines() if l.startswith(said)]
    assert line.endswith('{"temperature":0.6,"top_p":0.95}'), line
    proc = run_latent("generate", "--model", str(REPO / "models" / "demo"), "--prompts",
                      str(prompts))
    assert said not in proc.stderr


@pytest.mark.parametrize("field", ["logprobs", "prompt_logprobs"])
def test_logprobs_below_zero_are_refused_as_the_server_refuses_them(model, tmp_path, field):
    """An explicit -1 ran with no logprobs (the parser's "absent"), where the server answers
    400 and latent.LLM a ValueError; null is still "none", as the server takes it."""
    line = {"ids": [3, 17, 29], "max_tokens": 2}
    minus_one, minus_two, null = generate(
        model, tmp_path, [dict(line, **{field: -1}), dict(line, **{field: -2}),
                          dict(line, **{field: None})])
    for bad, value in ((minus_one, -1), (minus_two, -2)):
        assert f"field '{field}' must be in [0, 20], got {value}" in bad.get("error", ""), bad
    assert "error" not in null and field not in null and len(null["ids"]) == 2, null


@pytest.mark.parametrize("seed", [1.5, True, 1e30])
def test_seed_must_be_an_integer(model, tmp_path, seed):
    """As the server's parser: a float or a bool seed is refused, not cast; a negative integer
    wraps as it does there."""
    line = {"ids": [3, 17, 29], "max_tokens": 2, "temperature": 1.0}
    bad, ok = generate(model, tmp_path, [dict(line, seed=seed), dict(line, seed=-1)])
    assert "field 'seed' must be an integer" in bad.get("error", ""), bad
    assert "error" not in ok and len(ok["ids"]) == 2, ok


def test_a_lines_output_does_not_depend_on_the_others(tmp_path):
    """With a tokenizer in the model directory, every line's output has "text": an ids line
    alone, and beside a line that needs the tokenizer (a text prompt, stop strings), is the same
    object (it had "text" only when another line had loaded the tokenizer)."""
    demo = REPO / "models" / "demo"
    line = {"ids": [5, 6, 7], "max_tokens": 3}
    alone = generate(demo, tmp_path, [line])[0]
    assert isinstance(alone.get("text"), str), alone
    beside = generate(demo, tmp_path, [line, {"prompt": "Hello", "max_tokens": 2, "stop": ["q"]}])
    assert beside[0] == alone


def test_a_broken_tokenizer_stops_only_the_lines_that_need_it(tmp_path):
    """A tokenizer.json that does not load: ids lines still run (none has "text"), and a text
    line fails on its own with the tokenizer's error."""
    demo = REPO / "models" / "demo"
    model = tmp_path / "model"
    model.mkdir()
    for f in demo.iterdir():
        if f.name != "tokenizer.json":
            (model / f.name).symlink_to(f)
    (model / "tokenizer.json").write_text("{not json")
    ids, text = generate(model, tmp_path, [{"ids": [5, 6, 7], "max_tokens": 3},
                                           {"prompt": "Hello", "max_tokens": 2}])
    assert len(ids["ids"]) == 3 and "text" not in ids and "error" not in ids, ids
    assert "tokenizer.json is not valid JSON" in text.get("error", ""), text


@pytest.mark.parametrize("n", [-1, 0, 129, 10**7])
def test_n_out_of_range_is_refused_before_anything_is_allocated(model, tmp_path, n):
    """n = 10**7 allocated its samples (about 1.7 GB) before the engine refused it; -1 failed as
    an internal error."""
    bad, _ = generate(model, tmp_path, [{"ids": [3, 17, 29], "max_tokens": 2, "n": n},
                                         {"ids": [3], "max_tokens": 1}])
    assert "n must be in [1, 128]" in bad.get("error", ""), bad


def test_include_stop_str_in_output(tmp_path):
    """vLLM's include_stop_str_in_output: the text ends after the stop string, not before it."""
    demo = REPO / "models" / "demo"
    line = {"prompt": "To be, or not to be", "max_tokens": 12, "ignore_eos": True}
    (plain,) = generate(demo, tmp_path, [line])
    stop = plain["text"][4:7]
    at = plain["text"].find(stop)
    cut, kept = generate(demo, tmp_path, [dict(line, stop=[stop]),
                                          dict(line, stop=[stop], include_stop_str_in_output=True)])
    assert cut["text"] == plain["text"][:at] and cut["stop_reason"] == stop, cut
    assert kept["text"] == plain["text"][:at] + stop and kept["stop_reason"] == stop, kept


def test_stop_reason_is_the_stop_token_id(model, tmp_path):
    """vLLM's stop_reason: a stop_token_ids entry that ended a sample is its "stop_reason" (an
    integer), each sample's own with n > 1; none when the sample ran to max_tokens."""
    line = {"ids": [3, 17, 29], "max_tokens": 10, "ignore_eos": True}
    (plain,) = generate(model, tmp_path, [line])
    ids = plain["ids"]
    assert plain["finish_reason"] == "length" and "stop_reason" not in plain, plain
    at = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])
    # n > 1 needs a temperature (vLLM's rule); allowed_token_ids makes both samples draw the id.
    stopped, both = generate(model, tmp_path, [
        dict(line, stop_token_ids=[ids[at]]),
        dict(line, stop_token_ids=[ids[at]], n=2, temperature=1.0, allowed_token_ids=[ids[at]])])
    assert stopped["ids"] == ids[:at + 1] and stopped["finish_reason"] == "stop", stopped
    assert stopped["stop_reason"] == ids[at] and type(stopped["stop_reason"]) is int, stopped
    assert [s.get("stop_reason") for s in both["samples"]] == [ids[at], ids[at]], both


def test_eos_is_checked_before_stop_token_ids(tiny_models, tmp_path):
    """A token that is the tokenizer's EOS ends the sample with no stop_reason, though it is a
    stop id too; under ignore_eos it ends it as a stop id. (Without a tokenizer there is no such
    EOS: test_without_a_tokenizer_every_eos_id_is_the_stop_reason.)"""
    model = tiny_models.get("deepseek_v3", "--tokenizer", str(DEEPSEEK_TOKENIZER))
    eos = TOKENIZER_EOS
    assert eos not in (5, 7, 8, 9)
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps([5, eos, 7, 8, 9]))
    line = {"ids": [3, 17, 29], "max_tokens": 8, "stop_token_ids": [eos]}
    at_eos, ignored, later, none = generate(
        model, tmp_path, [dict(line, ignore_eos=False), dict(line, ignore_eos=True),
                          dict(line, ignore_eos=True, stop_token_ids=[8]),
                          dict(line, ignore_eos=True, stop_token_ids=[])],
        "--debug-replay", str(replay))
    assert at_eos["ids"] == [5, eos] and at_eos["finish_reason"] == "stop", at_eos
    assert "stop_reason" not in at_eos, at_eos
    assert ignored["ids"] == [5, eos] and ignored["stop_reason"] == eos, ignored
    assert later["ids"] == [5, eos, 7, 8] and later["stop_reason"] == 8, later
    assert none["finish_reason"] == "stop" and "stop_reason" not in none, none  # the replay's end


def test_an_extra_eos_id_is_the_stop_reason(tiny_models, tmp_path):
    """generation_config.json's EOS ids other than the tokenizer's end a sample as stop ids, as
    vLLM's update_from_generation_config makes them: "stop_reason" is the id, and its text is left
    out; the tokenizer's EOS ends it with none, though listed after. Under ignore_eos the extra id
    ends nothing; min_tokens holds it off. logit_bias makes the random model draw the id."""
    model = two_eos_model(tiny_models)
    line = {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0}
    extra_bias = {"logit_bias": {str(EXTRA_EOS): 100}}
    extra, eos, ignored, held, two = generate(model, tmp_path, [
        dict(line, **extra_bias),
        dict(line, logit_bias={str(TOKENIZER_EOS): 100}),
        dict(line, **extra_bias, ignore_eos=True, max_tokens=3),
        dict(line, **extra_bias, min_tokens=2),
        dict(line, **extra_bias, min_tokens=2, max_tokens=2)])
    assert extra["ids"] == [EXTRA_EOS] and extra["finish_reason"] == "stop", extra
    assert extra["stop_reason"] == EXTRA_EOS and type(extra["stop_reason"]) is int, extra
    assert extra["text"] == "", extra
    assert eos["ids"] == [TOKENIZER_EOS] and eos["finish_reason"] == "stop", eos
    assert "stop_reason" not in eos, eos
    assert ignored["ids"] == [EXTRA_EOS] * 3 and ignored["finish_reason"] == "length", ignored
    assert "stop_reason" not in ignored, ignored
    assert EXTRA_EOS not in two["ids"] and held["ids"] == two["ids"] + [EXTRA_EOS], (held, two)
    assert held["stop_reason"] == EXTRA_EOS and held["text"] == two["text"], (held, two)


def test_the_tokenizers_eos_ends_a_sample_though_unlisted(tiny_models, tmp_path):
    """generation_config.json lists only EXTRA_EOS: the tokenizer's EOS ends a sample all the same
    (vLLM checks request.eos_token_id), with no stop_reason and its text left out; min_tokens holds
    it off and ignore_eos lets it through, as a listed EOS. It used to end nothing."""
    model = unlisted_eos_model(tiny_models)
    line = {"prompt": "The quick brown fox", "max_tokens": 4, "temperature": 0,
            "logit_bias": {str(TOKENIZER_EOS): 100}}
    eos, ignored, held, two = generate(model, tmp_path, [
        line, dict(line, ignore_eos=True), dict(line, min_tokens=2),
        dict(line, min_tokens=2, max_tokens=2)])
    assert eos["ids"] == [TOKENIZER_EOS] and eos["finish_reason"] == "stop", eos
    assert "stop_reason" not in eos and eos["text"] == "", eos
    assert ignored["ids"] == [TOKENIZER_EOS] * 4 and ignored["finish_reason"] == "length", ignored
    assert TOKENIZER_EOS not in two["ids"] and held["ids"] == two["ids"] + [TOKENIZER_EOS], (held,
                                                                                           two)
    assert held["finish_reason"] == "stop" and "stop_reason" not in held, held


def test_without_a_tokenizer_every_eos_id_is_the_stop_reason(tiny_models, tmp_path):
    """vLLM without a tokenizer has no request.eos_token_id: update_from_generation_config makes
    every generation_config EOS id a stop_token_ids entry, so each reports its id, the first
    listed too (which used to stand in for the tokenizer's, with none)."""
    model = copy_without_tokenizer(two_eos_model(tiny_models), tmp_path / "no-tokenizer")
    line = {"ids": [3, 4, 5], "max_tokens": 4, "temperature": 0}
    results = generate(model, tmp_path, [dict(line, logit_bias={str(t): 100})
                                         for t in (EXTRA_EOS, TOKENIZER_EOS)])
    for token, r in zip((EXTRA_EOS, TOKENIZER_EOS), results):
        assert r["ids"] == [token] and r["finish_reason"] == "stop", r
        assert r["stop_reason"] == token and type(r["stop_reason"]) is int, r


def test_a_generation_config_without_eos_leaves_the_tokenizers(tiny_models, tmp_path):
    """A generation_config.json without eos_token_id: vLLM reads only that file's fields, so
    config.json's EOS ids stop nothing and the tokenizer's EOS alone ends a sample."""
    model = tmp_path / "no-eos"
    shutil.copytree(two_eos_model(tiny_models), model)
    gen = json.loads((model / "generation_config.json").read_text())
    del gen["eos_token_id"]
    (model / "generation_config.json").write_text(json.dumps(gen))
    line = {"prompt": "The quick brown fox", "max_tokens": 3, "temperature": 0}
    extra, eos = generate(model, tmp_path, [dict(line, logit_bias={str(t): 100})
                                            for t in (EXTRA_EOS, TOKENIZER_EOS)])
    assert extra["ids"] == [EXTRA_EOS] * 3 and extra["finish_reason"] == "length", extra
    assert eos["ids"] == [TOKENIZER_EOS] and eos["finish_reason"] == "stop", eos
    assert "stop_reason" not in eos, eos


@pytest.mark.parametrize("flags", [(), ("--speculative-tokens", "4")])
def test_a_stop_tokens_text_is_not_output(tmp_path, flags):
    """vLLM's detokenizer leaves the text of the stop id that ended a sample out of "text" and out
    of the stop-string search (the id stays in "ids"), unless include_stop_str_in_output, which
    keeps the text, still unsearched: so "stop_reason" is the id even where its text completes a
    stop string. It used to be output, and the stop string it completed won."""
    demo = REPO / "models" / "demo"
    line = {"prompt": "To be, or not to be, that is the question.\n", "ignore_eos": True}
    runs = generate(demo, tmp_path, [dict(line, max_tokens=k) for k in range(1, 13)], *flags)
    ids = runs[-1]["ids"]
    prefixes = [""] + [r["text"] for r in runs]
    at, stop = stop_token_case(prefixes, ids)
    token = ids[at]
    keep = {"include_stop_str_in_output": True}
    out = generate(demo, tmp_path, [dict(line, max_tokens=12, stop_token_ids=[token]),
                                    dict(line, max_tokens=12, stop_token_ids=[token], stop=[stop]),
                                    dict(line, max_tokens=12, stop_token_ids=[token], **keep),
                                    dict(line, max_tokens=12, stop_token_ids=[token], stop=[stop],
                                         **keep),
                                    dict(line, max_tokens=12, stop=[stop])], *flags)
    for r in out[:4]:
        assert r["ids"] == ids[:at + 1] and r["finish_reason"] == "stop", (r, at)
        assert r["stop_reason"] == token and type(r["stop_reason"]) is int, (r, stop)
    assert [r["text"] for r in out[:4]] == [prefixes[at]] * 2 + [prefixes[at + 1]] * 2, (out, at)
    # Without the stop id the same text completes the stop string.
    assert out[4]["stop_reason"] == stop and out[4]["text"] == prefixes[at + 1][:-len(stop)]


def test_a_sentencepiece_output_keeps_its_leading_space(tiny_models, tmp_path):
    """The text is what the output adds after the prompt's, as vLLM's detokenizer (primed with
    the prompt) gives it and HF decodes prompt + output: "Hello" then "▁provin" is " provin",
    with stop strings or not (the text is then streamed), and a stop string sees the space."""
    llama2 = REPO.parent / "shared" / "tokenizers" / "llama2"
    model = tiny_models.get("deepseek_v3", "--tokenizer", str(llama2))
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps([24899, 29516, 5496]))  # "▁provin", "り", "▁buffer"
    lines = [{"prompt": "Hello", "max_tokens": 3},
             {"prompt": "Hello", "max_tokens": 3, "stop": ["xyz"]},
             {"prompt": "Hello", "max_tokens": 3, "stop": [" provin"]}]
    results = generate(model, tmp_path, lines, "--debug-replay", str(replay))
    assert [r["text"] for r in results] == [" provinり buffer", " provinり buffer", ""]
    assert results[2]["stop_reason"] == " provin"


def test_truncate_prompt_tokens_is_refused_by_name(model, tmp_path):
    """latent.LLM and the server take it; lines are read before the model, whose context it needs,
    so a line asking for it is refused rather than run on its whole prompt."""
    line = {"ids": [3, 17, 29], "max_tokens": 2}
    bad, ok = generate(model, tmp_path, [dict(line, truncate_prompt_tokens=2), line])
    refusal = "field 'truncate_prompt_tokens' is not taken by `latent generate`"
    assert refusal in bad.get("error", ""), bad
    assert "error" not in ok and len(ok["ids"]) == 2, ok


def test_a_chat_integer_past_64_bits_is_refused_by_place(tmp_path):
    """A "messages" line's integers reach the template exact, as the server's and render-chat's:
    one past the 64-bit range is refused naming its place (it used to become a float), while the
    line's own fields parse as before (a uint64 seed)."""
    chat = {"messages": [{"role": "user", "content": "hi", "x": [-9223372036854775809]}],
            "max_tokens": 1}
    kwarg = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
             "chat_template_kwargs": {"k": 2**64}}
    ok = {"messages": [{"role": "user", "content": "hi", "x": [-9223372036854775808]}],
          "max_tokens": 1, "seed": 2**64 - 1, "temperature": 1.0}
    bad, bad_kwarg, good = generate(REPO / "models" / "demo", tmp_path, [chat, kwarg, ok])
    assert ("integer -9223372036854775809 at messages[0].x[0] is too large (64-bit limit)"
            in bad.get("error", "")), bad
    assert ("integer 18446744073709551616 at chat_template_kwargs.k is too large"
            in bad_kwarg.get("error", "")), bad_kwarg
    assert "error" not in good and len(good["ids"]) == 1, good
