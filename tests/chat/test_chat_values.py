"""How request values reach a chat template through `latent render-chat`, against Python and
transformers: strings printed inside a list or dict use Python's repr (CPython 3.11's
str.isprintable decides what is escaped, as in transformers' jinja2), integers stay exact or are
refused by place (never turned into floats), and add_generation_prompt among the template kwargs
wins as vLLM lets it (a bool, as the request's own switch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conftest import LATENT  # noqa: E402

TOKENIZERS = Path("/work/shared/tokenizers")


def render(template: str, request: dict | str, tmp_path: Path) -> subprocess.CompletedProcess:
    if not LATENT.exists():
        raise RuntimeError(f"{LATENT} is missing: run `make build` first")
    tdir = tmp_path / "tok"
    tdir.mkdir(exist_ok=True)
    (tdir / "chat_template.jinja").write_text(template, encoding="utf-8")
    body = request if isinstance(request, str) else json.dumps(request, ensure_ascii=False)
    return subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request", "-"],
                          input=body.encode("utf-8"), capture_output=True)


def repr_sample() -> list[str]:
    """Code points to print: every one below U+3000, every 7th after (surrogates left out: UTF-8
    cannot hold them), and ones Unicode 15.0 assigned, which Python 3.11 (Unicode 14.0) escapes."""
    points = list(range(0x3000)) + list(range(0x3000, 0x110000, 7))
    points += [0x0CF3, 0x1F6DC, 0x1F7D9, 0x31350, 0x11F00, 0x1E4D0, 0xE0001, 0x2028, 0xAD, 0x3000]
    return [chr(cp) for cp in points if not 0xD800 <= cp <= 0xDFFF]


def test_lists_print_strings_as_python_repr(tmp_path):
    chars = repr_sample()
    items = ["".join(chars[i:i + 64]) for i in range(0, len(chars), 64)]
    items += ["it's", 'say "x"', "both ' and \"", "back\\slash", "\t\n\r\x00\x7f"]
    request = {"messages": [{"role": "user", "content": "x", "items": items,
                             "map": {"k\u2028": "v\u00a0", "\U000e0100": ["\u200b"]}}]}
    proc = render("{{ messages[0]['items'] }}|{{ messages[0]['map'] }}", request, tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = proc.stdout.decode("utf-8")
    # Python's str() of a list or dict is repr() of its items, as jinja2 prints them.
    want = f"{items}|{request['messages'][0]['map']}"
    got_items, want_items = got.split("', "), want.split("', ")
    bad = [(g, w) for g, w in zip(got_items, want_items) if g != w]
    assert not bad, (f"{len(bad)} items differ; first: latent {ascii(bad[0][0])}, "
                     f"python {ascii(bad[0][1])}")
    assert got == want


@pytest.mark.parametrize("value", [-9223372036854775808, 9223372036854775807, -1, 0])
def test_sixty_four_bit_integers_print_exactly(value, tmp_path):
    from transformers import AutoTokenizer

    template = "{{ messages[0].x | tojson }}|{{ messages[0].x }}|{{ n }}"
    messages = [{"role": "user", "content": "c", "x": [value, {"y": value}]}]
    tokenizer = AutoTokenizer.from_pretrained(str(TOKENIZERS / "deepseek_v3"))
    want = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False,
                                         n=value)
    proc = render(template, {"messages": messages, "chat_template_kwargs": {"n": value}},
                  tmp_path)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert proc.stdout.decode("utf-8") == want


@pytest.mark.parametrize("value,where", [
    (-9223372036854775809, "messages[0].x[1].y"),
    (9223372036854775808, "messages[0].x[1].y"),
    (2**64, "messages[0].x[1].y"),
    (-(10**40), "messages[0].x[1].y"),
])
def test_integers_past_sixty_four_bits_are_refused_by_place(value, where, tmp_path):
    """transformers would keep the exact int; latent's template values hold 64 bits, so it
    refuses rather than print a float such as -9.223372036854776e+18."""
    messages = [{"role": "user", "content": "c", "x": [1, {"y": value}]}]
    proc = render("{{ messages[0].x | tojson }}", {"messages": messages}, tmp_path)
    assert proc.returncode == 2
    assert (f"latent: error: -: integer {value} at {where} is too large (64-bit limit)"
            in proc.stderr.decode()), proc.stderr.decode()
    proc = render("{{ k }}", {"messages": [{"role": "user", "content": "c"}],
                              "chat_template_kwargs": {"k": [value]}}, tmp_path)
    assert proc.returncode == 2
    assert f"integer {value} at chat_template_kwargs.k[0] is too large" in proc.stderr.decode()


def test_add_generation_prompt_among_the_kwargs_wins(tmp_path):
    from transformers import AutoTokenizer

    tdir = TOKENIZERS / "qwen3"
    messages = [{"role": "user", "content": "hi"}]
    tokenizer = AutoTokenizer.from_pretrained(str(tdir))
    for top, inner in [(False, True), (True, False)]:
        # vLLM: apply_chat_template's arguments updated with chat_template_kwargs.
        want = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=inner)
        request = {"messages": messages, "add_generation_prompt": top,
                   "chat_template_kwargs": {"add_generation_prompt": inner}}
        proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request",
                               "-"], input=json.dumps(request).encode(), capture_output=True)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode("utf-8") == want


@pytest.mark.parametrize("value", ["yes", None, 1, [True]])
def test_add_generation_prompt_must_be_a_bool(value, tmp_path):
    """The server refuses a non-bool add_generation_prompt (400) and takes null as the default;
    render-chat does the same at the top level (its default, false, is transformers'), and refuses
    any non-bool among the kwargs, each error starting with `chat request:`."""
    messages = [{"role": "user", "content": "hi"}]
    top = render("{{ add_generation_prompt }}",
                 {"messages": messages, "add_generation_prompt": value}, tmp_path)
    if value is None:
        assert top.returncode == 0 and top.stdout == b"False", top.stderr
    else:
        assert top.returncode == 2
        assert (b'latent: error: chat request: "add_generation_prompt" must be true or false'
                in top.stderr), top.stderr
    inner = render("{{ add_generation_prompt }}",
                   {"messages": messages, "chat_template_kwargs": {"add_generation_prompt": value}},
                   tmp_path)
    assert inner.returncode == 2
    # In the server's words for it (and Python's LLM.chat's): one message wherever kwargs go.
    assert (b"latent: error: chat request: 'chat_template_kwargs.add_generation_prompt' must be a "
            b"boolean\n" in inner.stderr), inner.stderr


def test_requests_errors_name_their_line(tmp_path):
    """render-chat --requests: every failed line's error starts FILE:LINE:, the template's and
    the request's as well as the JSON's (only those said where, as "FILE line N")."""
    tdir = tmp_path / "tok"
    tdir.mkdir()
    (tdir / "chat_template.jinja").write_text("{{ messages[0].content }}", encoding="utf-8")
    path = tmp_path / "requests.jsonl"
    path.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n{"messages": []}\n'
                    '{"messages": \n\n{"tools": []}\n', encoding="utf-8")
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--requests",
                           str(path)], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0] == "hi"
    assert lines[1] == {"error": f"{path}:2: chat request: cannot apply a chat template to an "
                                 "empty conversation"}
    assert lines[2]["error"].startswith(f"{path}:3: invalid JSON: "), lines[2]
    assert lines[3] == {"error": f'{path}:5: chat request: no "messages"'}
