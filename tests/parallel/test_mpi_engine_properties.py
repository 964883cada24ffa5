"""The engine's properties (tests/property/test_engine_properties.py) with the engine under
`mpirun -np 2`: batched output equals each request alone in ONE process, preemption and prefix
hits change nothing, seeded sampling is independent of the batch, cancellation and refusals work.
On deepseek_v3 (shared experts), the batching ones also on longcat_flash (identity experts
added after the ranks' sum, two MLA sublayers per layer) and kimi_linear (KDA layers with
per-sequence state on every rank): the property tests' own functions, with their `latent generate
--prompts` runs under 2 ranks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "property"))

import test_engine_properties as props  # noqa: E402
from conftest import LATENT  # noqa: E402
from test_engine_properties import workload  # noqa: E402,F401 (fixture: alone in one process)
from test_mpi_ranks import MPIRUN, mpi_env, need_mpirun  # noqa: E402,F401 (fixture)

import subprocess  # noqa: E402


def run_latent_2_ranks(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([MPIRUN, "--oversubscribe", "--bind-to", "none", "-np", "2",
                           str(LATENT), "--threads", "1", *args],
                          capture_output=True, text=True, env=mpi_env(), timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"mpirun -np 2 latent {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stderr}")
    return proc


@pytest.fixture(autouse=True)
def engine_under_mpi(monkeypatch):
    # Only the property module's own runs (the engine's); conftest's latent_generate, the
    # "alone" reference, stays one process.
    monkeypatch.setattr(props, "run_latent", run_latent_2_ranks)


@pytest.fixture(scope="module")
def model_dir(tiny_models, request):
    return tiny_models.get(request.param)


# Every property on deepseek_v3; the batching ones on longcat_flash too (kept to these for time:
# each `latent generate` here is an mpirun).
BATCHING = pytest.mark.parametrize("model_dir", ["deepseek_v3", "longcat_flash", "kimi_linear"],
                               indirect=True)
V3 = pytest.mark.parametrize("model_dir", ["deepseek_v3"], indirect=True)


@BATCHING
@pytest.mark.parametrize("block_tokens,budget", [(16, 7)])
def test_batched_equals_alone(model_dir, workload, tmp_path, block_tokens, budget):  # noqa: F811
    props.test_batched_equals_alone(model_dir, workload, tmp_path, block_tokens, budget)


@BATCHING
def test_preemption_loses_nothing(model_dir, workload, tmp_path):  # noqa: F811
    props.test_preemption_loses_nothing(model_dir, workload, tmp_path)


@V3
def test_prefix_hits_equal_misses(model_dir, tmp_path):
    props.test_prefix_hits_equal_misses(model_dir, tmp_path)


@V3
def test_seeded_sampling_is_independent_of_the_batch(model_dir, tmp_path):
    props.test_seeded_sampling_is_independent_of_the_batch(model_dir, tmp_path)


@V3
def test_cancellation_frees_blocks(model_dir, tmp_path):
    props.test_cancellation_frees_blocks(model_dir, tmp_path)


@V3
def test_requests_that_can_never_fit_fail_alone(model_dir, tmp_path):
    props.test_requests_that_can_never_fit_fail_alone(model_dir, tmp_path)
