"""64 streaming clients at once: all complete, each output equals the same prompt run alone
(greedy), they were in flight together and the engine batched them, and /metrics counts exactly
what was sent."""

from __future__ import annotations

import threading

from e2e_harness import MODEL_NAME, chat_model, server  # noqa: F401 (fixtures)

CLIENTS = 64
DISTINCT = 32  # Each prompt is sent by two clients: identical prompts also share cache blocks.
MAX_TOKENS = 8


def prompt(i: int) -> str:
    k = i % DISTINCT
    return f"Request {k}: " + " ".join(["tell me about"] * (1 + k % 5)) + f" topic {k}"


def test_64_concurrent_streams(server):
    client = server.client()
    # The reference: each prompt alone, one request at a time.
    reference = {}
    for i in range(DISTINCT):
        r = client.completions.create(model=MODEL_NAME, prompt=prompt(i), max_tokens=MAX_TOKENS,
                                      temperature=0, extra_body={"return_token_ids": True})
        c = r.choices[0]
        reference[i] = (c.text, c.model_extra["token_ids"], c.finish_reason)

    before = server.metrics()
    results: list = [None] * CLIENTS
    errors: list = []
    start = threading.Barrier(CLIENTS + 1)

    def run(i: int) -> None:
        try:
            own = server.client()  # One connection per client.
            start.wait(timeout=60)
            chunks = list(own.completions.create(
                model=MODEL_NAME, prompt=prompt(i), max_tokens=MAX_TOKENS, temperature=0,
                stream=True, stream_options={"include_usage": True},
                extra_body={"return_token_ids": True}))
            text = "".join(c.choices[0].text for c in chunks if c.choices)
            ids = [t for c in chunks if c.choices for t in c.choices[0].model_extra["token_ids"]]
            finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
            results[i] = (text, ids, finish, chunks[-1].usage)
            own.close()
        except Exception as e:  # Reported below, with the client's index.
            errors.append((i, repr(e)))

    # /metrics scraped over and over while the streams run: an HTTP thread reads the engine's
    # and the server's counters while the engine loop and the other HTTP threads update them
    # (what `make test-tsan` checks for data races).
    streams_done = threading.Event()
    scrapes: list = []

    def scrape() -> None:
        try:
            while not streams_done.is_set():
                scrapes.append(server.metrics())
                streams_done.wait(0.05)  # About 20 scrapes a second, not a busy loop.
        except Exception as e:
            errors.append(("metrics", repr(e)))

    scraper = threading.Thread(target=scrape)
    scraper.start()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(CLIENTS)]
    for t in threads:
        t.start()
    start.wait(timeout=60)
    for t in threads:
        t.join(timeout=300)
    streams_done.set()
    scraper.join(timeout=60)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads), "a client never finished"
    assert not scraper.is_alive() and scrapes, "/metrics was not scraped while the streams ran"
    for m in scrapes:  # Each scrape is a consistent snapshot of gauges within their bounds.
        assert 0 <= m["latent_cache_usage_ratio"] <= 1
        assert 0 <= m["latent_num_requests_running"] + m["latent_num_requests_waiting"] <= CLIENTS
        assert 0 <= m["latent_http_requests_in_flight"] <= CLIENTS + 1

    for i, (text, ids, finish, usage) in enumerate(results):
        ref_text, ref_ids, ref_finish = reference[i % DISTINCT]
        assert (text, ids, finish) == (ref_text, ref_ids, ref_finish), f"client {i}"
        assert usage.completion_tokens == len(ids)

    # /metrics agrees with what was sent.
    after = server.metrics()

    def delta(name: str) -> float:
        return after.get(name, 0) - before.get(name, 0)

    usages = [r[3] for r in results]
    assert delta("latent_prompt_tokens_total") == sum(u.prompt_tokens for u in usages)
    assert delta("latent_generation_tokens_total") == sum(u.completion_tokens for u in usages)
    finished = sum(delta(f'latent_request_success_total{{finished_reason="{r}"}}')
                   for r in ("stop", "length", "abort", "error"))
    assert finished == CLIENTS
    assert delta('latent_request_success_total{finished_reason="abort"}') == 0
    assert delta('latent_http_responses_total{path="/v1/completions",status="200"}') == CLIENTS
    assert delta("latent_time_to_first_token_seconds_count") == CLIENTS
    assert delta("latent_e2e_request_latency_seconds_count") == CLIENTS
    assert (delta("latent_inter_token_latency_seconds_count") ==
            sum(u.completion_tokens - 1 for u in usages))
    # Batched: on average at least 4 of the clients' tokens per engine step (alone: 1).
    assert delta("latent_engine_steps_total") * 4 <= delta("latent_generation_tokens_total")
    assert (delta("latent_prefix_cache_hits_total") ==
            sum(u.prompt_tokens_details.cached_tokens for u in usages))
    assert after["latent_num_requests_running"] == 0 and after["latent_num_requests_waiting"] == 0
    assert after["latent_http_requests_in_flight"] == 0
    assert after["latent_cache_blocks_used"] == 0 and after["latent_cache_usage_ratio"] == 0


def test_metrics_exposition(server):
    """The families the issue names, in Prometheus text format."""
    status, body = server.request("GET", "/metrics")
    text = body.decode()
    assert status == 200
    for family, kind in [("latent_num_requests_running", "gauge"),
                         ("latent_num_requests_waiting", "gauge"),
                         ("latent_cache_usage_ratio", "gauge"),
                         ("latent_prefix_cache_hit_rate", "gauge"),
                         ("latent_num_preemptions_total", "counter"),
                         ("latent_prompt_tokens_total", "counter"),
                         ("latent_generation_tokens_total", "counter"),
                         ("latent_time_to_first_token_seconds", "histogram"),
                         ("latent_inter_token_latency_seconds", "histogram")]:
        assert f"# TYPE {family} {kind}\n" in text, family
        assert f"# HELP {family} " in text, family
    m = server.metrics()
    buckets = sorted((float(k.split('le="')[1].rstrip('"}')), v) for k, v in m.items()
                     if k.startswith("latent_time_to_first_token_seconds_bucket") and "+Inf" not in k)
    counts = [v for _, v in buckets]
    assert counts == sorted(counts), "histogram buckets must be cumulative"
    ttft = "latent_time_to_first_token_seconds"
    assert m[ttft + '_bucket{le="+Inf"}'] == m[ttft + "_count"]
    assert 0 <= m["latent_prefix_cache_hit_rate"] <= 1
