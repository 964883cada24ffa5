"""/metrics and /health answer in milliseconds while a long prefill runs: the engine publishes a
snapshot of its counters at step boundaries, so a scrape never waits for the step in flight.

The model is a tiny DeepSeek V3 with a 4k context; one 2,000-token prefill step (absorbed form,
the whole prompt in one step) runs on the scalar reference kernels (LATENT_KERNELS=ref), so it
takes over a second whatever the CPU: on AMX tiles the same step ends in under 0.1 s, too soon
for enough probes. Its prompt is token ids (no tokenizer). The probes are checked to have run
while that prefill was in flight: the request had been admitted (running 1), no engine step had
ended since (steps_total unchanged) and its token had not come.
"""

from __future__ import annotations

import statistics
import threading
import time

import pytest

from e2e_harness import MODEL_NAME, LatentServer, parse_metrics

PROMPT_TOKENS = 2000
LIMIT_S = 0.050
# The preset's dims with a 4k context; 2 layers keep the prefill on the reference kernels at a
# second or two on 2 cores (the attention over 2,000 positions dominates): many probes, quickly.
CONFIG = {
    "vocab_size": 256,
    "num_hidden_layers": 2,
    "max_position_embeddings": 4096,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


@pytest.fixture(scope="module")
def long_model(tiny_models):
    return tiny_models.get("deepseek_v3", config=CONFIG)


def timed_get(srv: LatentServer, path: str) -> tuple[float, int, bytes]:
    start = time.monotonic()
    status, body = srv.request("GET", path, timeout=10)
    return time.monotonic() - start, status, body


def test_metrics_answer_within_50ms_during_a_2000_token_prefill(long_model, tmp_path):
    # One step runs the whole prompt: the budget covers it.
    srv = LatentServer(long_model, tmp_path / "serve.log", "--block-tokens", "64",
                       "--num-blocks", "64", "--max-batch-tokens", "2048", "--attention",
                       "absorbed", env={"LATENT_KERNELS": "ref"})
    try:
        idle = srv.metrics()
        prompt = [(7 * i + 3) % CONFIG["vocab_size"] for i in range(PROMPT_TOKENS)]
        done = threading.Event()
        result: dict = {}

        def run() -> None:
            try:
                result["response"] = srv.post("/v1/completions", {
                    "model": MODEL_NAME, "prompt": prompt, "max_tokens": 1, "temperature": 0},
                    timeout=300)
            finally:
                done.set()

        thread = threading.Thread(target=run)
        thread.start()
        # Wait until the engine has taken the request into a step.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not done.is_set():
            if srv.metrics()["latent_num_requests_running"] == 1:
                break
            time.sleep(0.005)
        in_step = srv.metrics()
        assert in_step["latent_num_requests_running"] == 1, f"the prefill never started:\n{srv.log()}"

        rounds = []  # [(health seconds, metrics seconds, metrics)] while the request runs
        while not done.is_set() and len(rounds) < 40:
            health_s, status, body = timed_get(srv, "/health")
            assert status == 200, ("/health", status, body)
            metrics_s, status, body = timed_get(srv, "/metrics")
            assert status == 200, ("/metrics", status, body)
            rounds.append((health_s, metrics_s, parse_metrics(body.decode())))
            time.sleep(0.02)
        thread.join(timeout=300)
        status, out = result["response"]
        assert status == 200 and out["usage"]["prompt_tokens"] == PROMPT_TOKENS, out

        # The rounds that ran while the prefill step was in flight: the /metrics answer (read
        # after the round's /health) shows the request running, no step ended since it was
        # taken, and its token not yet generated.
        def in_flight(m: dict) -> bool:
            return (m["latent_num_requests_running"] == 1 and
                    m["latent_engine_steps_total"] == in_step["latent_engine_steps_total"] and
                    m["latent_generation_tokens_total"] == idle["latent_generation_tokens_total"])

        during = [r for r in rounds if in_flight(r[2])]
        assert len(during) >= 3, (
            f"only {len(during)} probe rounds ran during the prefill (of {len(rounds)}); the "
            f"prefill is too quick to test:\n{srv.log()}")
        # Every probe counts, not only the in-flight ones: a scrape that waited for the step
        # would return after it, and be the slow one.
        times = [t for r in rounds for t in r[:2]]
        slow = [f"{t * 1e3:.1f} ms" for t in times if t >= LIMIT_S]
        assert not slow, (f"answers over {LIMIT_S * 1e3:.0f} ms while the prefill ran: {slow}; "
                          f"median {statistics.median(times) * 1e3:.1f} ms of {len(times)}")
    finally:
        srv.stop()
