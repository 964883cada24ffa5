"""latent.LLM against `latent generate --prompts`: the same requests give the same tokens, text,
finish reasons and logprobs, alone, 64 at once, and from several threads; errors are Python
exceptions with latent's messages; Ctrl-C during generate stops cleanly. On a tiny random model
with DeepSeek V3's tokenizer (about 20 s in all)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from conftest import (BUILD_PYTHON, EXTRA_EOS, REPO, TOKENIZER_EOS, copy_without_tokenizer,
                      run_latent, stop_token_case, two_eos_model, unlisted_eos_model)

try:
    import latent
except ImportError as e:
    raise RuntimeError(f"{BUILD_PYTHON}/latent is missing or broken ({e}): run `make build` with nanobind "
                       "in .venv (requirements-dev.txt)") from e

TOKENIZER = REPO.parent / "shared" / "tokenizers" / "deepseek_v3"


@pytest.fixture(scope="module")
def model_dir(tiny_models) -> Path:
    return tiny_models.get("deepseek_v3", "--tokenizer", str(TOKENIZER))


@pytest.fixture(scope="module")
def llm(model_dir):
    with latent.LLM(str(model_dir), block_tokens=16, check_invariants=True) as llm:
        yield llm


def cli_generate(model_dir: Path, lines: list[dict], tmp_path: Path) -> list[dict]:
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(l) + "\n" for l in lines))
    out = run_latent("generate", "--model", str(model_dir), "--prompts", str(path), "--block-tokens", "16")
    return [json.loads(l) for l in out.stdout.splitlines()]


def assert_same(output: latent.CompletionOutput, expected: dict) -> None:
    assert output.token_ids == expected["ids"]
    if "text" in expected:  # `latent generate` loads the tokenizer only for text prompts
        assert output.text == expected["text"]
    assert output.finish_reason == expected["finish_reason"]
    assert output.stop_reason == expected.get("stop_reason")
    if "logprobs" in expected:
        assert [t.token_id for t in output.logprobs] == [e["token"] for e in expected["logprobs"]]
        for got, want in zip(output.logprobs, expected["logprobs"]):
            assert got.logprob == pytest.approx(want["logprob"], abs=1e-5)
            assert [t for t, _ in got.top_logprobs] == [a["token"] for a in want["top_logprobs"]]
    else:
        assert output.logprobs is None


# (prompt for LLM.generate, the same request's prompt fields in a JSONL line, SamplingParams)
CASES = [
    ("Hello, world!", {"prompt": "Hello, world!"}, latent.SamplingParams(temperature=0, max_tokens=8)),
    ([5, 6, 7, 8, 9], {"ids": [5, 6, 7, 8, 9]},
     latent.SamplingParams(temperature=0.8, top_k=20, top_p=0.9, seed=7, max_tokens=9, logprobs=2)),
    ({"prompt_token_ids": [11, 3, 250]}, {"ids": [11, 3, 250]},
     latent.SamplingParams(temperature=1.0, seed=3, n=3, max_tokens=5, ignore_eos=True)),
    ("the stop test", {"prompt": "the stop test"},
     latent.SamplingParams(temperature=1.2, seed=1, max_tokens=12, stop=["e", "a"], min_p=0.05,
                           repetition_penalty=1.3, presence_penalty=0.5, frequency_penalty=0.2)),
]


def test_generate_equals_latent_generate(llm, model_dir, tmp_path):
    lines = [dict(fields, **params._line()) for _, fields, params in CASES]
    expected = cli_generate(model_dir, lines, tmp_path)
    results = llm.generate([p for p, _, _ in CASES], [params for _, _, params in CASES])
    assert len(results) == len(CASES)
    for result, want, (prompt, _, params) in zip(results, expected, CASES):
        samples = want.get("samples", [want])
        assert len(result.outputs) == params.n == len(samples)
        for output, sample in zip(result.outputs, samples):
            assert_same(output, sample)
        assert result.finished
    assert results[0].prompt == "Hello, world!"
    assert results[0].prompt_token_ids == llm.encode("Hello, world!")
    assert results[1].prompt_token_ids == [5, 6, 7, 8, 9]


def test_chat_uses_the_checkpoint_template(llm, model_dir, tmp_path):
    conversations = [[{"role": "user", "content": "What is MLA?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]]
    params = latent.SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    expected = cli_generate(model_dir, [dict({"messages": c}, **params._line()) for c in conversations], tmp_path)
    results = llm.chat(conversations, params)
    for result, want, conversation in zip(results, expected, conversations):
        assert_same(result.outputs[0], want)
        rendered = llm.apply_chat_template(conversation)
        assert result.prompt_token_ids == llm.encode(rendered, add_special_tokens=False)
    # One conversation (a list of messages) is one request.
    assert llm.chat(conversations[0], params)[0].outputs[0].token_ids == results[0].outputs[0].token_ids


def test_chat_shapes_tool_call_turns_as_the_server(llm, model_dir, tmp_path):
    """An assistant turn with content null beside its call, as OpenAI clients send it back:
    apply_chat_template(), chat() and `latent generate` shape it as the server does. DeepSeek V3's
    template writes the call only under `content is none`, so the call precedes its output (with
    the null dropped, as transformers does, the template failed)."""
    conversation = [
        {"role": "user", "content": "Weather in Z?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Z"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    rendered = llm.apply_chat_template(conversation)
    assert ("<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
            'get_weather\n```json\n{"city": "Z"}\n```<｜tool▁call▁end｜><｜tool▁outputs▁begin｜>'
            "<｜tool▁output▁begin｜>sunny") in rendered
    params = latent.SamplingParams(temperature=0, max_tokens=1, prompt_logprobs=0)
    result = llm.chat(conversation, params)[0]
    assert result.prompt == rendered
    assert result.prompt_token_ids == llm.encode(rendered, add_special_tokens=False)
    expected = cli_generate(model_dir, [dict({"messages": conversation}, **params._line())],
                            tmp_path)[0]
    assert "error" not in expected, expected
    assert [e["token"] for e in expected["prompt_logprobs"][1:]] == result.prompt_token_ids[1:]


def test_only_an_assistant_turn_calling_something_keeps_none(llm):
    """DeepSeek V3 keeps a null content beside calls as none; an empty tool_calls list (the turn
    vanished) or a continued final call turn (an error: no text to continue) get "" as before."""
    user = {"role": "user", "content": "Weather in Z?"}
    empty_calls = [user, {"role": "assistant", "content": None, "tool_calls": []},
                   {"role": "user", "content": "again"}]
    as_empty = [dict(m, content=m["content"] or "") for m in empty_calls]
    assert llm.apply_chat_template(empty_calls) == llm.apply_chat_template(as_empty)
    assert "<｜Assistant｜><｜end▁of▁sentence｜>" in llm.apply_chat_template(empty_calls)
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Z"}'}}
    final_call = [user, {"role": "assistant", "content": None, "tool_calls": [call]}]
    continued = llm.apply_chat_template(final_call, continue_final_message=True)
    assert continued == llm.apply_chat_template(
        [user, dict(final_call[1], content="")], continue_final_message=True)
    assert continued.endswith("<｜Assistant｜>")


def test_each_named_template_keeps_none_for_itself(model_dir, tmp_path):
    """A tokenizer whose default template is Qwen3's (fails on none) and whose tool_use one is
    DeepSeek V3's (writes the calls only under none): each is probed as it is picked, so a
    tool-call history renders its call with tools and without (one answer for both failed the
    request without tools on none)."""
    model = tmp_path / "two_templates"
    model.mkdir()
    for item in model_dir.iterdir():
        (model / item.name).symlink_to(item)
    qwen3 = json.loads((REPO.parent / "shared" / "tokenizers" / "qwen3" /
                        "tokenizer_config.json").read_text())["chat_template"]
    deepseek = json.loads((model_dir / "tokenizer_config.json").read_text())["chat_template"]
    (model / "chat_template.jinja").write_text(qwen3)
    (model / "additional_chat_templates").mkdir()
    (model / "additional_chat_templates" / "tool_use.jinja").write_text(deepseek)
    conversation = [
        {"role": "user", "content": "Weather in Z?"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Z"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    with latent.LLM(str(model), block_tokens=16) as two:
        with_tools = two.apply_chat_template(conversation, tools=tools)
        assert ('<｜tool▁sep｜>get_weather\n```json\n{"city": "Z"}\n```<｜tool▁call▁end｜>'
                in with_tools)
        without = two.apply_chat_template(conversation)
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Z"}}' in without


# Templates that read a tool call's arguments key by key, by what one writes for {"city": "Z"}:
# GLM-4.5's way.
ITERATES_ARGUMENTS = {
    "items": ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
              "{% for t in m.tool_calls or [] %}"
              "{% for k, v in t.function.arguments.items() %}[{{ k }}={{ v }}]{% endfor %}"
              "{% endfor %}{% endfor %}", "[city=Z]"),
    # Keys in quotes: single ones, as Python's repr would print them, and double ones.
    "quoted": ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
               "{% for t in m.tool_calls or [] %}"
               "{% for k, v in t.function.arguments.items() %}{'{{ k }}': '{{ v }}'}{% endfor %}"
               "{% endfor %}{% endfor %}", "{'city': 'Z'}"),
    "parameter": ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                  "{% for t in m.tool_calls or [] %}"
                  "{% for k, v in t.function.arguments.items() %}"
                  '<parameter name="{{ k }}">{{ v }}</parameter>{% endfor %}'
                  "{% endfor %}{% endfor %}", '<parameter name="city">Z</parameter>'),
}
# Templates that print the arguments as they come (JSON text gives '({"city": "Z"})'): plainly,
# or after the tools schema printed key by key.
PRINTS_ARGUMENTS = {
    "whole": ("{% for m in messages %}<{{ m.role }}>{{ m.content }}"
              "{% for t in m.tool_calls or [] %}({{ t.function.arguments }}){% endfor %}"
              "{% endfor %}"),
    "tool_keys": ("{% for t in tools or [] %}{% for k in t.function.parameters.properties %}"
                  "<{{ k }}>{% endfor %}{% endfor %}"
                  "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                  "{% for t in m.tool_calls or [] %}({{ t.function.arguments }}){% endfor %}"
                  "{% endfor %}"),
}


@pytest.mark.parametrize("iterates,prints", [("items", "whole"), ("items", "tool_keys"),
                                             ("quoted", "whole"), ("parameter", "tool_keys")])
@pytest.mark.parametrize("objects_in_default", [False, True])
def test_each_named_template_reads_arguments_its_way(model_dir, tmp_path, objects_in_default,
                                                     iterates, prints):
    """tokenizer_config.json with a "default" and a "tool_use" template that read arguments
    differently: each is probed as it is picked, so with tools and without the prompt equals
    transformers' with the arguments as that template reads them (one answer for both failed the
    iterating template on text, or printed Python's repr of an object; a tools schema printed key
    by key was taken for the arguments taken apart; keys printed in quotes were taken for the
    arguments printed whole)."""
    from transformers import AutoTokenizer

    model = tmp_path / "two_templates"
    model.mkdir()
    for item in model_dir.iterdir():
        if item.name not in ("tokenizer_config.json", "chat_template.jinja",
                             "additional_chat_templates"):
            (model / item.name).symlink_to(item)
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    iterating, shown = ITERATES_ARGUMENTS[iterates]
    printing = PRINTS_ARGUMENTS[prints]
    default, tool_use = ((iterating, printing) if objects_in_default else (printing, iterating))
    config["chat_template"] = [{"name": "default", "template": default},
                               {"name": "tool_use", "template": tool_use}]
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    hf = AutoTokenizer.from_pretrained(str(model))

    def conversation(arguments):
        return [{"role": "user", "content": "Weather in Z?"},
                {"role": "assistant", "content": "", "tool_calls": [{
                    "id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": arguments}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]

    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    text, parsed = '{"city": "Z"}', {"city": "Z"}
    with latent.LLM(str(model), block_tokens=16) as two:
        for with_tools in (True, False):
            reads_objects = objects_in_default != with_tools
            expected = hf.apply_chat_template(
                conversation(parsed if reads_objects else text),
                tools=tools if with_tools else None, tokenize=False, add_generation_prompt=True)
            assert (shown if reads_objects else '({"city": "Z"})') in expected
            # As clients send the arguments (JSON text), and as an object: the same prompt.
            for arguments in (text, parsed):
                assert two.apply_chat_template(
                    conversation(arguments), tools=tools if with_tools else None) == expected


def test_apply_chat_template_continue_final_message(llm, model_dir):
    """As transformers' apply_chat_template(continue_final_message=True); add_generation_prompt
    then defaults to False, and both True raise."""
    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello, I am "}]
    expected = AutoTokenizer.from_pretrained(str(model_dir)).apply_chat_template(
        messages, continue_final_message=True, tokenize=False)
    assert llm.apply_chat_template(messages, continue_final_message=True) == expected
    with pytest.raises(latent.LatentError, match="cannot both be true"):
        llm.apply_chat_template(messages, add_generation_prompt=True, continue_final_message=True)
    # chat (through a request line, as `generate --prompts` takes it) continues the message too.
    params = latent.SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    result = llm.chat(messages, params, continue_final_message=True)[0]
    assert result.prompt_token_ids == llm.encode(expected, add_special_tokens=False)


def test_render_chat_refuses_deep_json(llm):
    """JSON nested 500,000 deep overflowed the stack where it was copied for the template. Through
    the binding itself: Python's json.dumps cannot write it (RecursionError)."""
    deep = "[" * 500000 + "]" * 500000
    with pytest.raises(latent.LatentError, match="the request nests more than 256 levels deep"):
        llm._engine.render_chat('{"messages": [{"role": "user", "content": ' + deep + "}]}")
    with pytest.raises(latent.LatentError, match="the request nests more than 256 levels deep"):
        llm._engine.render_chat('{"messages": [{"role": "user", "content": "hi"}], "tools": '
                                + deep + "}")
    assert llm.apply_chat_template([{"role": "user", "content": "hi"}])  # still usable


