"""Scale-out over MPI (docs/scale-out.md): one model over N ranks on this machine (mpirun
--oversubscribe). Routed experts are split across the ranks and their partial outputs summed in
rank order, so logits differ from one process only by the order of that sum (within 1e-5 x max
|logit|), and greedy generations are identical. Hybrid models (kimi_linear: KDA linear-attention
layers with per-sequence recurrent state) too: every rank runs the KDA layers on its own replica of
the state slots, whose ids come with each step. A rank that dies ends the job with an error, not
a hang."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import LATENT, run_latent

MPIRUN = shutil.which("mpirun")


@pytest.fixture(autouse=True)
def need_mpirun():
    if MPIRUN is None:
        pytest.fail("mpirun is missing: `make setup` installs openmpi-bin and libopenmpi-dev")

PROMPT = "3,17,29,4,88,101,7,250,64,5,19,42,77,8"


def mpi_env() -> dict:
    env = dict(os.environ)
    # Tests run as root in CI containers; mpirun refuses that unless told.
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    env.pop("LATENT_THREADS", None)
    return env


def mpirun_args(ranks: int, *args: str) -> list[str]:
    return [MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", str(ranks), str(LATENT),
            "--threads", "1", *args]


def run_mpi(ranks: int, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(mpirun_args(ranks, *args), capture_output=True, text=True,
                          env=mpi_env(), timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"mpirun -np {ranks} latent {' '.join(args)} failed "
                             f"({proc.returncode}):\n{proc.stderr}")
    return proc


def logits_of(stdout: str) -> np.ndarray:
    return np.array(json.loads(stdout)["logits"], dtype=np.float64)


@pytest.fixture(scope="module")
def models(tiny_models):
    return {p: tiny_models.get(p) for p in ("deepseek_v3", "deepseek_v32", "kimi_linear")}


@pytest.mark.parametrize("preset", ["deepseek_v3", "deepseek_v32", "kimi_linear"])
@pytest.mark.parametrize("form", ["absorbed", "expanded"])
@pytest.mark.parametrize("ranks", [2, 4])
def test_logits_match_one_process(models, preset, form, ranks):
    # Three chunks through the paged cache: later chunks read the rows the earlier ones wrote on
    # every rank's replica (kimi_linear: and carry on from the KDA state the earlier ones left).
    args = ("logits", "--model", str(models[preset]), "--ids", PROMPT, "--attention", form,
            "--chunk-tokens", "5", "--block-tokens", "4")
    one = logits_of(run_latent("--threads", "1", *args).stdout)
    many = logits_of(run_mpi(ranks, *args).stdout)
    assert many.shape == one.shape
    scale = np.abs(one).max()
    assert np.abs(many - one).max() <= 1e-5 * scale
    assert (many.argmax(-1) == one.argmax(-1)).all()


@pytest.mark.parametrize("preset", ["deepseek_v3", "deepseek_v32", "kimi_linear"])
@pytest.mark.parametrize("form", ["absorbed", "expanded"])
def test_greedy_32_tokens_identical(models, preset, form):
    args = ("generate", "--model", str(models[preset]), "--ids", PROMPT, "--max-tokens", "32",
            "--ignore-eos", "--attention", form)
    one = json.loads(run_latent("--threads", "1", *args).stdout)["ids"]
    two = json.loads(run_mpi(2, *args).stdout)["ids"]
    assert len(one) == 32
    assert two == one


@pytest.mark.parametrize("preset", ["deepseek_v3", "kimi_linear"])
def test_engine_batch_identical(models, tmp_path, preset):
    """The engine under 2 ranks: several requests batched, chunked prefill, a shared prefix and
    n = 2 samples (a fork copies a partial block on every rank; kimi_linear: and the KDA state
    slot) give what one process gives."""
    prompts = tmp_path / "prompts.jsonl"
    rows = [
        {"ids": [int(x) for x in PROMPT.split(",")], "max_tokens": 12},
        {"ids": [int(x) for x in PROMPT.split(",")][:9] + [33, 34, 35], "max_tokens": 10},
        {"ids": [5, 6, 7], "max_tokens": 16, "n": 2, "temperature": 0.8, "seed": 7},
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ("generate", "--model", str(models[preset]), "--prompts", str(prompts),
            "--max-batch-tokens", "8", "--block-tokens", "4", "--num-blocks", "64",
            "--check-invariants")
    one = run_latent("--threads", "1", *args).stdout
    two = run_mpi(2, *args).stdout
    assert two == one
    assert len(one.strip().splitlines()) == len(rows)


def summary_of(stderr: str) -> dict:
    lines = [l for l in stderr.splitlines() if l.startswith("latent: summary ")]
    return json.loads(lines[-1][len("latent: summary "):])


def test_hybrid_preemption_and_sampling_identical(models, tmp_path):
    """kimi_linear under 2 ranks with a cache too small for all requests at once: preempted
    sequences give their state slot back and are recomputed from position 0 (every rank resets
    the slot's state), forked samples copy their parent's slot on every rank, prompts arrive in
    chunks; greedy and seeded outputs are byte-identical to one process."""
    rng = np.random.default_rng(3)
    rows = []
    for i in range(8):
        row = {"ids": [int(x) for x in rng.integers(2, 250, size=int(rng.integers(10, 40)))],
               "max_tokens": 24, "ignore_eos": True}
        if i % 2:
            row.update(temperature=0.9, top_p=0.95, seed=40 + i)
        if i == 3:
            row["n"] = 2
        rows.append(row)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ("generate", "--model", str(models["kimi_linear"]), "--prompts", str(prompts),
            "--max-batch-tokens", "16", "--block-tokens", "4", "--num-blocks", "24",
            "--check-invariants")
    one = run_latent("--threads", "1", *args)
    two = run_mpi(2, *args)
    assert summary_of(one.stderr)["preemptions"] > 0, "the small cache forced no preemption"
    assert summary_of(two.stderr)["preemptions"] == summary_of(one.stderr)["preemptions"]
    assert two.stdout == one.stdout
    assert len(one.stdout.strip().splitlines()) == len(rows)


def test_info_per_rank(models):
    model = str(models["deepseek_v3"])
    one = json.loads(run_latent("info", "--model", model, "--json").stdout)
    proc = run_mpi(2, "info", "--model", model, "--json")
    info = json.loads(proc.stdout)  # rank 0 alone prints
    ranks = info["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert [r["routed_experts"] for r in ranks] == [[0, 6], [6, 12]]
    assert all(r["cache_bytes_per_token"] == one["cache_bytes_per_token"] for r in ranks)
    # Each rank holds everything but half the routed experts: the two shares add up to the whole
    # plus one copy of what is replicated.
    total = one["weights"]["bytes"]
    replicated = 2 * ranks[0]["weight_bytes"] - total  # equal halves of equal-size experts
    assert ranks[0]["weight_bytes"] == ranks[1]["weight_bytes"]
    assert 0 < replicated < total
    # --ranks without mpirun gives the same table.
    alone = json.loads(run_latent("info", "--model", model, "--json", "--ranks", "2").stdout)
    assert alone["ranks"] == ranks


def test_bench_times_prefill_and_decode_steps(models):
    """`latent bench --comm-detail` under 2 ranks: rank 0's prefill and decode steps timed apart,
    their time in collectives, and of that the transfer (per call the least time any rank spent
    in it), each a part of the one before."""
    proc = run_mpi(2, "bench", "--model", str(models["kimi_linear"]), "--pp", "12", "--tg", "5",
                   "--batch", "1,3", "--json", "--comm-detail")
    points = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert [p["batch"] for p in points] == [1, 3]
    for p in points:
        steps = p["steps"]
        # One prompt chunk per sequence (12 tokens fit the step budget), then 4 decode steps.
        assert steps["prefill"]["steps"] == 1 and steps["prefill"]["tokens"] == 12 * p["batch"]
        assert steps["decode"]["steps"] == 4 and steps["decode"]["tokens"] == 4 * p["batch"]
        assert "mixed" not in steps
        for k in steps.values():
            assert 0 < k["transfer_ms"] <= k["collective_ms"] <= k["step_ms"]
            assert k["transfer_share"] <= k["collective_share"] <= 1
    assert "latent bench: decode steps: 4, " in proc.stderr


@pytest.mark.parametrize("preset", ["deepseek_v3", "dots3_note"])
def test_bench_step_ranks_read_the_same_rows(tiny_models, preset):
    """`latent bench-step` writes its random cached rows on rank 0, outside a forward: they reach
    every rank (the workers' caches were zero, so their attention, routing and expert sums were
    not rank 0's). Each step's greedy tokens equal one process's. dots3_note: window rows too."""
    args = ["bench-step", "--model", str(tiny_models.get(preset)), "--context", "40",
            "--attention", "absorbed,expanded", "--batch", "4", "--steps", "4", "--json"]
    alone = [json.loads(l) for l in run_latent(*args).stdout.splitlines() if l.startswith("{")]
    ranked = [json.loads(l) for l in run_mpi(2, *args).stdout.splitlines() if l.startswith("{")]
    assert len(alone) == len(ranked) == 2
    for a, r in zip(alone, ranked):
        assert r["argmax"] == a["argmax"], (a["attention"], a["argmax"], r["argmax"])


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])
def test_lost_rank_ends_the_job(models, tmp_path, sig):
    """Rank 1 killed (SIGKILL: mpirun notices and ends the job, rank 0 says why) or hung
    (SIGSTOP: rank 0's step timeout ends it) mid-generation: the job exits non-zero within
    seconds with a message from rank 0."""
    prompts = tmp_path / "prompts.jsonl"
    # 256 sequences x 500 tokens: far more than the seconds the test waits before the signal.
    prompts.write_text("".join(
        json.dumps({"ids": [1 + i % 250, 2 + i // 250, 3], "max_tokens": 500, "ignore_eos": True})
        + "\n" for i in range(256)))
    env = mpi_env()
    env["LATENT_STEP_TIMEOUT"] = "3"
    proc = subprocess.Popen(
        mpirun_args(2, "generate", "--model", str(models["deepseek_v3"]), "--prompts",
                    str(prompts), "--num-blocks", "8192", "--block-tokens", "16"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    pid = None
    try:
        stderr = ""
        deadline = time.monotonic() + 60
        while pid is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            stderr += line
            m = re.search(r"rank 1 of 2 \(pid (\d+)\)", line)
            if m:
                pid = int(m.group(1))
        assert pid is not None, f"rank 1 never started:\n{stderr}"
        time.sleep(1.5)  # into the generation
        assert proc.poll() is None, "the job ended before the signal"
        sent_at = time.monotonic()
        os.kill(pid, getattr(signal, sig))
        _, rest = proc.communicate(timeout=30)
        took = time.monotonic() - sent_at
        stderr += rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)  # a stopped rank 1 that mpirun left behind
            except ProcessLookupError:
                pass
    assert proc.returncode != 0
    assert took < 15, f"the job took {took:.1f} s to end after {sig}"
    if sig == "SIGKILL":
        assert "rank 0 of 2: ended by mpirun (SIGTERM): another rank has exited" in stderr, stderr
    else:
        # Where rank 0 waits depends on the moment: the MoE sums or the step broadcast.
        assert re.search(r"rank 0 of 2: the (MoE partial sums|step broadcast).* did not complete "
                         r"within the step timeout \(3 s", stderr), stderr


def run_failing_job(argv: list[str], env: dict | None = None
                    ) -> tuple[subprocess.CompletedProcess, float]:
    """Runs a job one of whose ranks fails; returns it and its seconds. A job that hangs is killed
    after 60 s (the test then fails on the time)."""
    start = time.monotonic()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env or mpi_env(),
                              timeout=60)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"the job hung after a rank failed:\n{e.stderr}") from e
    return proc, time.monotonic() - start


def test_rank_0_failing_before_its_first_step_ends_the_job(models):
    """serve on a busy port: rank 0 fails before it has a model, while rank 1, its model loaded,
    waits for rank 0's first step without a deadline. The job ends at once with the error, not in
    MPI_Finalize waiting for rank 1 forever."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc, took = run_failing_job(mpirun_args(
            2, "serve", "--model", str(models["deepseek_v3"]), "--host", "127.0.0.1",
            "--port", str(port)))
    assert proc.returncode != 0, proc.stderr
    assert took < 20, f"the job took {took:.1f} s to end"
    assert re.search(rf"rank 0 of 2: cannot listen on 127\.0\.0\.1:{port} ", proc.stderr), \
        proc.stderr


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_one_rank_failing_to_load_ends_the_job(models, tmp_path, bad_rank):
    """One rank's --model does not exist (mpirun's MPMD form): rank 0 failing left rank 1
    waiting for its first step forever; rank 1 failing left rank 0 waiting for it in the first
    step until the step timeout (300 s). Either ends the job at once, naming the error."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"ids": [3, 17, 29], "max_tokens": 4}\n')
    argv = [MPIRUN, "--oversubscribe", "--bind-to", "none"]
    for rank in range(2):
        model = tmp_path / "missing" if rank == bad_rank else models["deepseek_v3"]
        argv += ([":"] if rank else []) + [
            "-np", "1", str(LATENT), "--threads", "1", "generate", "--model", str(model),
            "--prompts", str(prompts)]
    proc, took = run_failing_job(argv)
    assert proc.returncode != 0, proc.stderr
    assert took < 20, f"the job took {took:.1f} s to end"
    assert f"rank {bad_rank} of 2: " in proc.stderr and "missing" in proc.stderr, proc.stderr


@pytest.mark.parametrize("bad_rank", [1, 0])
def test_check_failing_on_one_rank_ends_the_job(models, tmp_path, bad_rank):
    """A LATENT_CHECK failing in one rank's forward (its second; LATENT_TEST_FAIL_CHECK, a
    test-only hook) is a bug the other rank need not share. It was taken for bad input, which
    fails every rank at the same point: the rank went on while the other waited for it in the
    step's collectives until the step timeout (30 s here, 300 s by default). Now the job ends at
    once with exit code 1, naming the rank and the check."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(
        json.dumps({"ids": [3 + i, 17, 29], "max_tokens": 8, "ignore_eos": True}) + "\n"
        for i in range(4)))
    env = mpi_env()
    env["LATENT_TEST_FAIL_CHECK"] = f"{bad_rank}:2"
    env["LATENT_STEP_TIMEOUT"] = "30"
    proc, took = run_failing_job(mpirun_args(
        2, "generate", "--model", str(models["deepseek_v3"]), "--prompts", str(prompts)), env)
    assert proc.returncode == 1, proc.stderr
    assert took < 20, f"the job took {took:.1f} s to end:\n{proc.stderr}"
    where = "rank 0" if bad_rank == 0 else "a worker rank"
    assert re.search(rf"rank {bad_rank} of 2: latent: the forward failed on {where}: internal "
                     r"error: \S*distributed_model\.cc:\d+: check failed: "
                     r"!InjectedCheckFailure\(", proc.stderr), proc.stderr
    assert "within the step timeout" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("ranks_with_it", ["both", "rank 1"])
def test_malformed_fail_check_hook_is_refused_at_start(models, tmp_path, ranks_with_it):
    """A LATENT_TEST_FAIL_CHECK that is not RANK:FORWARD was parsed inside every forward: set on
    every rank it failed each request as bad input, and set on rank 1 alone it failed rank 1's
    forward while rank 0 waited for it in the step's collectives until the step timeout. Every
    rank reads it once before it loads the model: the job ends at once, exit 2, naming it."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"ids": [3, 17, 29], "max_tokens": 4}\n')
    env = mpi_env()
    env["LATENT_STEP_TIMEOUT"] = "30"
    argv = [MPIRUN, "--oversubscribe", "--bind-to", "none"]
    for rank in range(2):
        hook = ["env", "LATENT_TEST_FAIL_CHECK=1:x"] if ranks_with_it == "both" or rank else []
        argv += ([":"] if rank else []) + ["-np", "1"] + hook + [
            str(LATENT), "--threads", "1", "generate", "--model", str(models["deepseek_v3"]),
            "--prompts", str(prompts)]
    proc, took = run_failing_job(argv, env)
    assert proc.returncode == 2, proc.stderr
    assert took < 20, f"the job took {took:.1f} s to end:\n{proc.stderr}"
    assert re.search(r"latent: error: rank [01] of 2: LATENT_TEST_FAIL_CHECK: '1:x' is not "
                     r"RANK:FORWARD", proc.stderr), proc.stderr
    assert proc.stdout == "", proc.stdout  # no request ran


def test_sliding_window_model_identical(tiny_models, tmp_path):
    """dots3_note (sliding-window layers of 16 tokens: a second, window block table per sequence
    whose early blocks are released as it advances) under 2 ranks: prompts longer than the window
    in chunks, greedy and seeded decodes past it give what one process gives, byte for byte."""
    rng = np.random.default_rng(11)
    rows = []
    for i in range(5):
        row = {"ids": [int(x) for x in rng.integers(2, 250, size=int(rng.integers(20, 60)))],
               "max_tokens": 24, "ignore_eos": True}
        if i % 2:
            row.update(temperature=0.9, top_p=0.95, seed=70 + i)
        rows.append(row)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ("generate", "--model", str(tiny_models.get("dots3_note")), "--prompts", str(prompts),
            "--max-batch-tokens", "16", "--block-tokens", "4", "--check-invariants")
    one = run_latent("--threads", "1", *args).stdout
    two = run_mpi(2, *args).stdout
    assert two == one
    assert len(one.strip().splitlines()) == len(rows)

