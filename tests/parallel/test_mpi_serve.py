"""`mpirun -np 2 latent serve`: rank 0 serves the OpenAI API while both ranks run every step
(experts split between them). Greedy completions equal `latent generate` in one process,
streaming and chat work, seeded n = 2 samples match a one-process server's, and SIGTERM to rank 0
drains and ends the whole job with 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from conftest import latent_generate  # noqa: E402
from e2e_harness import (HOST, LATENT, MODEL_NAME, SERVER_FLAGS, LatentServer,  # noqa: E402,F401
                         chat_model)
from test_mpi_ranks import MPIRUN, mpi_env, need_mpirun  # noqa: E402,F401 (fixture)

PROMPTS = ["The capital of France is", "def fibonacci(n):"]
MAX_TOKENS = 12


class MpiServer(LatentServer):
    """`latent serve` under mpirun; stderr of every rank goes to the log."""

    def __init__(self, model_dir: Path, log_path: Path, ranks: int, *flags: str):
        self.log_path = log_path
        self.name = MODEL_NAME
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", str(ranks), str(LATENT),
             "--threads", "1", "serve", "--model", str(model_dir), "--host", HOST, "--port", "0",
             "--served-model-name", MODEL_NAME, *flags],
            stdout=subprocess.DEVNULL, stderr=self._log, env=mpi_env())
        self.port = self._wait_for_port(timeout=60)
        self.wait_ready(timeout=60)

    def rank_pid(self, rank: int) -> int:
        m = re.search(rf"rank {rank} of \d+ \(pid (\d+)\)", self.log())
        assert m, self.log()
        return int(m.group(1))


@pytest.fixture(scope="module")
def mpi_server(chat_model, tmp_path_factory):
    srv = MpiServer(chat_model, tmp_path_factory.mktemp("mpi-serve") / "serve.log", 2,
                    *SERVER_FLAGS)
    yield srv
    if srv.proc.poll() is None:
        srv.kill()


def test_completions_equal_generate(mpi_server, chat_model):
    client = mpi_server.client()
    for prompt in PROMPTS:
        resp = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=MAX_TOKENS,
                                         temperature=0, extra_body={"return_token_ids": True})
        prompt_ids = resp.choices[0].model_extra["prompt_token_ids"]
        ids = resp.choices[0].model_extra["token_ids"]
        assert ids == latent_generate(chat_model, prompt_ids, MAX_TOKENS)
    stream = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=MAX_TOKENS,
                                       temperature=0, stream=True)
    streamed = "".join(c.choices[0].text for c in stream if c.choices)
    whole = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[0], max_tokens=MAX_TOKENS,
                                      temperature=0)
    assert streamed == whole.choices[0].text


def test_chat_and_seeded_samples_equal_one_process(mpi_server, chat_model, tmp_path):
    one = LatentServer(chat_model, tmp_path / "one.log", *SERVER_FLAGS)
    try:
        def ask(srv):
            client = srv.client()
            chat = client.chat.completions.create(
                model=MODEL_NAME, messages=[{"role": "user", "content": "Hello there"}],
                max_tokens=MAX_TOKENS, temperature=0)
            samples = client.completions.create(model=MODEL_NAME, prompt=PROMPTS[1], n=2,
                                                max_tokens=MAX_TOKENS, temperature=0.9, seed=11)
            return chat.choices[0].message.content, [c.text for c in samples.choices]

        assert ask(mpi_server) == ask(one)
    finally:
        one.stop()


def test_sigterm_to_rank_0_ends_the_job(mpi_server):
    # Last in this module: stops the shared server. Rank 0, not mpirun: mpirun would SIGTERM
    # every rank at once, then SIGKILL them, leaving no time to drain.
    os.kill(mpi_server.rank_pid(0), signal.SIGTERM)
    code = mpi_server.wait_exit(timeout=30)
    assert code == 0, mpi_server.log()
    assert "SIGTERM: stopping" in mpi_server.log()