def concurrent_requests(count: int) -> list[tuple[list[int], latent.SamplingParams]]:
    requests = []
    for i in range(count):
        prompt = [(i * 37 + j * 11) % 250 + 3 for j in range(3 + i % 29)]
        params = latent.SamplingParams(temperature=0 if i % 2 else 0.9, seed=i, max_tokens=4 + i % 13,
                                       ignore_eos=True)
        requests.append((prompt, params))
    return requests


def test_64_concurrent_requests(llm, model_dir, tmp_path):
    requests = concurrent_requests(64)
    expected = cli_generate(model_dir, [dict({"ids": p}, **s._line()) for p, s in requests], tmp_path)
    results = llm.generate([p for p, _ in requests], [s for _, s in requests])
    for result, want in zip(results, expected):
        assert_same(result.outputs[0], want)
    assert llm.metrics()["running"] == 0


def test_metrics_count_what_generate_returned_at_once(llm):
    # The engine counts a request's end before reporting it, so metrics() read as generate
    # returns, with no sleep, already holds the requests, their tokens and the steps they took.
    before = llm.metrics()
    params = [latent.SamplingParams(temperature=0, max_tokens=k, ignore_eos=True) for k in (1, 4, 9)]
    results = llm.generate([[5, 6, 7], [8, 9], [10]], params)
    after = llm.metrics()
    assert after["requests_finished"] - before["requests_finished"] == 3
    assert after["generated_tokens"] - before["generated_tokens"] == sum(
        len(r.outputs[0].token_ids) for r in results) == 14
    assert after["steps"] - before["steps"] >= 9


