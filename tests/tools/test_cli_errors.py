"""The `latent` command refuses what it cannot do with exit 2 and one message naming the flag,
variable or file, where it used to crash, exit 0, or print a message about something else:
thread counts past a bound, output it could not write, a --prompt that failed, serve's sizes and
timeouts out of range, bench sizes that overflowed, directories given as files, input (stdin
closed or unreadable, a file whose read fails) that read as empty, flags that would be ignored,
and environment variables it could not read.

Run: .venv/bin/python -m pytest -q tests/tools/test_cli_errors.py
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import LATENT, REPO, run_latent

DEMO = REPO / "models" / "demo"
IDS = ["generate", "--model", str(DEMO), "--ids", "1,2,3", "--max-tokens", "2"]


def run_env(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LATENT), *args], capture_output=True, text=True,
                          env=dict(os.environ, **env))


def run_bounded(*args: str) -> subprocess.CompletedProcess:
    """For commands that, accepting what they should refuse, would serve or compute for long:
    the timeout fails the test instead of hanging it."""
    return subprocess.run([str(LATENT), *args], capture_output=True, text=True, timeout=120)


def refused(out: subprocess.CompletedProcess, *needles: str) -> None:
    """Exit 2, no crash, and every needle in the message."""
    text = (out.stderr or "") + (out.stdout or "")
    assert out.returncode == 2, (out.returncode, text)
    assert "terminate called" not in text and "internal error" not in text, text
    for needle in needles:
        assert needle in text, (needle, text)


def test_thread_counts_past_the_bound_are_refused_by_name():
    """100000 threads ended in std::terminate (exit 134) when the system refused one; the bound
    (1024) is checked as the count is read, before any thread starts."""
    refused(run_latent("--threads", "100000", *IDS, check=False), "--threads", "1024")
    refused(run_env({"LATENT_THREADS": "100000"}, *IDS), "LATENT_THREADS='100000'", "0 to 1024")
    refused(run_bounded("serve", "--model", str(DEMO), "--http-threads", "100000"),
            "--http-threads", "1024")


def test_zero_threads_means_the_default():
    """--threads 0 is the default; LATENT_THREADS=0 was refused."""
    assert run_env({"LATENT_THREADS": "0"}, *IDS).returncode == 0
    assert run_latent("--threads", "0", *IDS, check=False).returncode == 0


def test_commands_that_run_no_model_start_no_compute_threads():
    """Every command started the whole pool at start: tokenize held LATENT_THREADS threads."""
    proc = subprocess.Popen([str(LATENT), "tokenize", "--tokenizer", str(DEMO), "--jsonl", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, LATENT_THREADS="64"))
    try:
        proc.stdin.write(json.dumps({"text": "hello"}) + "\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["ids"]  # it has read and answered a line
        status = Path(f"/proc/{proc.pid}/status").read_text()
        threads = int(next(line.split()[1] for line in status.splitlines()
                           if line.startswith("Threads:")))
        assert threads == 1, status
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
    assert proc.returncode == 0


@pytest.mark.parametrize("env", [{"LATENT_THREADS": "abc"}, {"LATENT_THREADS": "-3"},
                                 {"LATENT_SPIN_US": "abc"}, {"LATENT_PIN_THREADS": "maybe"},
                                 {"LATENT_CHECK_WEIGHTS": "sometimes"},
                                 {"LATENT_PROFILE": "maybe"}, {"LATENT_ROWS_GATHER": "2"},
                                 {"LATENT_GEMM_MIN_ROWS": "abc"}, {"LATENT_GEMM": "bogus"},
                                 # These three ran with the default (exit 0) on any other value.
                                 {"LATENT_BF16_DOT": "x"}, {"LATENT_KERNELS": "REF"},
                                 {"LATENT_KERNELS": "foo"}, {"LATENT_KEY_FOLD": "foo"}])
def test_unreadable_environment_variables_are_refused_by_name(env):
    (name, value), = env.items()
    refused(run_env(env, *IDS), f"{name}='{value}'")


def test_kernel_variables_are_read_whatever_the_others_say():
    """LATENT_KERNELS=ref decides alone, but a bad LATENT_BF16_DOT or LATENT_GEMM beside it is
    still refused (the choice reads LATENT_BF16_DOT only where LATENT_KERNELS leaves it a say)."""
    for name, value in (("LATENT_BF16_DOT", "x"), ("LATENT_GEMM", "bogus")):
        refused(run_env({"LATENT_KERNELS": "ref", name: value}, *IDS), f"{name}='{value}'")


def kernels_under(env: dict[str, str]) -> str:
    out = run_env(env, "info", "--model", str(DEMO), "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["precision"]["kernels"]


def test_bf16_dot_takes_the_usual_boolean_spellings():
    """LATENT_BF16_DOT=true kept the default kernels: only "1" switched to avx512-bf16dot."""
    def dot(value: str) -> str:
        return kernels_under({"LATENT_BF16_DOT": value})
    assert dot("true") == dot("YES") == dot("1")
    assert dot("false") == dot("0") == kernels_under({})
    assert kernels_under({"LATENT_KERNELS": "ref"}) == "ref"


def test_profile_false_is_off():
    """LATENT_PROFILE=false turned the profile on (anything but 0 did)."""
    out = run_env({"LATENT_PROFILE": "false"}, *IDS)
    assert out.returncode == 0 and "prefill" not in out.stderr, out.stderr
    out = run_env({"LATENT_PROFILE": "true"}, *IDS)
    assert out.returncode == 0 and "prefill" in out.stderr, out.stderr


def test_boolean_variables_take_the_usual_spellings():
    for value in ("false", "0", "off", "TRUE", "1", "yes"):
        out = run_env({"LATENT_CHECK_WEIGHTS": value, "LATENT_PIN_THREADS": value}, *IDS)
        assert out.returncode == 0, (value, out.stderr)


def write_to(stdout, args, preexec=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(LATENT), *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, preexec_fn=preexec)


@pytest.mark.parametrize("args", [
    IDS,
    ["tokenize", "--tokenizer", str(DEMO), "--text", "hello"],
    ["info", "--model", str(DEMO)],
    ["logits", "--model", str(DEMO), "--ids", "1,2"],
])
def test_output_that_cannot_be_written_exits_2(args):
    """A full disk, a closed stdout and a pipe whose reader left (SIGPIPE ignored) used to exit 0
    with the output lost."""
    # The reason where the failing write is the last flush's: outputs smaller than the buffer.
    small = args[0] in ("generate", "tokenize")
    with open("/dev/full", "w") as full:
        out = write_to(full, args)
    refused(out, "latent: error: writing standard output: ",
            "No space left on device" if small else "")
    closed = subprocess.run(["bash", "-c", '"$0" "$@" >&-', str(LATENT), *args],
                            capture_output=True, text=True)
    refused(closed, "writing standard output: ", "Bad file descriptor" if small else "")
    read, write = os.pipe()
    os.close(read)
    try:
        out = write_to(write, args, lambda: signal.signal(signal.SIGPIPE, signal.SIG_IGN))
    finally:
        os.close(write)
    refused(out, "writing standard output: ", "Broken pipe" if small else "")


def test_output_that_is_written_exits_0(tmp_path):
    with open(tmp_path / "out", "w") as f:
        assert write_to(f, IDS).returncode == 0
    assert json.loads((tmp_path / "out").read_text())["ids"]


def no_tokenizer(tmp_path: Path) -> Path:
    model = tmp_path / "no_tokenizer"
    model.mkdir()
    for name in ("config.json", "generation_config.json", "model.safetensors"):
        (model / name).symlink_to(DEMO / name)
    return model


def test_a_prompt_that_fails_exits_2(tmp_path):
    """--prompt's one request failing (no tokenizer, too long) printed its error line and
    exited 0."""
    model = no_tokenizer(tmp_path)
    out = run_latent("generate", "--model", str(model), "--prompt", "hi", check=False)
    refused(out, "--prompt")
    assert json.loads(out.stdout.splitlines()[0])["error"]
    positions = json.loads((DEMO / "config.json").read_text())["max_position_embeddings"]
    long = " ".join(["hello"] * (positions + 8))
    refused(run_latent("generate", "--model", str(DEMO), "--prompt", long, check=False),
            "max_position_embeddings")
    refused(run_latent("generate", "--model", str(DEMO), "--prompt", "", check=False),
            "--prompt is empty")


def test_prompts_exit_2_only_when_every_line_fails(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": 5}\nnot json\n')
    out = run_latent("generate", "--model", str(DEMO), "--prompts", str(bad), check=False)
    refused(out, f"{bad}: every line failed (2 error lines on stdout)")
    assert [("error" in json.loads(l)) for l in out.stdout.splitlines()] == [True, True]
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"prompt": 5}\n{"ids": [1, 2], "max_tokens": 2}\n')
    out = run_latent("generate", "--model", str(DEMO), "--prompts", str(mixed), check=False)
    assert out.returncode == 0, out.stderr
    assert [("error" in json.loads(l)) for l in out.stdout.splitlines()] == [True, False]


@pytest.mark.parametrize("flag, value, needle", [
    ("--max-request-mib", "1e300", "must be at most 1048576"),
    ("--max-request-mib", "1e-9", "must be at least 0.0009765625"),
    ("--max-header-kib", "1e-9", "must be at least 1"),
    ("--shutdown-timeout", "1e300", "must be at most 10000000"),
    ("--shutdown-timeout", "nan", "must be a finite number"),
    ("--header-timeout", "inf", "must be a finite number"),
    ("--max-seqs", "0", "must be a positive integer, got 0"),
    ("--port", "70000", "must be at most 65535"),
])
def test_serve_sizes_and_times_are_checked_as_read(flag, value, needle):
    """Out of range they answered every POST 413 or 414, or cancelled requests at once."""
    refused(run_bounded("serve", "--model", str(DEMO), flag, value), flag, needle)


def test_serve_signalled_while_loading_exits_128_plus_the_signal(tmp_path):
    """It exited 0, which reads as a clean stop of a server that never became ready. The load
    stalls (LATENT_TEST_STALL_LOAD) while the marker file is there."""
    model = tmp_path / "blocked"
    model.mkdir()
    (model / "stall").touch()
    env = dict(os.environ, LATENT_TEST_STALL_LOAD="stall")
    proc = subprocess.Popen([str(LATENT), "serve", "--model", str(model), "--port", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    # A thread reads stderr, so that a server that never says "listening on" fails the test at
    # the deadline instead of blocking it in readline().
    lines: queue.Queue[str | None] = queue.Queue()

    def read_stderr() -> None:
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)  # end of stderr

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    seen = ""
    try:
        deadline = time.monotonic() + 60
        while "listening on" not in seen:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            seen += line
        assert "listening on" in seen, seen
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=60)
    finally:
        proc.kill()
        proc.wait()
    while not lines.empty():
        seen += lines.get() or ""
    assert proc.returncode == 128 + signal.SIGTERM, seen
    assert "SIGTERM while loading the model" in seen


def test_stall_hook_refuses_a_path():
    """The test-only load stall takes a file name in the model directory, nothing else."""
    out = subprocess.run([str(LATENT), "info", "--model", str(DEMO)], capture_output=True,
                         text=True, env=dict(os.environ, LATENT_TEST_STALL_LOAD="../x"))
    refused(out, "LATENT_TEST_STALL_LOAD: '../x' is not a file name")


@pytest.mark.parametrize("value", ["1e3", "5.0", "0x10", " 7"])
def test_integer_flags_take_digits_only(value):
    """1e3 and 5.0 passed the check as numbers, then CLI11 said "Could not convert"."""
    out = run_latent(*IDS[:-1], value, check=False)
    refused(out, f"--max-tokens: '{value}' is not an integer")
    assert "Could not convert" not in out.stderr


def test_bench_sizes_are_checked_before_allocating():
    steps = ["bench-step", "--model", str(DEMO)]
    refused(run_bounded(*steps, "--context", str(2**63 - 1)), "exceeds max_position_embeddings")
    refused(run_bounded(*steps, "--context", "16", "--steps", str(2**63 - 1)),
            "exceeds max_position_embeddings")
    refused(run_bounded(*steps, "--context", "16", "--batch", "1500000000"),
            "--batch 1500000000: at most 4096")
    bench = ["bench", "--model", str(DEMO), "--tg", "1", "--batch", "1", "--warmup", "0"]
    refused(run_bounded(*bench, "--pp", "2000000000"), "--pp 2000000000 + --tg 1 exceeds")
    refused(run_bounded("bench", "--model", str(DEMO), "--batch", "1500000000"),
            "--batch 1500000000: at most 65536")


def test_directories_are_not_input_files(tmp_path):
    refused(run_latent("generate", "--model", str(DEMO), "--prompts", str(tmp_path), check=False),
            f"--prompts {tmp_path}: is a directory, not a file")
    for flag in ("--jsonl", "--bench"):
        refused(run_latent("tokenize", "--tokenizer", str(DEMO), flag, str(tmp_path),
                           check=False), f"{flag} {tmp_path}: is a directory, not a file")
    for flag in ("--request", "--requests"):
        refused(run_latent("render-chat", "--tokenizer", str(DEMO), flag, str(tmp_path),
                           check=False), f"{flag} {tmp_path}: is a directory, not a file")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").mkdir()
    refused(run_latent(*IDS[:2], str(model), *IDS[3:], check=False),
            "config.json: is a directory, not a file")


STDIN_READERS = [
    ["tokenize", "--tokenizer", str(DEMO), "--jsonl", "-"],
    ["tokenize", "--tokenizer", str(DEMO), "--bench", "-"],
    ["detokenize", "--tokenizer", str(DEMO), "--jsonl", "-"],
    ["render-chat", "--tokenizer", str(DEMO), "--request", "-"],
    ["render-chat", "--tokenizer", str(DEMO), "--requests", "-"],
]


@pytest.mark.parametrize("args", STDIN_READERS, ids=lambda a: f"{a[0]}{a[3]}")
def test_a_closed_or_unreadable_stdin_is_refused(args):
    """A read error looked like the end of the input: with stdin closed, write-only or a
    directory, these printed nothing and exited 0."""
    flag = f"{args[3]} -: "
    closed = subprocess.run(["bash", "-c", '"$0" "$@" <&-', str(LATENT), *args],
                            capture_output=True, text=True)
    refused(closed, flag, "standard input is not open for reading")
    with open(os.devnull, "w") as write_only:
        refused(subprocess.run([str(LATENT), *args], stdin=write_only, capture_output=True,
                               text=True), flag, "standard input is not open for reading")
    directory = os.open("/", os.O_RDONLY)
    try:
        out = subprocess.run([str(LATENT), *args], stdin=directory, capture_output=True,
                             text=True)
    finally:
        os.close(directory)
    refused(out, flag, "reading standard input failed: Is a directory")


def test_a_closed_stdin_is_refused_by_its_path_too(tmp_path):
    """Held open on /dev/null when closed (so no file latent opens takes descriptor 0),
    /dev/stdin would read as an empty file."""
    for path in ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"):
        closed = subprocess.run(["bash", "-c", '"$0" "$@" <&-', str(LATENT), "generate",
                                 "--model", str(DEMO), "--prompts", path],
                                capture_output=True, text=True)
        refused(closed, f"--prompts {path}: standard input is not open for reading")


def test_a_file_that_fails_to_read_is_refused():
    """Reading /proc/self/mem from its start fails (EIO): that too looked like an empty file."""
    refused(run_latent("tokenize", "--tokenizer", str(DEMO), "--jsonl", "/proc/self/mem",
                       check=False), "--jsonl /proc/self/mem: reading failed: Input/output error")
    refused(run_latent("generate", "--model", str(DEMO), "--prompts", "/proc/self/mem",
                       check=False), "--prompts /proc/self/mem: reading failed: Input/output error")


def test_stdin_is_read(tmp_path):
    """The checks leave a readable stdin (a file, a pipe) alone."""
    lines = tmp_path / "lines.jsonl"
    lines.write_text('{"text": "hello"}\n')
    with open(lines) as f:
        out = subprocess.run([str(LATENT), *STDIN_READERS[0]], stdin=f, capture_output=True,
                             text=True)
    assert out.returncode == 0 and json.loads(out.stdout)["ids"], out.stderr
    chat = '{"messages": [{"role": "user", "content": "hi"}]}\n'
    out = subprocess.run([str(LATENT), *STDIN_READERS[4]], input=chat, capture_output=True,
                         text=True)
    assert out.returncode == 0 and json.loads(out.stdout).endswith("hi<|end|>"), out.stderr


def test_missing_input_files_name_their_flag(tmp_path):
    missing = str(tmp_path / "missing")
    refused(run_latent("generate", "--model", str(DEMO), "--prompt", "hi",
                       "--debug-replay", missing, check=False),
            f"--debug-replay {missing}: cannot open: No such file")
    refused(run_latent("generate", "--model", str(DEMO), "--prompts", missing, check=False),
            f"--prompts {missing}: cannot open: No such file")


def test_flags_that_would_be_ignored_are_refused():
    refused(run_latent("logits", "--model", str(DEMO), "--ids", "1,2,3", "--experts",
                       "--chunk-tokens", "2", check=False), "--experts", "--chunk-tokens")
    refused(run_latent(*IDS, "--speculative-ngram-max", "3", check=False),
            "--speculative-ngram-max requires --speculative-tokens")
    refused(run_latent("generate", "--model", str(DEMO), "--prompt", "hi",
                       "--speculative-ngram-min", "2", check=False),
            "--speculative-ngram-min requires --speculative-tokens")


def test_messages_name_what_is_wrong():
    refused(run_latent(*IDS[:-1], "99999999999999999999", check=False),
            "--max-tokens", "must be at most 9223372036854775807")
    refused(run_latent("bogus", check=False), "unknown command 'bogus'", "generate")
    out = run_latent("generate", "--model", str(DEMO), "--prompt", "hi", "--cache-memory", "2e10",
                     check=False)
    refused(out, "KV cache needs")
    assert "holds no cache block" not in out.stderr


@pytest.mark.parametrize("args", [IDS, ["info", "--model", str(DEMO)],
                                  ["logits", "--model", str(DEMO), "--ids", "1,2"]])
def test_an_unknown_cache_dtype_names_the_flag(args):
    """As --precision, --quantize and --attention name theirs (it said only "unknown cache
    dtype")."""
    refused(run_latent(*args, "--cache-dtype", "fp16", check=False),
            "latent: error: --cache-dtype: unknown cache dtype 'fp16' (supported: auto, f32, bf16, "
            "fp8)")


def test_version_and_help_texts():
    out = run_latent("--version")
    pyproject = (REPO / "pyproject.toml").read_text()
    version = next(l.split('"')[1] for l in pyproject.splitlines() if l.startswith("version = "))
    assert out.stdout.startswith(f"latent {version} (source "), out.stdout
    serve = run_latent("serve", "--help").stdout
    assert "one per core, at least 2 and at most 16" in " ".join(serve.split())
    bench = " ".join(run_latent("bench", "--help").stdout.split())
    assert "1,4,16" in bench and "128" in bench
    render = " ".join(run_latent("render-chat", "--help").stdout.split())
    assert "--request FILE" in render
