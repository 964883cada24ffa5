"""Soak under cache pressure (issue 18, point 2): 256 concurrent seeded streams (temperature 0.9,
top-p 0.95) on a cache far smaller than the load, so that sequences are preempted and recomputed,
against the tiny DeepSeek V3 with the real 128,815-id vocabulary (where any difference in the
logits' last bits changes a sampled token). A quarter of the clients hang up at random points, a
few send half a request and stall, a few send garbage. Afterwards:
- every stream that was read to the end equals the same request's answer from the quiet server
  (one request at a time), token for token: seeded sampling is batch-independent, with the
  default `--attention auto`;
- no stream is lost or left hanging: every full reader got its tokens, usage and one [DONE];
- the requests, the HTTP connections and the cache blocks in use all go back to 0 (the pool is
  full again);
- the server's resident memory after the soak is within 10% of before it (after a warm-up round
  of the same load).
Prints the figures (streams, preemptions, cut clients, RSS). About 4 minutes on 2 cores (the seeded top-p sampler over 129k ids dominates).

Run alone: .venv/bin/python -m pytest -q -s tests/soak/test_cache_pressure.py
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

from load_clients import request_bytes, stream_completion, timed_exchange

from e2e_harness import HOST, LatentServer

TOKENIZER = Path(__file__).resolve().parents[2].parent / "shared" / "tokenizers" / "deepseek_v3"
STREAMS = 256
CUT = STREAMS // 4  # Clients that hang up mid-stream.
STALLED = 8         # Clients that send half a request and wait.
GARBAGE = 4
MAX_TOKENS = 12
# 96 blocks of 16 tokens hold about 20 of the 64 sequences a step may run: decodes run out of
# blocks and preempt.
FLAGS = ("--block-tokens", "16", "--num-blocks", "96", "--max-seqs", "64",
         "--max-batch-tokens", "512", "--max-waiting", "1024", "--keep-alive-timeout", "600")


def body(i: int, rng: random.Random, vocab: int, stream: bool = True) -> dict:
    prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(4, 80))]
    b = {"model": "tiny", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0.9,
         "top_p": 0.95, "seed": 7000 + i, "ignore_eos": True, "return_token_ids": True}
    if stream:
        b.update(stream=True, stream_options={"include_usage": True})
    return b


async def cut_stream(port: int, body: dict, after_chunks: int) -> int:
    """Reads `after_chunks` chunks of a stream, then hangs up without a word; returns the chunks
    read (fewer when the stream ended first)."""
    reader, writer = await asyncio.open_connection(HOST, port, limit=1 << 20)
    read = 0
    try:
        writer.write(request_bytes("POST", "/v1/completions", json.dumps(body).encode()))
        await reader.readuntil(b"\r\n\r\n")
        while read < after_chunks:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                break
            await reader.readexactly(size + 2)
            read += 1
    finally:
        writer.transport.abort()
    return read


async def stall(port: int, body: dict, until: asyncio.Event) -> None:
    """Sends the head and half of the body, then waits (the server must not wait for it)."""
    reader, writer = await asyncio.open_connection(HOST, port)
    data = request_bytes("POST", "/v1/completions", json.dumps(body).encode())
    writer.write(data[: len(data) - len(json.dumps(body)) // 2])
    await until.wait()
    writer.transport.abort()


async def soak(port: int, vocab: int, seed: int) -> dict:
    rng = random.Random(seed)
    bodies = [body(i, rng, vocab) for i in range(STREAMS)]
    cut = set(rng.sample(range(STREAMS), CUT))
    done = asyncio.Event()
    stalled = [asyncio.create_task(stall(port, bodies[i], done)) for i in range(STALLED)]
    tasks = []
    for i, b in enumerate(bodies):
        if i in cut:
            tasks.append(asyncio.create_task(cut_stream(port, b, rng.randint(0, MAX_TOKENS))))
        else:
            tasks.append(asyncio.create_task(stream_completion(port, b)))
    garbage = [asyncio.to_thread(timed_exchange, port, random.Random(seed + g).randbytes(4096))
               for g in range(GARBAGE)]
    garbage_answers = await asyncio.gather(*garbage)
    results = await asyncio.gather(*tasks)
    done.set()
    await asyncio.gather(*stalled)
    return {"bodies": bodies, "cut": cut, "results": results, "garbage": garbage_answers}


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def settle(srv: LatentServer, timeout: float = 30) -> dict:
    """/metrics once nothing is in flight any more (hang-ups are noticed within a step)."""
    deadline = time.monotonic() + timeout
    while True:
        m = srv.metrics()
        idle = (m["latent_num_requests_running"] == 0 and m["latent_num_requests_waiting"] == 0
                and m["latent_http_requests_in_flight"] == 0)
        if idle or time.monotonic() > deadline:
            return m
        time.sleep(0.2)


def test_soak_under_cache_pressure(tiny_models, tmp_path):
    model = tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER))
    vocab = json.loads((model / "config.json").read_text())["vocab_size"]
    assert vocab > 128000
    srv = LatentServer(model, tmp_path / "serve.log", *FLAGS)
    try:
        asyncio.run(soak(srv.port, vocab, seed=1))  # Warm-up: buffers reach their working size.
        settle(srv)
        rss_before = rss_kib(srv.proc.pid)
        before = srv.metrics()
        started = time.monotonic()
        out = asyncio.run(soak(srv.port, vocab, seed=2))
        wall = time.monotonic() - started
        after = settle(srv)
        rss_after = rss_kib(srv.proc.pid)
        # The quiet answers: each full-read request again, alone, non-streamed.
        quiet = {}
        for i, b in enumerate(out["bodies"]):
            if i in out["cut"]:
                continue
            q = dict(b, stream=False)
            q.pop("stream_options")
            status, answer = srv.post("/v1/completions", q)
            assert status == 200, answer
            quiet[i] = answer["choices"][0]["token_ids"]
        final = srv.metrics()
    finally:
        returncode = srv.stop()
    assert returncode == 0, srv.log()[-3000:]

    results = out["results"]
    full = [i for i in range(STREAMS) if i not in out["cut"]]
    lost = [(i, results[i].error) for i in full if results[i].error or not results[i].done]
    assert not lost, f"{len(lost)} streams lost or unfinished, e.g. {lost[:3]}"
    for i in full:
        assert results[i].usage["completion_tokens"] == MAX_TOKENS, results[i].usage
        assert results[i].token_ids == quiet[i], f"stream {i} differs from its quiet answer"
    for seconds, answer in out["garbage"]:
        assert answer.startswith(b"HTTP/1.1 4"), answer[:100]

    preemptions = after["latent_num_preemptions_total"] - before["latent_num_preemptions_total"]
    assert preemptions > 0, "the small cache forced no preemption"
    for m in (after, final):
        assert m["latent_cache_blocks_used"] == 0
        assert m["latent_num_requests_running"] == 0 and m["latent_num_requests_waiting"] == 0
        assert m["latent_http_requests_in_flight"] == 0
    assert rss_after <= 1.10 * rss_before, f"RSS {rss_before} -> {rss_after} KiB"

    cut_early = sum(1 for i in out["cut"] if results[i] < MAX_TOKENS)
    print(f"\n{STREAMS} seeded streams x {MAX_TOKENS} tokens on {FLAGS[3]} blocks: {wall:.1f} s; "
          f"{preemptions:.0f} preemptions; {len(out['cut'])} clients hung up ({cut_early} before "
          f"their last token), {STALLED} stalled, {GARBAGE} garbage; {len(full)} full streams "
          f"equal to their quiet answers; RSS {rss_before / 1024:.1f} -> {rss_after / 1024:.1f} MiB")