def test_threads_calling_generate_at_once(llm):
    requests = concurrent_requests(24)
    alone = [llm.generate([p], s)[0].outputs[0].token_ids for p, s in requests]
    results: dict[int, list[list[int]]] = {}
    errors = []

    def worker(t: int) -> None:
        try:
            mine = requests[t::6]
            results[t] = [r.outputs[0].token_ids for r in llm.generate([p for p, _ in mine], [s for _, s in mine])]
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors
    for t in range(6):
        assert results[t] == alone[t::6]


def test_stream_yields_the_generated_text(llm):
    params = latent.SamplingParams(temperature=0.7, seed=5, max_tokens=12, ignore_eos=True, logprobs=0)
    whole = llm.generate("Streaming, one token at a time", params)[0].outputs[0]
    chunks = list(llm.stream("Streaming, one token at a time", params))
    assert [t for c in chunks for t in c.token_ids] == whole.token_ids
    assert "".join(c.text for c in chunks) == whole.text
    assert [l.logprob for c in chunks for l in c.logprobs] == pytest.approx([l.logprob for l in whole.logprobs], abs=1e-5)
    assert chunks[-1].finish_reason == "length"
    assert all(c.finish_reason is None for c in chunks[:-1])
    assert all(c.stop_reason is None for c in chunks)
    # Leaving early cancels the request.
    for chunk in llm.stream("Streaming", latent.SamplingParams(max_tokens=200, ignore_eos=True)):
        break
    deadline = time.time() + 10
    while llm.metrics()["running"] and time.time() < deadline:
        time.sleep(0.02)
    assert llm.metrics()["running"] == 0
    # A chunk has no place for prompt logprobs: refused, not computed and dropped.
    with pytest.raises(ValueError, match="stream\\(\\) does not return prompt_logprobs"):
        next(llm.stream("Streaming", latent.SamplingParams(prompt_logprobs=0)))


