"""lm-evaluation-harness (PyPI `lm_eval`) against `latent serve`: a small multiple-choice task
written here as JSONL (nothing is downloaded: datasets' json loader, the tokenizer from the tiny
model's directory, HF_*_OFFLINE set) runs through its `local-completions` model, which scores each
choice with `echo`, `logprobs` and token-id prompts, and through its `hf` model on the same tiny
checkpoint in transformers; the per-item loglikelihoods agree within 1e-4 and so do the
is-greedy flags."""

from __future__ import annotations

import json
import os

import pytest

from conftest import load_reference
from e2e_harness import MODEL_NAME, TOKENIZER_DIR, LatentServer

TASK = "latent_tiny_mc"
TOLERANCE = 1e-4
DOCS = [
    {"question": "The capital of France is", "choices": ["Paris", "Rome", "Berlin"], "answer": 0},
    {"question": "Two plus two equals", "choices": ["three", "four", "five", "twenty-two"], "answer": 1},
    {"question": "def fibonacci(n):\n    if n < 2:\n        return", "choices": ["n", "1", "fibonacci(n)"],
     "answer": 0},
    {"question": "Water boils at one hundred degrees", "choices": ["Celsius", "Fahrenheit"], "answer": 0},
    {"question": "Once upon a time, in a land far away, there lived a", "choices": ["king", "dragon", "small mouse"],
     "answer": 2},
]


@pytest.fixture(scope="module")
def model_dir(tiny_models):
    """The tiny DeepSeek V3 of test_serve_scoring.py, with the deepseek_v3 tokenizer."""
    return tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER_DIR))


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    srv = LatentServer(model_dir, tmp_path_factory.mktemp("serve") / "serve.log", "--block-tokens", "16",
                       "--num-blocks", "512", "--max-batch-tokens", "64", "--check-invariants")
    yield srv
    assert srv.stop() == 0, srv.log()


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval_task")
    data = root / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (root / f"{TASK}.yaml").write_text(
        f"task: {TASK}\n"
        "dataset_path: json\n"
        f"dataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\n"
        "output_type: multiple_choice\n"
        "doc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\n"
        "doc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n")
    return root


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(var, "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def item_loglikelihoods(lm, task_dir) -> list[list[tuple[float, bool]]]:
    """Per document, per choice: (loglikelihood, is_greedy) as lm_eval logs them."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    results = simple_evaluate(model=lm, tasks=[TASK], task_manager=TaskManager(include_path=str(task_dir)),
                              log_samples=True, bootstrap_iters=0)
    samples = sorted(results["samples"][TASK], key=lambda s: s["doc_id"])
    assert [s["doc_id"] for s in samples] == list(range(len(DOCS)))
    return [[tuple(r[0]) for r in s["resps"]] for s in samples]


def test_local_completions_equal_hf(server, model_dir, task_dir, tmp_path):
    from lm_eval.models.huggingface import HFLM
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from transformers import AutoTokenizer

    # Both encode with the tokenizer's BOS, the same way.
    remote = LocalCompletionsAPI(base_url=f"{server.base_url}/completions", model=MODEL_NAME,
                                 tokenizer=str(model_dir), tokenizer_backend="huggingface",
                                 add_bos_token=True, batch_size=2, max_retries=1)
    local = HFLM(pretrained=load_reference(model_dir, tmp_path), tokenizer=AutoTokenizer.from_pretrained(model_dir),
                 add_bos_token=True, batch_size=1, device="cpu")
    served = item_loglikelihoods(remote, task_dir)
    reference = item_loglikelihoods(local, task_dir)
    assert len(served) == len(DOCS)
    for doc, (got, want) in enumerate(zip(served, reference)):
        assert len(got) == len(want) == len(DOCS[doc]["choices"])
        for choice, ((ll, greedy), (ref_ll, ref_greedy)) in enumerate(zip(got, want)):
            assert abs(ll - ref_ll) < TOLERANCE, f"doc {doc} choice {choice}: {ll} vs {ref_ll}"
            assert greedy == ref_greedy, f"doc {doc} choice {choice}"
    # Random weights: the loglikelihoods differ between choices (the comparison is not vacuous).
    assert len({round(ll, 3) for doc in served for ll, _ in doc}) > len(DOCS)
