"""`latent render-chat` against transformers' apply_chat_template(..., tokenize=False): byte for
byte on the chat templates of DeepSeek V3 (its tokenizer_config.json), DeepSeek V3.1, Kimi K2 and
GLM-4.5 (/work/shared/chat-templates) and Qwen3, over the conversations in chat_corpus.py. Where
transformers cannot render a conversation with a template (it raises), latent must fail too, with
a clear error. Also continue_final_message (the prompt cut inside the final message, and
transformers' errors), and requests nested too deep to copy refused without a crash.

Each template's conversations go to latent as one --requests JSON Lines batch, so the whole file
runs in a few seconds."""

from __future__ import annotations

import copy
import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from chat_corpus import WEATHER_TOOL, conversations  # noqa: E402
from conftest import LATENT  # noqa: E402

SHARED = Path("/work/shared")
TOKENIZERS = SHARED / "tokenizers"
TEMPLATES = SHARED / "chat-templates"

# Template name -> (tokenizer dir to copy, .jinja file written as chat_template.jinja or None).
TEMPLATE_SOURCES = {
    "deepseek_v3": (TOKENIZERS / "deepseek_v3", None),
    "deepseek_v3_1": (TOKENIZERS / "deepseek_v3", TEMPLATES / "deepseek-v3.1.jinja"),
    "kimi_k2": (TOKENIZERS / "deepseek_v3", TEMPLATES / "kimi-k2.jinja"),
    "glm_4_5": (TOKENIZERS / "deepseek_v3", TEMPLATES / "glm-4.5.jinja"),
    "qwen3": (TOKENIZERS / "qwen3", None),
}
CORPUS = conversations()
MIN_RENDERED = 30  # conversations each template must render (not just fail on) identically


def _quiet_transformers():
    logging.getLogger("transformers").setLevel(logging.ERROR)


def _require_latent():
    if not LATENT.exists():
        raise RuntimeError(f"{LATENT} is missing: run `make build` first")


def _tokenizer_dir(name: str, root: Path) -> Path:
    """A tokenizer directory for the template: the shared one, or a copy of the DeepSeek V3
    tokenizer files with the template as chat_template.jinja (rendering does not depend on the
    vocabulary)."""
    base, jinja = TEMPLATE_SOURCES[name]
    if jinja is None:
        return base
    out = root / name
    out.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(base / f, out / f)
    shutil.copy(jinja, out / "chat_template.jinja")
    return out


def _reference(tokenizer, conv: dict) -> tuple[bool, str]:
    try:
        text = tokenizer.apply_chat_template(
            copy.deepcopy(conv["messages"]), tools=copy.deepcopy(conv.get("tools")),
            add_generation_prompt=conv["add_generation_prompt"], tokenize=False,
            **copy.deepcopy(conv.get("kwargs", {})))
        return True, text
    except Exception as e:  # transformers raises jinja2 errors, TypeError, ValueError...
        return False, f"{type(e).__name__}: {e}"


def _request(conv: dict) -> dict:
    req = {"messages": conv["messages"], "add_generation_prompt": conv["add_generation_prompt"]}
    if "tools" in conv:
        req["tools"] = conv["tools"]
    if "kwargs" in conv:
        req["chat_template_kwargs"] = conv["kwargs"]
    return req