def test_stream_chunks_carry_the_stop_reason(llm):
    """The last chunk of LLM.stream has the sample's stop_reason, as vLLM's streamed output of a
    finished sample: the stop_token_ids entry that ended it (an int), the stop string, or None;
    every chunk before it None. Chunks used to have no stop_reason at all."""
    prompt = "Streaming, one token at a time"
    greedy = dict(temperature=0, max_tokens=12, ignore_eos=True)
    whole = llm.generate(prompt, latent.SamplingParams(**greedy))[0].outputs[0]
    ids, text = whole.token_ids, whole.text
    at = next(i for i in range(2, len(ids)) if ids[i] not in ids[:i])  # new where it comes
    stop = next(text[i:i + 2] for i in range(2, len(text) - 2) if text[i:i + 2].strip())
    for fields, want in [({"stop_token_ids": [ids[at]]}, ids[at]), ({"stop": [stop]}, stop),
                         ({}, None)]:
        params = latent.SamplingParams(**greedy, **fields)
        (out,) = llm.generate(prompt, params)[0].outputs
        chunks = list(llm.stream(prompt, params))
        assert out.stop_reason == want and type(out.stop_reason) is type(want), (out, fields)
        assert [t for c in chunks for t in c.token_ids] == out.token_ids, (chunks, out)
        assert chunks[-1].finish_reason == out.finish_reason, chunks
        assert chunks[-1].stop_reason == want, (chunks, fields)
        assert type(chunks[-1].stop_reason) is type(want), (chunks, fields)
        assert all(c.stop_reason is None for c in chunks[:-1]), (chunks, fields)


