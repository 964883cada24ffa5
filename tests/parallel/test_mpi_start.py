"""A scale-out job's start-up (docs/scale-out.md, "Same model on every rank" and "Failures"):
ranks that would compute different things are refused before they load, naming the rank and
what differs; a rank that cannot hold its replica of the cache stops the start-up, before the
server says it is ready."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from test_mpi_ranks import (LATENT, MPIRUN, mpi_env, need_mpirun,  # noqa: F401 (fixture)
                            run_failing_job)


def mpmd(rank_args: list[list[str]]) -> list[str]:
    """mpirun's MPMD form: one rank per entry of `rank_args`, each its own command line."""
    argv = [MPIRUN, "--oversubscribe", "--bind-to", "none"]
    for rank, args in enumerate(rank_args):
        argv += ([":"] if rank else []) + ["-np", "1", *args]
    return argv


def generate(model, *flags: str) -> list[str]:
    return [str(LATENT), "--threads", "1", "generate", "--model", str(model), "--ids", "3,17,29",
            "--max-tokens", "4", "--ignore-eos", *flags]


@pytest.mark.parametrize("difference", ["weights", "quantize", "layers", "precision"])
def test_ranks_that_would_compute_different_models_are_refused(tiny_models, difference):
    """Rank 1 started on the same shapes with other weights (another seed), with --quantize int8
    or --precision bf16 where rank 0 has neither, ran to exit 0 with other tokens than either
    model alone; on another layer count it died mid-step with MPI_ERR_TRUNCATE ("a rank has
    probably died"). The ranks compare what they would compute before loading: the job ends at
    once, exit 2, with one line from rank 0 naming rank 1 and the difference."""
    model = tiny_models.get("deepseek_v3")
    other, flags = model, []
    if difference == "weights":
        other = tiny_models.get("deepseek_v3", seed=1)
    elif difference == "layers":
        other = tiny_models.get("deepseek_v3", config={"num_hidden_layers": 2})
    elif difference == "quantize":
        flags = ["--quantize", "int8"]
    else:
        flags = ["--precision", "bf16"]
    env = mpi_env()
    env["LATENT_STEP_TIMEOUT"] = "30"
    proc, took = run_failing_job(mpmd([generate(model), generate(other, *flags)]), env)
    assert proc.returncode == 2, proc.stderr
    assert took < 20, f"the job took {took:.1f} s to end:\n{proc.stderr}"
    expected = {
        "weights": r"model\.safetensors: its data differs \(other weights of the same shapes\)",
        "layers": r"config\.json differs",
        "quantize": r"--quantize int8 on rank 1, none on rank 0",
        "precision": r"precision bf16 on rank 1, f32 on rank 0",
    }[difference]
    lines = [l for l in proc.stderr.splitlines()
             if "the ranks would not compute the same model" in l]
    assert len(lines) == 1, proc.stderr
    assert re.search(r"^latent: error: rank 0 of 2: the ranks would not compute the same model: "
                     r"rank 1: " + expected, lines[0]), proc.stderr
    assert "MPI_ERR_TRUNCATE" not in proc.stderr, proc.stderr
    assert proc.stdout == "", proc.stdout  # no token was generated


def test_ranks_of_the_same_model_start(tiny_models, tmp_path):
    """The same checkpoint on both ranks through two directory paths (a copy), and --precision
    f32 beside auto on an f32 checkpoint (the same arithmetic): the comparison reads contents
    and the precision the load resolved, not paths or flags, and the job runs."""
    model = tiny_models.get("deepseek_v3")
    copy = shutil.copytree(model, tmp_path / "copy")
    proc, _ = run_failing_job(mpmd([generate(model), generate(copy, "--precision", "f32")]))
    assert proc.returncode == 0, proc.stderr
    assert "would not compute the same model" not in proc.stderr


def test_worker_that_cannot_hold_the_cache_stops_start_up(tiny_models, tmp_path):
    """`serve` with rank 1 under a virtual-memory limit too small for a 3 GiB cache: rank 1 built
    its replica only at the first request, after rank 0 had said ready and /health answered 200,
    so the first completion ended the job and its client saw the connection drop. The engine now
    sends the cache's layout as it starts and every rank reports back: the job ends before
    ready, with rank 0 naming rank 1 and the bytes."""
    model = tiny_models.get("deepseek_v3")
    serve = [str(LATENT), "--threads", "1", "serve", "--model", str(model), "--host",
             "127.0.0.1", "--port", "0", "--cache-memory", "3"]
    limited = ["bash", "-c", "ulimit -v 2500000 && exec \"$@\"", "limited", *serve]
    log = tmp_path / "serve.log"
    with open(log, "wb") as f:
        proc = subprocess.Popen(mpmd([serve, limited]), stdout=subprocess.DEVNULL, stderr=f,
                                env=mpi_env())
        try:
            code = proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"the server started:\n{log.read_text()}")
    text = log.read_text()
    assert code == 2, text
    assert "ready:" not in text, text
    assert re.search(r"latent: error: rank 0 of 2: rank 1 of 2 cannot hold its replica of the "
                     r"cache \(\d+ bytes; every rank holds the whole cache\): cannot allocate "
                     r"\d+ bytes of cache", text), text


def test_start_up_check_names_the_ranks_it_waits_for(tiny_models, tmp_path):
    """Rank 1 stuck before the first start-up check (its load stalled by LATENT_TEST_STALL_LOAD, as
    a read from a hung file system stays): the check waits without the step timeout (ranks load at
    their own pace), and every rank waited for rank 1 without a word, forever. Rank 0 now names
    the rank it still waits for every 60 s, or every LATENT_STEP_TIMEOUT if shorter (1 s here)."""
    from test_mpi_signals import Job

    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "stall").touch()  # the load waits while this is here (model/injected_stall.h)
    env = mpi_env()
    env["LATENT_STEP_TIMEOUT"] = "1"
    env["LATENT_TEST_STALL_LOAD"] = "stall"
    job = Job(mpmd([generate(tiny_models.get("deepseek_v3")), generate(blocked)]),
              tmp_path / "job.log", env)
    pids = []
    try:
        pids = [job.pid(0), job.pid(1)]
        pattern = (r"latent: rank 0 of 2: still waiting for rank\(s\) 1 at the start-up check "
                   r"\((\d+) s\): a rank that has not arrived is still loading, or hangs")
        job.wait_for(pattern, timeout=30)
        job.wait_for(pattern + r"(.|\n)*" + pattern, timeout=30)  # and again
    finally:
        job.close(pids)
    assert "did not complete within the step timeout" not in job.log(), job.log()
