"""Signals to the ranks of `mpirun -np 2 latent serve` (docs/scale-out.md, "Failures"): each
ends the job with one line that says what happened, on the rank it happened to."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from test_mpi_ranks import LATENT, MPIRUN, mpi_env, need_mpirun  # noqa: F401 (fixture)


def serve(model) -> list[str]:
    return [str(LATENT), "--threads", "1", "serve", "--model", str(model), "--host", "127.0.0.1",
            "--port", "0"]


class Job:
    """An mpirun job whose stderr (every rank's) goes to `log`."""

    def __init__(self, argv: list[str], log: Path, env: dict | None = None):
        self.log_path = log
        self._log = open(log, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=self._log,
                                     env=env or mpi_env())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 60) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = re.search(pattern, self.log())
            if m:
                return m
            assert self.proc.poll() is None, f"the job ended early:\n{self.log()}"
            time.sleep(0.05)
        raise AssertionError(f"no {pattern!r} within {timeout} s:\n{self.log()}")

    def pid(self, rank: int) -> int:
        return int(self.wait_for(rf"rank {rank} of 2 \(pid (\d+)\)").group(1))

    def wait_exit(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job did not end within {timeout} s:\n{self.log()}")

    def close(self, pids: list[int]):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in pids:  # a rank mpirun left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._log.close()


@pytest.mark.parametrize("blocked_rank", [1, 0])
def test_sigterm_to_rank_0_while_loading_ends_the_job_in_one_line(tiny_models, tmp_path,
                                                                  blocked_rank):
    """Rank 0 gets SIGTERM while loading: while it waits for rank 1 in the start-up check (rank
    1's config.json is a FIFO nobody writes, so the wait lasts), or while it reads its own
    checkpoint, outside MPI (its own config.json the FIFO). It exited 0 without finalizing MPI:
    mpirun printed its page about a process "exiting improperly" and exited 1. Now rank 0 ends
    the job through MPI_Abort with one line saying why, exit 143 (128 + SIGTERM): from its main
    thread when that waits in MPI (MPI_THREAD_SERIALIZED allows no second thread inside MPI),
    from the signal thread when the main thread is outside it (a wait for the main thread to
    reach MPI would last as long as the read)."""
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "stall").touch()  # the load waits while this is here (model/injected_stall.h)
    env = mpi_env()
    env["LATENT_TEST_STALL_LOAD"] = "stall"
    model = tiny_models.get("deepseek_v3")
    dirs = [blocked if rank == blocked_rank else model for rank in range(2)]
    job = Job([MPIRUN, "--oversubscribe", "--bind-to", "none",
               "-np", "1", *serve(dirs[0]), ":", "-np", "1", *serve(dirs[1])],
              tmp_path / "job.log", env)
    pids = []
    try:
        pids = [job.pid(0), job.pid(1)]
        job.wait_for(r"listening on http://")
        time.sleep(0.5)  # into the start-up check, or the stalled load
        os.kill(pids[0], signal.SIGTERM)
        code = job.wait_exit()
    finally:
        job.close(pids)
    text = job.log()
    assert code == 128 + signal.SIGTERM, text
    lines = [l for l in text.splitlines() if "while loading the model" in l]
    assert lines == ["latent: error: rank 0 of 2: SIGTERM while loading the model: ending the "
                     "job"], text
    assert "exiting improperly" not in text, text
    assert "ready:" not in text, text


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_worker_ended_by_a_signal(tiny_models, tmp_path, sig):
    """A ready server's rank 1 gets a signal from someone else than mpirun. SIGTERM: rank 1 said
    "ended by mpirun (SIGTERM): another rank has exited or the job was interrupted", which
    blamed the wrong process; it now says it received SIGTERM and from which pid. Then mpirun
    ends rank 0 with SIGTERM: rank 0 took that for an operator's and began the graceful drain,
    which cannot finish without rank 1, until mpirun killed it; it now says it was ended by
    mpirun and exits at once, as the docs said it did."""
    job = Job([MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", "2",
               *serve(tiny_models.get("deepseek_v3"))], tmp_path / "job.log")
    pids = []
    try:
        pids = [job.pid(0), job.pid(1)]
        job.wait_for(r"ready: http://")
        sent = time.monotonic()
        os.kill(pids[1], getattr(signal, sig))
        code = job.wait_exit()
        took = time.monotonic() - sent
    finally:
        job.close(pids)
    text = job.log()
    assert code != 0, text
    if sig == "SIGTERM":
        assert (f"latent: error: rank 1 of 2: received SIGTERM from pid {os.getpid()}: ending "
                "this rank (mpirun then ends the others)") in text, text
    assert "rank 1 of 2: ended by mpirun" not in text, text
    assert ("latent: error: rank 0 of 2: ended by mpirun (SIGTERM): another rank has exited or "
            "the job was interrupted") in text, text
    assert "SIGTERM: stopping" not in text, text  # no drain that cannot finish
    assert took < 10, f"the job took {took:.1f} s to end:\n{text}"