def test_bad_model_dir_raises(tmp_path):
    with pytest.raises(latent.LatentError, match="does-not-exist"):
        latent.LLM(str(tmp_path / "does-not-exist"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(latent.LatentError, match="config.json"):
        latent.LLM(str(tmp_path / "empty"))
    with pytest.raises(TypeError, match="unknown engine option 'max_batch'"):
        latent.LLM(str(tmp_path / "empty"), max_batch=3)


def test_a_symlink_loop_in_the_model_dir_raises_latent_error(model_dir, tmp_path):
    """std::filesystem's own exception reached Python as a RuntimeError."""
    import shutil

    looped = tmp_path / "looped"
    shutil.copytree(model_dir, looped)
    (looped / "model.safetensors.index.json").symlink_to("model.safetensors.index.json")
    with pytest.raises(latent.LatentError, match="index.json: cannot read: Too many levels of "
                                                 "symbolic links"):
        latent.LLM(str(looped))


def test_a_stray_checkpoint_tensor_warns_at_load(model_dir, tmp_path, capfd):
    """As `latent generate` and `latent serve` do: one line on stderr naming the tensor that
    config.json does not describe, which is not loaded; a normal checkpoint loads without one."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    with latent.LLM(str(model_dir)):
        pass
    assert "latent: warning:" not in capfd.readouterr().err
    stray = tmp_path / "stray"
    shutil.copytree(model_dir, stray)
    assert not (stray / "model.safetensors.index.json").exists()
    tensors = load_file(stray / "model.safetensors")
    tensors["model.layers.0.mlp.bogus.weight"] = torch.zeros(2)
    save_file(tensors, stray / "model.safetensors", metadata={"format": "pt"})
    with latent.LLM(str(stray)):
        pass
    err = capfd.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("latent: warning: ")]
    assert len(warnings) == 1, err
    assert "ignoring 1 checkpoint tensor(s)" in warnings[0]
    assert "'model.layers.0.mlp.bogus.weight'" in warnings[0]


def test_bad_requests_raise_with_latent_messages(llm, model_dir):
    # A field changed after construction is still refused at generate().
    params = latent.SamplingParams()
    params.temperature = -1
    with pytest.raises(latent.LatentError, match="temperature"):
        llm.generate("x", params)
    with pytest.raises(latent.LatentError, match="outside the vocabulary"):
        llm.generate([[1, 2, 10**6]])
    # A max_tokens past the context is capped there (vLLM's LLM); a prompt that leaves no room is
    # not.
    with pytest.raises(latent.LatentError, match="leaves no room for a completion"):
        llm.generate([[1] * llm.config["max_position_embeddings"]],
                     latent.SamplingParams(max_tokens=10**7))
    with pytest.raises(ValueError, match="2 prompts but 1 SamplingParams"):
        llm.generate(["a", "b"], [latent.SamplingParams()])
    # Still usable after errors.
    assert len(llm.generate("x", latent.SamplingParams(max_tokens=2))[0].outputs[0].token_ids) >= 1


def test_structured_outputs_constrain_as_latent_generate_does(llm, model_dir, tmp_path):
    schema = {"type": "object", "properties": {"z": {"type": "boolean"}, "a": {"enum": [1, 2]}},
              "required": ["z", "a"]}
    kinds = [
        latent.StructuredOutputsParams(choice=["yes", "no", "maybe not"]),
        latent.StructuredOutputsParams(regex="[a-c]{3}-[0-9]"),
        latent.StructuredOutputsParams(grammar='root ::= "(" [0-9] ("+" [0-9])? ")"'),
        latent.StructuredOutputsParams(json=schema),
        latent.StructuredOutputsParams(json=json.dumps(schema)),
        # One tag, first and alone (XGrammar's structural tag, as vLLM's JSON text).
        latent.StructuredOutputsParams(structural_tag=json.dumps({"format": {
            "type": "triggered_tags", "triggers": ["<f"], "at_least_one": True,
            "stop_after_first": True, "tags": [{"begin": "<f>", "end": "</f>", "content": {
                "type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 1}}]}})),
    ]
    params = [latent.SamplingParams(temperature=1.0, seed=10 + i, max_tokens=60 if i == 5 else 30,
                                    structured_outputs=k)
              for i, k in enumerate(kinds)]
    results = llm.generate(["Answer:"] * len(params), params)
    texts = [r.outputs[0].text for r in results]
    assert texts[0] in ("yes", "no", "maybe not")
    assert re.fullmatch(r"[a-c]{3}-[0-9]", texts[1])
    assert re.fullmatch(r"\([0-9](\+[0-9])?\)", texts[2])
    assert list(json.loads(texts[3])) == ["z", "a"]  # the schema's order
    tagged = re.fullmatch(r"<f>(.*)</f>", texts[5], re.S)
    assert tagged and list(json.loads(tagged.group(1))) == ["z", "a"], texts[5]
    assert all(r.outputs[0].finish_reason == "stop" for r in results), results
    # The same lines through `latent generate`: the same tokens.
    expected = cli_generate(model_dir, [dict(prompt="Answer:", **p._line()) for p in params], tmp_path)
    for result, want in zip(results, expected):
        assert_same(result.outputs[0], want)
    # The schema as text: the same output as the object, given the same seed.
    again = llm.generate("Answer:", dataclasses.replace(params[4], seed=13))
    assert again[0].outputs[0].text == texts[3]

    with pytest.raises(ValueError, match="exactly one of json, regex"):
        latent.StructuredOutputsParams(regex="a", choice=["a"])
    with pytest.raises(ValueError, match="got none"):
        latent.StructuredOutputsParams(json_object=False)
    with pytest.raises(latent.LatentError, match="the regex cannot be compiled"):
        llm.generate("x", latent.SamplingParams(structured_outputs=latent.StructuredOutputsParams(regex="(")))


REGEX = latent.SamplingParams(temperature=1.0, seed=11, max_tokens=30,
                              structured_outputs=latent.StructuredOutputsParams(regex="[a-c]{3}-[0-9]"))


def test_structured_outputs_refused_when_submitted_and_named(llm):
    text = llm.generate("Answer:", REGEX)[0].outputs[0].text

    def refused(**kind):
        return latent.SamplingParams(structured_outputs=latent.StructuredOutputsParams(**kind))

    # Schema text nested this deep overflowed the stack (the process died with SIGSEGV).
    with pytest.raises(latent.LatentError, match="structured_outputs.json nests deeper than 64 levels"):
        llm.generate("x", refused(json="[" * 100000 + "]" * 100000))
    # A grammar no output fits is refused when submitted, not failed at its first draw.
    with pytest.raises(latent.LatentError, match="^prompt 0: the grammar admits no output$"):
        llm.generate("x", refused(grammar="root ::= root"))
    with pytest.raises(latent.LatentError, match="^prompt 0: the regex admits no output$"):
        llm.generate("x", refused(regex="[^\\x00-\\U0010FFFF]"))
    # XGrammar's time and source path are left out of its errors.
    with pytest.raises(latent.LatentError) as e:
        llm.generate("x", refused(regex="("))
    assert str(e.value).startswith("prompt 0: the regex cannot be compiled: "), str(e.value)
    assert ".cc:" not in str(e.value)
    assert not str(e.value).endswith("\n")
    assert llm.generate("Answer:", REGEX)[0].outputs[0].text == text  # still usable


def test_latent_generate_names_the_line_of_a_refused_grammar(llm, model_dir, tmp_path):
    """`latent generate` names the file and line of a line whose grammar is refused, as it does a
    line it cannot parse."""
    text = llm.generate("Answer:", REGEX)[0].outputs[0].text

    def refused(**kind):
        return latent.SamplingParams(structured_outputs=latent.StructuredOutputsParams(**kind))

    lines = [dict(prompt="Answer:", **REGEX._line()),
             dict(prompt="x", **refused(regex="(")._line()),
             dict(prompt="x", **refused(grammar="root ::= root")._line()),
             {"prompt": "x", "max_tokens": "many"}]
    out = cli_generate(model_dir, lines, tmp_path)
    path = tmp_path / "requests.jsonl"
    assert out[0]["text"] == text
    assert out[1]["error"].startswith(f"{path}:2: the regex cannot be compiled: "), out[1]
    assert ".cc:" not in out[1]["error"]
    assert out[2]["error"] == f"{path}:3: the grammar admits no output"
    assert out[3]["error"].startswith(f"{path}:4: "), out[3]


def test_structured_outputs_take_vllms_option_booleans(llm):
    """vLLM's disable_any_whitespace, disable_additional_properties and (older releases)
    disable_fallback are accepted, sent in the line, and change nothing."""
    text = llm.generate("Answer:", REGEX)[0].outputs[0].text
    options = latent.StructuredOutputsParams(regex="[a-c]{3}-[0-9]", disable_any_whitespace=True,
                                             disable_additional_properties=True, disable_fallback=True)
    assert options._line() == {"regex": "[a-c]{3}-[0-9]", "disable_any_whitespace": True,
                               "disable_additional_properties": True, "disable_fallback": True}
    assert latent.StructuredOutputsParams(json_object=True)._line()["disable_fallback"] is False
    with_options = dataclasses.replace(REGEX, structured_outputs=options)
    assert llm.generate("Answer:", with_options)[0].outputs[0].text == text


INTERRUPTED = textwrap.dedent("""
    import signal, sys, time
    # Ctrl-C as at a terminal: Python keeps SIGINT ignored when its parent started it ignored,
    # which a pytest-xdist worker sometimes passes on (seen in full-suite runs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path.insert(0, sys.argv[2])
    import latent
    llm = latent.LLM(sys.argv[1], block_tokens=16, check_invariants=True)
    params = latent.SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    print("READY", flush=True)
    start = time.time()
    try:
        llm.generate([[3 + i, 4, 5] for i in range(16)], params)
        print("NOT INTERRUPTED", flush=True)
    except KeyboardInterrupt:
        print("INTERRUPTED after %.2fs" % (time.time() - start), flush=True)
    deadline = time.time() + 10
    while llm.metrics()["running"] + llm.metrics()["waiting"] and time.time() < deadline:
        time.sleep(0.02)
    m = llm.metrics()
    print("LEFT", m["running"], m["waiting"], m["used_blocks"], flush=True)
    out = llm.generate([[7, 8, 9]], latent.SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    print("AFTER", len(out[0].outputs[0].token_ids), flush=True)
    llm.close()
""")


def test_ctrl_c_during_generate_stops_cleanly(model_dir):
    proc = subprocess.Popen([sys.executable, "-c", INTERRUPTED, str(model_dir), str(BUILD_PYTHON)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY"
    time.sleep(1.0)  # Inside generate, with 16 x 400 tokens to go.
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("INTERRUPTED"), out
    assert lines[1] == "LEFT 0 0 0", out  # Nothing running or waiting, no block held.
    assert lines[2] == "AFTER 3", out


def test_speculative_tokens_change_no_output():
    """The engine option as a keyword, on the trained demo model (which repeats itself, so drafts
    prove right): the same requests give the same outputs, logprobs included."""
    demo = str(REPO / "models" / "demo")
    prompts = ["To be, or not to be, that is the question.\n", "And I have the cast, and the"]
    params = [latent.SamplingParams(temperature=0, max_tokens=40, logprobs=2),
              latent.SamplingParams(temperature=0.7, seed=11, max_tokens=40, logprobs=2, n=2)]
    outputs = {}
    for k in (0, 4):
        with latent.LLM(demo, block_tokens=16, check_invariants=True, speculative_tokens=k) as llm:
            outputs[k] = [r.outputs for r in llm.generate(prompts * 2, params * 2)]
            metrics = llm.metrics()
        assert (metrics["accepted_draft_tokens"] > 0) == (k > 0), metrics
    assert outputs[4] == outputs[0]
    with pytest.raises(latent.LatentError, match="speculative n-gram sizes"):
        latent.LLM(demo, speculative_tokens=2, speculative_ngram_min=3, speculative_ngram_max=2)


def test_stop_reason_is_the_stop_token_id_or_string():
    """CompletionOutput.stop_reason, as vLLM's: the stop_token_ids entry that ended the sample (an
    int), the stop string that did, else None; the same with drafts (speculative decoding), where
    the stop id may be drawn from a draft's row. On the demo model, which repeats itself."""
    demo = str(REPO / "models" / "demo")
    prompt = "To be, or not to be, that is the question.\n"
    greedy = dict(temperature=0, max_tokens=32, ignore_eos=True)
    for k in (0, 4):
        with latent.LLM(demo, block_tokens=16, check_invariants=True, speculative_tokens=k) as llm:
            (plain,) = llm.generate(prompt, latent.SamplingParams(**greedy))[0].outputs
            ids = plain.token_ids
            assert plain.finish_reason == "length" and plain.stop_reason is None, plain
            # The last token that is new where it comes (one of the first ones otherwise).
            at = next(i for i in range(len(ids) - 1, 1, -1) if ids[i] not in ids[:i])
            params = latent.SamplingParams(stop_token_ids=[ids[at]], **greedy)
            (out,) = llm.generate(prompt, params)[0].outputs
            assert out.token_ids == ids[:at + 1] and out.finish_reason == "stop", (out, k)
            assert out.stop_reason == ids[at] and type(out.stop_reason) is int, (out, k)
            stop = next(plain.text[i:i + 3] for i in range(3, len(plain.text))
                        if plain.text[i:i + 3].strip() == plain.text[i:i + 3])
            (out,) = llm.generate(prompt, latent.SamplingParams(stop=[stop], **greedy))[0].outputs
            assert out.finish_reason == "stop" and out.stop_reason == stop, (out, k)
            if k:
                assert llm.metrics()["accepted_draft_tokens"] > 0


def test_a_stop_tokens_text_is_not_output():
    """As vLLM's detokenizer: the text of the stop id that ended a sample is left out of
    CompletionOutput.text and StreamChunk.text and out of the stop-string search (token_ids keep
    it), unless include_stop_str_in_output, which keeps the text, still unsearched; so stop_reason
    is the id even where its text completes a stop string. With drafts too. It used to be output,
    and the stop string it completed won."""
    demo = str(REPO / "models" / "demo")
    prompt = "To be, or not to be, that is the question.\n"
    greedy = dict(temperature=0, ignore_eos=True)
    for k in (0, 4):
        with latent.LLM(demo, block_tokens=16, check_invariants=True, speculative_tokens=k) as llm:
            runs = [r.outputs[0] for r in llm.generate(
                [prompt] * 12, [latent.SamplingParams(max_tokens=n, **greedy) for n in range(1, 13)])]
            ids = runs[-1].token_ids
            prefixes = [""] + [r.text for r in runs]
            at, stop = stop_token_case(prefixes, ids)
            token = ids[at]
            cases = [(dict(), prefixes[at]), (dict(stop=[stop]), prefixes[at]),
                     (dict(include_stop_str_in_output=True), prefixes[at + 1]),
                     (dict(stop=[stop], include_stop_str_in_output=True), prefixes[at + 1])]
            for fields, text in cases:
                params = latent.SamplingParams(max_tokens=12, stop_token_ids=[token], **fields, **greedy)
                (out,) = llm.generate(prompt, params)[0].outputs
                assert out.token_ids == ids[:at + 1] and out.finish_reason == "stop", (out, k)
                assert out.stop_reason == token and out.text == text, (out, fields, k, stop)
                chunks = list(llm.stream(prompt, params))
                assert "".join(c.text for c in chunks) == text, (chunks, fields, k)
                assert [t for c in chunks for t in c.token_ids] == ids[:at + 1]
            (out,) = llm.generate(prompt, latent.SamplingParams(max_tokens=12, stop=[stop], **greedy))[0].outputs
            assert out.stop_reason == stop and out.text == prefixes[at + 1][:-len(stop)], (out, k)


def test_an_extra_eos_id_is_the_stop_reason(tiny_models):
    """generation_config.json lists [EXTRA_EOS, TOKENIZER_EOS]: as vLLM's
    update_from_generation_config makes every id but the tokenizer's eos a stop_token_ids entry,
    EXTRA_EOS ends a sample with it as the (int) stop_reason and its text left out, the
    tokenizer's EOS with None. Under ignore_eos the extra id ends nothing; min_tokens holds it off.
    logit_bias makes the random model draw the id asked for."""
    prompt = "The quick brown fox"

    def run(token: int, **fields) -> latent.CompletionOutput:
        fields = dict(dict(temperature=0, max_tokens=8), **fields)
        params = latent.SamplingParams(logit_bias={token: 100}, **fields)
        return llm.generate(prompt, params)[0].outputs[0]

    def stream(token: int) -> list[latent.StreamChunk]:
        params = latent.SamplingParams(logit_bias={token: 100}, temperature=0, max_tokens=8)
        return list(llm.stream(prompt, params))

    with latent.LLM(str(two_eos_model(tiny_models)), block_tokens=16, check_invariants=True) as llm:
        out = run(EXTRA_EOS)
        assert out.token_ids == [EXTRA_EOS] and out.finish_reason == "stop", out
        assert out.stop_reason == EXTRA_EOS and type(out.stop_reason) is int and out.text == "", out
        (chunk,) = stream(EXTRA_EOS)
        assert chunk.token_ids == [EXTRA_EOS] and chunk.text == "", chunk
        assert chunk.stop_reason == EXTRA_EOS and type(chunk.stop_reason) is int, chunk
        out = run(TOKENIZER_EOS)
        assert out.token_ids == [TOKENIZER_EOS] and out.finish_reason == "stop", out
        assert out.stop_reason is None, out
        (chunk,) = stream(TOKENIZER_EOS)
        assert chunk.finish_reason == "stop" and chunk.stop_reason is None, chunk
        out = run(EXTRA_EOS, ignore_eos=True, max_tokens=3)
        assert out.token_ids == [EXTRA_EOS] * 3 and out.finish_reason == "length", out
        assert out.stop_reason is None, out
        two = run(EXTRA_EOS, min_tokens=2, max_tokens=2)
        out = run(EXTRA_EOS, min_tokens=2)
        assert EXTRA_EOS not in two.token_ids, two
        assert out.token_ids == two.token_ids + [EXTRA_EOS], (out, two)
        assert out.stop_reason == EXTRA_EOS and out.text == two.text, (out, two)


def test_the_tokenizers_eos_ends_a_sample_though_unlisted(tiny_models):
    """generation_config.json lists only EXTRA_EOS: the tokenizer's EOS ends a sample all the same
    (vLLM checks request.eos_token_id), stop_reason None, in generate and stream; min_tokens holds
    it off. It used to end nothing (max_tokens ids of it, "length")."""
    params = latent.SamplingParams(temperature=0, max_tokens=4, logit_bias={TOKENIZER_EOS: 100})
    with latent.LLM(str(unlisted_eos_model(tiny_models)), block_tokens=16,
                    check_invariants=True) as llm:
        out = llm.generate("The quick brown fox", params)[0].outputs[0]
        assert out.token_ids == [TOKENIZER_EOS] and out.finish_reason == "stop", out
        assert out.stop_reason is None and out.text == "", out
        (chunk,) = llm.stream("The quick brown fox", params)
        assert chunk.token_ids == [TOKENIZER_EOS] and chunk.finish_reason == "stop", chunk
        assert chunk.stop_reason is None, chunk
        held = latent.SamplingParams(temperature=0, max_tokens=4, logit_bias={TOKENIZER_EOS: 100},
                                     min_tokens=2)
        out = llm.generate("The quick brown fox", held)[0].outputs[0]
        assert len(out.token_ids) == 3 and TOKENIZER_EOS not in out.token_ids[:2], out
        assert out.token_ids[2] == TOKENIZER_EOS and out.finish_reason == "stop", out


def test_without_a_tokenizer_every_eos_id_is_the_stop_reason(tiny_models, tmp_path):
    """No tokenizer, so no primary EOS (vLLM's request.eos_token_id is None): every
    generation_config EOS id ends a sample with its id as the stop_reason, the first listed too."""
    model = copy_without_tokenizer(two_eos_model(tiny_models), tmp_path / "no-tokenizer")
    with latent.LLM(str(model), block_tokens=16, check_invariants=True) as llm:
        for token in (EXTRA_EOS, TOKENIZER_EOS):
            params = latent.SamplingParams(temperature=0, max_tokens=4, logit_bias={token: 100})
            out = llm.generate({"prompt_token_ids": [3, 4, 5]}, params)[0].outputs[0]
            assert out.token_ids == [token] and out.finish_reason == "stop", out
            assert out.stop_reason == token and type(out.stop_reason) is int, out
            (chunk,) = llm.stream({"prompt_token_ids": [3, 4, 5]}, params)
            assert chunk.stop_reason == token, chunk


def test_generate_refuses_what_is_not_a_prompt(llm):
    """None and an empty dict are errors, not an empty result; an empty list is no prompts."""
    with pytest.raises(TypeError, match="generate\\(\\) needs prompts"):
        llm.generate(None)
    with pytest.raises(ValueError, match="needs 'prompt' or 'prompt_token_ids'"):
        llm.generate({})
    with pytest.raises(latent.LatentError, match="empty"):
        llm.generate("")
    assert llm.generate([]) == []


def test_logit_bias_equals_latent_generate(llm, model_dir, tmp_path):
    """logit_bias (int keys, sent as the strings request lines and OpenAI take) and
    allowed_token_ids give what the same request line gives through `latent generate`."""
    cases = [
        ([5, 6, 7], latent.SamplingParams(temperature=0, max_tokens=6, ignore_eos=True,
                                          logit_bias={9: 100.0}, logprobs=1)),
        ([11, 3, 250], latent.SamplingParams(temperature=0.9, seed=4, max_tokens=8, ignore_eos=True,
                                             logit_bias={4: 3.0, 8: -100}, n=2, logprobs=2)),
        ([40, 41], latent.SamplingParams(temperature=1.3, seed=2, max_tokens=8, ignore_eos=True,
                                         allowed_token_ids=[3, 9, 27], logit_bias={27: -2.5})),
    ]
    lines = [dict({"ids": ids}, **params._line()) for ids, params in cases]
    assert lines[0]["logit_bias"] == {9: 100.0}  # json.dumps makes the key "9"
    expected = cli_generate(model_dir, lines, tmp_path)
    results = llm.generate([ids for ids, _ in cases], [params for _, params in cases])
    for result, want, (_, params) in zip(results, expected, cases):
        samples = want.get("samples", [want])
        assert len(result.outputs) == params.n == len(samples)
        for output, sample in zip(result.outputs, samples):
            assert_same(output, sample)
    assert results[0].outputs[0].token_ids == [9] * 6
    assert set(results[2].outputs[0].token_ids) <= {3, 9, 27}
    with pytest.raises(latent.LatentError, match="logit_bias token id 1000000 is outside"):
        llm.generate([[1, 2]], latent.SamplingParams(logit_bias={10**6: 1.0}))


@pytest.mark.parametrize("key", ["05", "-0", "00", "+5", " 5"])
def test_logit_bias_key_is_a_canonical_integer(key):
    """A request line's logit_bias key is a token id in its one decimal form: "05" beside "5"
    would be two keys for one id."""
    with pytest.raises((latent.LatentError, ValueError), match="is not a token id"):
        latent._latent.check_sampling(json.dumps({"logit_bias": {key: 1.0}}))
    latent._latent.check_sampling(json.dumps({"logit_bias": {"5": 1.0, "0": 2.0}}))


@pytest.mark.parametrize("fields,message", [
    ({"logit_bias": {5: 100.5}}, "logit_bias for token id 5 must be in \\[-100, 100\\]"),
    # Checked on the double, as the server checks it: as a float it would round to 100.
    ({"logit_bias": {5: 100.0000001}}, "logit_bias for token id 5 must be in \\[-100, 100\\]"),
    ({"logit_bias": {-1: 1.0}}, "logit_bias token id -1"),
    ({"logit_bias": {5: "x"}}, "the bias of token id 5 must be a number"),
    ({"allowed_token_ids": []}, "allowed_token_ids must not be empty"),
    ({"allowed_token_ids": [3, -4]}, "allowed_token_ids token id -4"),
    ({"temperature": -1}, "temperature' must be >= 0, got -1"),
    ({"top_p": 0}, "top_p' must be in \\(0, 1\\], got 0"),
    ({"n": 0}, "n must be in"),
    ({"repetition_penalty": 1e-9}, "repetition_penalty' must be in \\[0.01, 100\\], got 1e-09"),
    ({"temperature": float("nan")}, "temperature must be finite, got nan"),
    ({"seed": 1.5}, "'seed' must be an integer"),
    ({"prompt_logprobs": 21}, "field 'prompt_logprobs' must be in \\[0, 20\\], got 21"),
    ({"prompt_logprobs": -2}, "prompt_logprobs must be in \\[0, 20\\] or None, got -2"),
    ({"prompt_logprobs": -1}, "prompt_logprobs must be in \\[0, 20\\] or None, got -1"),
    ({"logprobs": -1}, "logprobs must be in \\[0, 20\\] or None, got -1"),
])
def test_sampling_params_are_checked_when_made(fields, message):
    """As vLLM's SamplingParams: a ValueError at construction, by the engine's own rules."""
    with pytest.raises(ValueError, match=message):
        latent.SamplingParams(**fields)
    assert latent.SamplingParams(temperature=0.5, top_k=-1, n=3, seed=7).n == 3
    assert latent.SamplingParams(prompt_logprobs=20).prompt_logprobs == 20


def test_a_sentencepiece_output_keeps_its_leading_space(tiny_models):
    """As vLLM's detokenizer (primed with the prompt), LLM.generate and LLM.stream give the text
    an output adds after its prompt's: with Llama 2's tokenizer a first token "▁x" keeps its
    space, as HF decodes prompt + output ("Hello" then "▁x" is "Hello x")."""
    from transformers import AutoTokenizer

    llama2 = REPO.parent / "shared" / "tokenizers" / "llama2"
    hf = AutoTokenizer.from_pretrained(str(llama2)).backend_tokenizer
    prompt = hf.encode("Hello").ids

    def after_prompt(ids):
        whole = hf.decode(prompt + ids, skip_special_tokens=True)
        assert whole.startswith("Hello")
        return whole[len("Hello"):]

    model = tiny_models.get("deepseek_v3", "--tokenizer", str(llama2))
    with latent.LLM(str(model), block_tokens=16) as llm:
        params = latent.SamplingParams(temperature=1.0, seed=3, n=8, max_tokens=3, ignore_eos=True)
        outputs = llm.generate("Hello", params)[0].outputs
        assert [o.text for o in outputs] == [after_prompt(o.token_ids) for o in outputs]
        assert any(o.text.startswith(" ") for o in outputs)  # the case this is about came up
        one = latent.SamplingParams(temperature=1.0, seed=3, max_tokens=3, ignore_eos=True)
        chunks = list(llm.stream("Hello", one))
        streamed_ids = [t for c in chunks for t in c.token_ids]
        assert "".join(c.text for c in chunks) == after_prompt(streamed_ids)