def _render_batch(tokenizer_dir: Path, requests: list[dict], scratch: Path) -> list:
    _require_latent()
    path = scratch / "requests.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in requests),
                    encoding="utf-8")
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tokenizer_dir),
                           "--requests", str(path)], capture_output=True)
    lines = proc.stdout.decode("utf-8").splitlines()
    assert len(lines) == len(requests), proc.stderr.decode()
    results = [json.loads(line) for line in lines]
    for number, result in enumerate(results, 1):
        # Every error says its line, as tokenize --jsonl's do; the rest is the error itself.
        if isinstance(result, dict):
            where = f"{path}:{number}: "
            assert result["error"].startswith(where), result
            result["error"] = result["error"][len(where):]
    return results


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """template -> list of (conversation, (transformers ok, text or error), latent result)."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    root = tmp_path_factory.mktemp("chat-templates")
    out = {}
    for name in TEMPLATE_SOURCES:
        tdir = _tokenizer_dir(name, root)
        tokenizer = AutoTokenizer.from_pretrained(str(tdir))
        refs = [_reference(tokenizer, conv) for conv in CORPUS]
        scratch = root / f"{name}-requests"
        scratch.mkdir()
        mine = _render_batch(tdir, [_request(conv) for conv in CORPUS], scratch)
        out[name] = list(zip(CORPUS, refs, mine))
    return out


@pytest.mark.parametrize("template", list(TEMPLATE_SOURCES))
@pytest.mark.parametrize("index", range(len(CORPUS)), ids=[c["id"] for c in CORPUS])
def test_matches_transformers(rendered, template, index):
    conv, (ok, expected), mine = rendered[template][index]
    if ok:
        assert isinstance(mine, str), f"latent failed where transformers rendered: {mine}"
        assert mine == expected
    else:
        # transformers cannot render this conversation with this template; latent must refuse
        # it too, with an error that says where.
        assert isinstance(mine, dict) and "error" in mine, (
            f"transformers failed ({expected}) but latent rendered {mine!r}")
        assert mine["error"].startswith(("chat template", "chat request")), mine["error"]


@pytest.mark.parametrize("template", list(TEMPLATE_SOURCES))
def test_enough_conversations_render(rendered, template):
    ok = sum(1 for _, (good, _), _ in rendered[template] if good)
    assert ok >= MIN_RENDERED, f"only {ok} conversations render with {template}"


def test_single_request_and_model_alias(tmp_path):
    """--request prints the prompt with nothing added; --model works as --tokenizer."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    _require_latent()
    conv = next(c for c in CORPUS if c["id"] == "multi_turn_gen")
    req = tmp_path / "r.json"
    req.write_text(json.dumps(_request(conv)), encoding="utf-8")
    tdir = TOKENIZERS / "deepseek_v3"
    expected = _reference(AutoTokenizer.from_pretrained(str(tdir)), conv)[1]
    for flag in ("--tokenizer", "--model"):
        proc = subprocess.run([str(LATENT), "render-chat", flag, str(tdir), "--request", str(req)],
                              capture_output=True)
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout.decode("utf-8") == expected


def test_top_level_kwargs(tmp_path):
    """Template variables may also be top-level keys of the request."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    _require_latent()
    tdir = TOKENIZERS / "qwen3"
    messages = [{"role": "user", "content": "hi"}]
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"messages": messages, "add_generation_prompt": True,
                               "enable_thinking": False}), encoding="utf-8")
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request",
                           str(req)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    expected = AutoTokenizer.from_pretrained(str(tdir)).apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False, enable_thinking=False)
    assert proc.stdout.decode("utf-8") == expected
    assert expected.endswith("<think>\n\n</think>\n\n")


def test_many_kwargs_top_level_and_in_chat_template_kwargs(tmp_path):
    """Thousands of template variables, as top-level keys and under chat_template_kwargs, where
    the latter win for a name given both ways (as transformers gets them merged): each reaches the
    template under its own name."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    _require_latent()
    names = [f"t{i}" for i in range(2000)]
    top = {name: f"top{i}" for i, name in enumerate(names[:1500])}
    extra = {name: f"extra{i}" for i, name in enumerate(names[1000:], start=1000)}
    tdir = tmp_path / "many"
    tdir.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(TOKENIZERS / "qwen3" / f, tdir / f)
    (tdir / "chat_template.jinja").write_text(
        "".join("{{ %s }}," % name for name in names), encoding="utf-8")
    messages = [{"role": "user", "content": "hi"}]
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"messages": messages, **top, "chat_template_kwargs": extra}),
                   encoding="utf-8")
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request",
                           str(req)], capture_output=True)
    assert proc.returncode == 0, proc.stderr.decode()
    expected = "".join(f"top{i}," if i < 1000 else f"extra{i}," for i in range(2000))
    assert proc.stdout.decode("utf-8") == expected
    assert AutoTokenizer.from_pretrained(str(tdir)).apply_chat_template(
        messages, tokenize=False, **{**top, **extra}) == expected


