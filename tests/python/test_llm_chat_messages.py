"""LLM.chat, LLM.apply_chat_template and `latent generate` "messages" lines check and shape a
conversation with the server's code (server/chat_request.h): an OpenAI "developer" message is a
system one, text content parts are joined as vLLM joins them, and a message without a role or a
conversation without messages is refused with the server's message, the same on all three
paths. LLM.chat reads its argument as vLLM does: [] is no conversations. On the
committed demo model, whose template writes each role as it is (<|role|>content<|end|>). A few
seconds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import BUILD_PYTHON, REPO, run_latent

try:
    import latent
except ImportError as e:
    raise RuntimeError(f"{BUILD_PYTHON}/latent is missing or broken ({e}): run `make build` "
                       "with nanobind in .venv (requirements-dev.txt)") from e

DEMO = REPO / "models" / "demo"
GREEDY = latent.SamplingParams(temperature=0, max_tokens=1)


@pytest.fixture(scope="module")
def llm():
    with latent.LLM(str(DEMO), block_tokens=16) as llm:
        yield llm


def cli_lines(lines: list[dict], tmp_path: Path) -> list[dict]:
    """`latent generate --prompts` on `lines`, each with prompt_logprobs (so its output holds its
    prompt's token ids)."""
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(dict(l, max_tokens=1, prompt_logprobs=0)) + "\n"
                            for l in lines))
    out = run_latent("generate", "--model", str(DEMO), "--prompts", str(path),
                     "--block-tokens", "16", check=False)
    outputs = [json.loads(l) for l in out.stdout.splitlines()]
    # A file whose every line failed exits 2 (bad input); a line's error is still in its place.
    assert out.returncode == (2 if all("error" in o for o in outputs) else 0), out.stderr
    return outputs


def cli_prompt_ids(output: dict) -> list[int]:
    return [e["token"] for e in output["prompt_logprobs"][1:]]


@pytest.mark.parametrize("messages, as_server", [
    # OpenAI's newer name for the system role, which templates do not know.
    ([{"role": "developer", "content": "Be brief."}, {"role": "user", "content": "hi"}],
     "<|system|>Be brief.<|end|><|user|>hi<|end|><|assistant|>"),
    # Text parts, as OpenAI's clients send content: joined with newlines.
    ([{"role": "user", "content": [{"type": "text", "text": "hi"},
                                   {"type": "text", "text": "there"}]}],
     "<|user|>hi\nthere<|end|><|assistant|>"),
])
def test_messages_are_shaped_as_the_server_shapes_them(llm, tmp_path, messages, as_server):
    assert llm.apply_chat_template(messages) == as_server
    result = llm.chat(messages, GREEDY)[0]
    assert result.prompt == as_server
    ids = llm.encode(as_server, add_special_tokens=False)
    assert result.prompt_token_ids == ids
    output = cli_lines([{"messages": messages}], tmp_path)[0]
    assert "error" not in output, output
    assert cli_prompt_ids(output) == ids[1:]


@pytest.mark.parametrize("messages, message", [
    ([{"content": "hi"}], "'messages\\[0\\].role' must be a string"),
    ([{"role": "user", "content": "hi"}, {"role": 5, "content": "x"}],
     "'messages\\[1\\].role' must be a string"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
     "content part type 'image_url' is not supported \\(only 'text'\\)"),
    ([{"role": "user", "content": 5}], "'messages\\[0\\].content' must be a string or a list of "
                                       "content parts"),
])
def test_bad_messages_are_refused_as_the_server_refuses_them(llm, tmp_path, messages, message):
    """A message without a role rendered as nothing."""
    with pytest.raises(latent.LatentError, match=message):
        llm.apply_chat_template(messages)
    with pytest.raises(latent.LatentError, match="prompt 0: " + message):
        llm.chat(messages, GREEDY)
    output = cli_lines([{"messages": messages}], tmp_path)[0]
    assert re.search(message, output["error"]), output


def test_a_conversation_without_messages_is_refused_as_the_server_refuses_it(llm, tmp_path):
    with pytest.raises(latent.LatentError, match="'messages' is empty"):
        llm.apply_chat_template([])
    with pytest.raises(latent.LatentError, match="prompt 1: 'messages' is empty"):
        llm.chat([[{"role": "user", "content": "hi"}], []], GREEDY)
    assert "'messages' is empty" in cli_lines([{"messages": []}], tmp_path)[0]["error"]


def test_conversations_are_told_apart_as_vllm_tells_them(llm):
    """vLLM's is_list_of(messages, list): chat([]) is no conversations and returns [] (it was
    refused as one empty conversation); a tuple of lists is one conversation, whose messages
    are then not objects (it was taken as two conversations)."""
    assert llm.chat([], GREEDY) == []
    hi = [{"role": "user", "content": "hi"}]
    assert len(llm.chat([hi, hi], GREEDY)) == 2
    assert len(llm.chat(tuple(hi), GREEDY)) == 1  # a tuple of messages: one conversation
    with pytest.raises(latent.LatentError, match="'messages\\[0\\]' must be an object"):
        llm.chat((hi, hi), GREEDY)


def test_chat_fields_are_checked_as_the_server_checks_them(llm, tmp_path):
    messages = [{"role": "user", "content": "hi"}]
    both = "'continue_final_message' and 'add_generation_prompt' cannot both be true"
    with pytest.raises(latent.LatentError, match=both):
        llm.apply_chat_template(messages, add_generation_prompt=True, continue_final_message=True)
    with pytest.raises(latent.LatentError, match="'chat_template_kwargs' must be an object"):
        llm.chat(messages, GREEDY, chat_template_kwargs=[1])
    with pytest.raises(latent.LatentError, match="'tools\\[0\\]' must be an object"):
        llm.apply_chat_template(messages, tools=[5])
    outputs = cli_lines([{"messages": messages, "add_generation_prompt": True,
                          "continue_final_message": True},
                         {"messages": messages, "tools": [5]}], tmp_path)
    assert both in outputs[0]["error"]
    assert "'tools[0]' must be an object" in outputs[1]["error"]
    # The template kwargs' add_generation_prompt (which wins) is checked as the top-level one:
    # it failed at render, as "the chat template failed on these messages: ...".
    kwarg = "'chat_template_kwargs.add_generation_prompt' must be a boolean"
    with pytest.raises(latent.LatentError) as raised:
        llm.chat(messages, GREEDY, chat_template_kwargs={"add_generation_prompt": "yes"})
    assert str(raised.value) == f"prompt 0: {kwarg}"
    with pytest.raises(latent.LatentError, match=both):
        llm.apply_chat_template(messages, continue_final_message=True,
                                chat_template_kwargs={"add_generation_prompt": True})
    outputs = cli_lines([{"messages": messages,
                          "chat_template_kwargs": {"add_generation_prompt": "yes"}}], tmp_path)
    assert outputs[0]["error"].endswith(kwarg), outputs[0]
    assert llm.apply_chat_template(messages) == "<|user|>hi<|end|><|assistant|>"  # still usable
