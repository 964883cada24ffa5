"""LLM.close() while other threads use the LLM: no crash, and their calls raise LatentError. Each
case runs in a child process: the failure this guards against is a segfault. On the trained demo
model (about a second)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import BUILD_PYTHON, REPO

DEMO = REPO / "models" / "demo"


def run_child(script: str, timeout: float = 60) -> list[str]:
    args = [sys.executable, "-c", textwrap.dedent(script), str(DEMO), str(BUILD_PYTHON)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout.splitlines()


SUBMIT_RACE = """
    import json, sys, threading, time
    sys.path.insert(0, sys.argv[2])
    import latent
    # Long enough that tokenizing it keeps a submit busy when close() comes.
    text = "To be, or not to be, that is the question. " * 60
    for round in range(5):
        llm = latent.LLM(sys.argv[1], block_tokens=16)
        submitted, errors = [], []

        def submit_loop():
            try:
                while True:
                    submitted.append(llm._engine.submit(json.dumps({"prompt": text}), 1, False))
            except latent.LatentError as e:
                errors.append(str(e))

        thread = threading.Thread(target=submit_loop, daemon=True)
        thread.start()
        while len(submitted) < 3:
            time.sleep(0.001)
        # Two closes at once: the engine thread is stopped once, and both return.
        closer = threading.Thread(target=llm.close, daemon=True)
        closer.start()
        llm.close()
        closer.join(10)
        thread.join(10)
        assert not thread.is_alive() and not closer.is_alive()
        assert len(errors) == 1 and "closed" in errors[0], errors
        for call in (llm.metrics, lambda: llm.config, lambda: llm.generate("x")):
            try:
                call()
                raise AssertionError("a call on a closed LLM returned")
            except latent.LatentError as e:
                assert "closed" in str(e), e
        llm.close()
        print("ROUND", round, len(submitted) > 0, flush=True)
"""


def test_close_racing_submit_raises_not_crashes():
    assert run_child(SUBMIT_RACE) == [f"ROUND {i} True" for i in range(5)]