def test_named_templates(tmp_path):
    """A chat_template list in tokenizer_config.json: "tool_use" when tools are given, else
    "default", as transformers picks."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    tdir = tmp_path / "named"
    tdir.mkdir()
    shutil.copy(TOKENIZERS / "deepseek_v3" / "tokenizer.json", tdir / "tokenizer.json")
    config = json.loads((TOKENIZERS / "deepseek_v3" / "tokenizer_config.json").read_text())
    config["chat_template"] = [
        {"name": "default", "template": "D:{% for m in messages %}{{ m.content }}{% endfor %}"},
        {"name": "tool_use", "template": "T:{{ tools | length }}:{{ bos_token }}"},
    ]
    (tdir / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tokenizer = AutoTokenizer.from_pretrained(str(tdir))
    messages = [{"role": "user", "content": "x"}]
    requests = [{"messages": messages}, {"messages": messages, "tools": [WEATHER_TOOL]}]
    mine = _render_batch(tdir, requests, tmp_path)
    assert mine[0] == tokenizer.apply_chat_template(messages, tokenize=False) == "D:x"
    assert mine[1] == tokenizer.apply_chat_template(messages, tools=[WEATHER_TOOL],
                                                    tokenize=False)


def test_tokenizer_without_template():
    """llama2's tokenizer_config.json has no chat template: both refuse."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    _require_latent()
    tdir = TOKENIZERS / "llama2"
    with pytest.raises(ValueError):
        AutoTokenizer.from_pretrained(str(tdir)).apply_chat_template(
            [{"role": "user", "content": "x"}], tokenize=False)
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request",
                           "-"], input=b'{"messages": [{"role": "user", "content": "x"}]}',
                          capture_output=True)
    assert proc.returncode == 2
    assert b"no chat template" in proc.stderr


def test_bad_requests(tmp_path):
    _require_latent()
    tdir = TOKENIZERS / "deepseek_v3"
    cases = {
        "not json": b"{",
        "no messages": b"{}",
        "empty conversation": b'{"messages": []}',
        "message not an object": b'{"messages": ["hi"]}',
    }
    for what, body in cases.items():
        proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request",
                               "-"], input=body, capture_output=True)
        assert proc.returncode == 2, what
        assert proc.stderr.startswith(b"latent: error: "), (what, proc.stderr)


def test_template_error_has_position(tmp_path):
    tdir = tmp_path / "bad"
    tdir.mkdir()
    (tdir / "chat_template.jinja").write_text("line one\n{% for m in messages %}\n{{ m.content | nosuchfilter }}\n{% endfor %}")
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request", "-"],
                          input=b'{"messages": [{"role": "user", "content": "x"}]}',
                          capture_output=True)
    assert proc.returncode == 2
    assert b"chat template line 3 col 16: no filter named 'nosuchfilter'" in proc.stderr


# Conversations ending in the assistant's message, to continue (continue_final_message).
CONTINUATIONS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am "}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to 3."},
     {"role": "assistant", "content": "1, 2,"}],
    [{"role": "user", "content": "A"}, {"role": "assistant", "content": "B"},
     {"role": "user", "content": "C"}, {"role": "assistant", "content": "  D with space\n"}],
    [{"role": "user", "content": "Think first."},
     {"role": "assistant", "reasoning_content": "Hmm.", "content": "So the answer is"}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "Parts"}, {"role": "assistant", "content": [
        {"type": "text", "text": "Part one. "}, {"type": "text", "text": "Part two"}]}],
]


def _continue_reference(tokenizer, messages: list, **kwargs) -> tuple[bool, str]:
    try:
        return True, tokenizer.apply_chat_template(copy.deepcopy(messages), tokenize=False,
                                                   continue_final_message=True, **kwargs)
    except Exception as e:  # ValueError (not found, not compatible), jinja2 errors
        return False, f"{type(e).__name__}: {e}"


