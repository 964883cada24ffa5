"""Stop strings in `latent generate --prompts`: matched on the detokenized text, across token
boundaries. A stopped request ends where the stop string starts ("text"), its "ids" end with the
token that completed it, "finish_reason" is "stop" and "stop_reason" names the string; everything
else is exactly the unstopped run, and the engine gets the blocks back."""

from __future__ import annotations

import json

from transformers import AutoTokenizer

from conftest import REPO, run_latent

TOKENIZER = REPO.parent / "shared" / "tokenizers" / "deepseek_v3"
MAX_TOKENS = 24


def generate(model_dir, tmp_path, lines):
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    proc = run_latent("generate", "--model", str(model_dir), "--prompts", str(path))
    summary = json.loads(proc.stderr.split("latent: summary ", 1)[1].splitlines()[0])
    return [json.loads(l) for l in proc.stdout.splitlines()], summary


def expected_stop(hf, ids, stops):
    """What a stop-string run must give, from the unstopped ids: the first token count whose text
    contains a stop string, the text before the earliest occurrence, and the string itself."""
    for k in range(1, len(ids) + 1):
        text = hf.decode(ids[:k], skip_special_tokens=True)
        hits = [(text.find(s), i) for i, s in enumerate(stops) if s in text]
        if hits:
            at, which = min(hits)
            return ids[:k], text[:at], stops[which]
    return None


def test_stop_strings_cut_text_and_ids(tiny_models, tmp_path):
    model_dir = tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER))
    hf = AutoTokenizer.from_pretrained(model_dir)
    prompts = ["Hello, world!", "The capital of France is", "12345 + 678 = ?"]
    base = [{"prompt": p, "max_tokens": MAX_TOKENS, "ignore_eos": True} for p in prompts]
    free, _ = generate(model_dir, tmp_path, base)
    assert all(r["finish_reason"] == "length" and len(r["ids"]) == MAX_TOKENS for r in free)

    # Stop strings cut from each unstopped text: at the start of a token, spanning a token
    # boundary, inside a token, and one that never occurs (listed first, so the order of the list
    # does not decide). Characters that lossy decoding would render as U+FFFD are avoided.
    cases = []
    for prompt, result in zip(prompts, free):
        ids = result["ids"]
        text = result["text"]
        assert text == hf.decode(ids, skip_special_tokens=True)
        token_start = len(hf.decode(ids[:5], skip_special_tokens=True))
        for start, length in [(token_start, 3), (token_start - 1, 3), (len(text) // 2, 2),
                              (len(text) - 4, 4)]:
            stop = text[start:start + length]
            if not stop.strip() or "\ufffd" in stop:
                continue
            cases.append((prompt, ids, ["@@never@@", stop]))
    assert len(cases) >= 6
    lines = [{"prompt": p, "max_tokens": MAX_TOKENS, "ignore_eos": True, "stop": stops}
             for p, _, stops in cases]
    lines.append({"prompt": prompts[0], "max_tokens": MAX_TOKENS, "ignore_eos": True,
                  "stop": "@@never@@"})
    results, summary = generate(model_dir, tmp_path, lines)

    for (prompt, ids, stops), result in zip(cases, results):
        want_ids, want_text, want_stop = expected_stop(hf, ids, stops)
        assert result["ids"] == want_ids, (prompt, stops)
        assert result["text"] == want_text, (prompt, stops)
        assert result["finish_reason"] == "stop"
        assert result["stop_reason"] == want_stop
    never = results[-1]
    assert never["ids"] == free[0]["ids"] and never["text"] == free[0]["text"]
    assert never["finish_reason"] == "length" and "stop_reason" not in never
    # Stopped requests are cancelled in the engine: every block is back in the pool.
    assert summary["used_blocks_at_end"] == 0
    # Generation stopped early: far fewer tokens than the unstopped runs.
    assert summary["generated_tokens"] < MAX_TOKENS * len(lines)


def test_stop_strings_with_parallel_samples(tiny_models, tmp_path):
    """n = 2 sampled: each sample stops on its own text; logprobs end with its last token."""
    model_dir = tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER))
    hf = AutoTokenizer.from_pretrained(model_dir)
    request = {"prompt": "Once upon a time", "max_tokens": MAX_TOKENS, "ignore_eos": True, "n": 2,
               "temperature": 0.9, "seed": 7, "logprobs": 0}
    (free,), _ = generate(model_dir, tmp_path, [request])
    samples = free["samples"]
    # A stop string from sample 0's text; sample 1 may or may not contain it.
    text0 = samples[0]["text"]
    stop = next(text0[i:i + 3] for i in range(len(text0) // 3, len(text0))
                if text0[i:i + 3].strip() and "\ufffd" not in text0[i:i + 3])
    (stopped,), summary = generate(model_dir, tmp_path, [dict(request, stop=stop)])
    for before, after in zip(samples, stopped["samples"]):
        cut = expected_stop(hf, before["ids"], [stop])
        if cut is None:
            assert after["ids"] == before["ids"] and after["finish_reason"] == "length"
        else:
            want_ids, want_text, _ = cut
            assert after["ids"] == want_ids and after["text"] == want_text
            assert after["finish_reason"] == "stop" and after["stop_reason"] == stop
        assert len(after["logprobs"]) == len(after["ids"])
    assert summary["used_blocks_at_end"] == 0


def test_bad_stop_fields_fail_their_line_only(tiny_models, tmp_path):
    model_dir = tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER))
    good = {"prompt": "Hello", "max_tokens": 4, "ignore_eos": True}
    lines = [dict(good, stop=""), dict(good, stop=[""]), dict(good, stop=5), dict(good, stop=["a", 3]),
             dict(good, stop={"a": 1}), good]
    results, _ = generate(model_dir, tmp_path, lines)
    messages = [r.get("error", "") for r in results]
    assert "empty string" in messages[0] and "empty string" in messages[1]
    for m in messages[2:5]:
        assert "field 'stop' must be a string or a list of strings" in m
    assert "error" not in results[5] and len(results[5]["ids"]) == 4


def test_stop_strings_need_a_tokenizer(tiny_models, tmp_path):
    model_dir = tiny_models.get("deepseek_v3")  # no tokenizer files
    results, _ = generate(model_dir, tmp_path, [{"ids": [1, 2, 3], "max_tokens": 4, "stop": "x"},
                                                {"ids": [1, 2, 3], "max_tokens": 4}])
    assert "tokenizer" in results[0]["error"].lower()
    assert len(results[1]["ids"]) == 4
