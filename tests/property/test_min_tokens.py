"""`min_tokens` in the engine (request lines of `latent generate --prompts`), on the trained demo
model with its EOS id moved to a token it says often, so that EOS comes early: until a sample has
min_tokens tokens, no EOS and no stop_token_ids id is drawn and no stop string ends it; the output
is the same alone and batched, and with speculative decoding (each draft row holds off what its
own step would: the draft tokens count as generated)."""

from __future__ import annotations

import collections
import json
import shutil

import pytest

from conftest import REPO
from test_engine_properties import run_batch as run

DEMO = REPO / "models" / "demo"


def prompts(count):
    lines = [l for l in (DEMO / "heldout.txt").read_text(encoding="utf-8").splitlines() if l.strip()]
    return ["\n".join(lines[3 * i:3 * i + 3]) + "\n" for i in range(count)]


@pytest.fixture(scope="module")
def early_eos(tmp_path_factory):
    """(model dir, EOS id, another frequent id): the demo model whose EOS is the token its greedy
    outputs hold most often."""
    tmp = tmp_path_factory.mktemp("min-tokens")
    plain, _ = run(DEMO, tmp, [{"prompt": p, "max_tokens": 24, "ignore_eos": True}
                               for p in prompts(6)], name="plain")
    counts = collections.Counter(t for r in plain for t in r["ids"])
    (eos, _), (other, _) = counts.most_common(2)
    model = tmp / "demo-early-eos"
    model.mkdir()
    for f in DEMO.iterdir():
        (model / f.name).symlink_to(f)
    (model / "generation_config.json").unlink()
    config = json.loads((DEMO / "generation_config.json").read_text())
    config["eos_token_id"] = eos
    (model / "generation_config.json").write_text(json.dumps(config))
    return model, eos, other


def workload(eos, other):
    requests = []
    for i, p in enumerate(prompts(6)):
        for min_tokens in (0, 1, 6, 20):
            r = {"prompt": p, "max_tokens": 24, "min_tokens": min_tokens, "logprobs": 1}
            if i % 2:
                r.update(temperature=0.8, seed=100 + i, repetition_penalty=1.05)
            if i % 3 == 1:
                r["stop_token_ids"] = [other]
            requests.append(r)
    return requests


def check_held_off(requests, results, eos):
    for r, out in zip(requests, results):
        assert "error" not in out, out
        ids, held = out["ids"], {eos, *r.get("stop_token_ids", [])}
        assert not held & set(ids[:r["min_tokens"]]), (r, ids)
        assert len(ids) >= r["min_tokens"], (r, ids)


def test_eos_and_stop_ids_are_held_off(early_eos, tmp_path):
    model, eos, other = early_eos
    requests = workload(eos, other)
    batched, _ = run(model, tmp_path, requests, name="batched")
    check_held_off(requests, batched, eos)
    # Without min_tokens the moved EOS does end samples early: the check above means something.
    early = [out for r, out in zip(requests, batched)
             if r["min_tokens"] == 0 and out["finish_reason"] == "stop" and len(out["ids"]) < 6]
    assert len(early) >= 2, batched
    # Alone: each request by itself gives what it gave in the batch.
    for i in range(0, len(requests), 5):
        alone, _ = run(model, tmp_path, [requests[i]], name=f"alone{i}")
        assert alone[0]["ids"] == batched[i]["ids"], requests[i]
    # Drafts: the same tokens and logprobs, with drafts accepted.
    drafted, summary = run(model, tmp_path, requests, "--speculative-tokens", "4", name="drafted")
    assert summary["accepted_draft_tokens"] > 0, summary
    strip = lambda rs: [{k: v for k, v in r.items() if k != "index"} for r in rs]  # noqa: E731
    assert strip(drafted) == strip(batched)


def test_stop_strings_wait_for_min_tokens(early_eos, tmp_path):
    model, _, _ = early_eos
    requests = [{"prompt": p, "max_tokens": 24, "ignore_eos": True} for p in prompts(4)]
    plain, _ = run(model, tmp_path, requests, name="plain")
    stops = []
    for r, out in zip(requests, plain):
        # A stop string from the text of the first few tokens: it ends the output at once...
        stop = out["text"][:4]
        stops.append(dict(r, stop=[stop]))
        stops.append(dict(r, stop=[stop], min_tokens=24))
    results, _ = run(model, tmp_path, stops, name="stops")
    for out, full in zip(results[0::2], plain):
        assert out["finish_reason"] == "stop" and out["text"] == "", out
    # ...but not while min_tokens holds: the whole text, ended by length.
    for out, full in zip(results[1::2], plain):
        assert (out["text"], out["finish_reason"]) == (full["text"], "length"), (out, full)


@pytest.mark.parametrize("line,words", [
    ({"max_tokens": 3, "min_tokens": 4}, "min_tokens must be in [0, max_tokens (3)], got 4"),
    ({"min_tokens": -1}, "min_tokens must be in"),
    ({"repetition_penalty": 0.001}, "'repetition_penalty' must be in [0.01, 100]"),
])
def test_bad_lines_are_refused(tmp_path, line, words):
    # Beside a line that runs: a file whose every line fails exits 2 (test_cli_errors.py).
    results, _ = run(DEMO, tmp_path, [{"ids": [5, 6, 7], **line}, {"ids": [5], "max_tokens": 1}],
                     name="bad")
    assert words in results[0].get("error", ""), results