@pytest.mark.parametrize("template", list(TEMPLATE_SOURCES))
def test_continue_final_message_matches_transformers(template, tmp_path):
    """The prompt ends inside the final message, byte for byte as transformers cuts it; where
    transformers refuses, latent does too."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    tdir = _tokenizer_dir(template, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(tdir))
    requests = [{"messages": m, "continue_final_message": True} for m in CONTINUATIONS]
    mine = _render_batch(tdir, requests, tmp_path)
    rendered = 0
    for messages, got in zip(CONTINUATIONS, mine):
        ok, expected = _continue_reference(tokenizer, messages)
        if ok:
            assert got == expected, messages
            rendered += 1
        else:
            assert isinstance(got, dict) and got["error"].startswith(("chat template",
                                                                      "chat request")), (
                f"transformers failed ({expected}) but latent rendered {got!r}")
    assert rendered >= 4


def _one_template_dir(root: Path, source: str) -> Path:
    root.mkdir()
    (root / "chat_template.jinja").write_text(source)
    (root / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    shutil.copy(TOKENIZERS / "deepseek_v3" / "tokenizer.json", root / "tokenizer.json")
    return root


def test_continue_final_message_cut_and_errors(tmp_path):
    """A template that trims the message (the tag loses its space: the prompt is right-stripped),
    and the errors transformers raises: with add_generation_prompt, a template without "content",
    a final message the template cuts short, a final message without content."""
    from transformers import AutoTokenizer

    _quiet_transformers()
    trims = _one_template_dir(tmp_path / "trims", "{% for m in messages %}[{{ m.role }}]"
                              "{{ m.content | trim }}</s>{% endfor %}")
    short = _one_template_dir(tmp_path / "short", "{% for m in messages %}{{ m.content[:3] }}"
                              "{% endfor %}")
    no_content = _one_template_dir(tmp_path / "none", "{% for m in messages %}{{ m.role }}"
                                   "{% endfor %}")
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello there  "}]
    ok, expected = _continue_reference(AutoTokenizer.from_pretrained(str(trims)), messages)
    assert ok and expected == "[user]Hi</s>[assistant]Hello there"
    assert _render_batch(trims, [{"messages": messages, "continue_final_message": True}],
                         tmp_path) == [expected]
    cases = [
        (TOKENIZERS / "deepseek_v3", messages, {"add_generation_prompt": True}, "not compatible"),
        (short, messages, {}, "does not appear in the chat"),
        (no_content, messages, {}, "not an accepted field"),
        (TOKENIZERS / "deepseek_v3", [{"role": "user", "content": "Hi"}, {"role": "assistant"}],
         {}, "has no \"content\""),
    ]
    for tdir, msgs, kwargs, words in cases:
        ok, expected = _continue_reference(AutoTokenizer.from_pretrained(str(tdir)), msgs, **kwargs)
        assert not ok and words in expected, expected
        request = dict({"messages": msgs, "continue_final_message": True}, **kwargs)
        [got] = _render_batch(tdir, [request], tmp_path)
        assert isinstance(got, dict) and words in got["error"], got


def test_deep_nesting_is_refused(tmp_path):
    """A message field or a tool's parameters nested 50,000 levels deep overflowed the stack
    (nlohmann copies recurse) before the template's own depth check: now an error, and in a batch
    the other requests still render."""
    _require_latent()
    tdir = TOKENIZERS / "deepseek_v3"
    deep = "[" * 50000 + "]" * 50000
    message = '{"role": "user", "content": "hi", "extra": ' + deep + "}"
    tool = ('{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
            '"properties": ' + deep + "}}}")
    bodies = ['{"messages": [' + message + "]}",
              '{"messages": [{"role": "user", "content": "hi"}], "tools": [' + tool + "]}"]
    for body in bodies:
        proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--request",
                               "-"], input=body.encode(), capture_output=True)
        assert proc.returncode == 2, (proc.returncode, proc.stderr[-300:])
        assert b"nests more than 256 levels deep" in proc.stderr, proc.stderr[-300:]
    path = tmp_path / "requests.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}]})
    path.write_text("\n".join([good, bodies[0], good]) + "\n")
    proc = subprocess.run([str(LATENT), "render-chat", "--tokenizer", str(tdir), "--requests",
                           str(path)], capture_output=True)
    assert proc.returncode == 2, proc.stderr[-300:]
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert isinstance(lines[0], str) and lines[2] == lines[0]
    assert "nests more than 256 levels deep" in lines[1]["error"]
