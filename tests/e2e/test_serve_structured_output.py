"""Structured output (`response_format`) through the official `openai` client on a random tiny
DeepSeek V3 with the real deepseek_v3 tokenizer: 100 completions sampled at temperature 1 against a
schema with nested objects, arrays, enums, bounded integers and short strings all parse, validate
(`jsonschema`) and end with finish_reason "stop", while seeded unconstrained requests running in
the same batches give exactly what they give alone; json_object on /v1/completions gives an
object; a schema the grammar cannot enforce is a 400 naming the keyword. vLLM's structured_outputs
(choice, regex, EBNF or Lark grammar, json, json_object) constrain the same way, and a bad one is a
400 naming what is wrong. vLLM's structural tags (response_format type structural_tag, in its legacy
and XGrammar forms, or structured_outputs.structural_tag) leave the text free until a trigger and
constrain it from there to the tag's end: greedy text without the trigger is what it is without
the tag; a logit_bias that makes the model write the trigger gets the tag's JSON after it.

Every value the schema allows is bounded (enums, integer ranges, maxLength, maxItems), so each
completion ends well inside max_tokens: once the JSON is complete the grammar allows only EOS."""

from __future__ import annotations

import json
import re
import threading

import jsonschema
import openai
import pytest

from e2e_harness import MODEL_NAME, chat_model, server  # noqa: F401

# Nested objects, arrays, enums, bounded integers, a short string, all required: short outputs (a
# random model on a 129k vocabulary samples slowly), each ending well inside max_tokens.
SCHEMA = {
    "type": "object",
    "properties": {
        "kind": {"enum": ["cat", "dog", "bird"]},
        "age": {"type": "integer", "minimum": 0, "maximum": 30},
        "owner": {
            "type": "object",
            "properties": {
                "tier": {"enum": ["gold", "none"]},
                "vip": {"type": "boolean"},
                "tag": {"type": "object", "properties": {"id": {"type": "string", "maxLength": 2}},
                        "required": ["id"]},
            },
            "required": ["tier", "vip", "tag"],
        },
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2},
    },
    "required": ["kind", "age", "owner", "tags"],
}
RESPONSE_FORMAT = {"type": "json_schema",
                   "json_schema": {"name": "pet", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "Describe a pet as JSON."}]
# Generous for the schema's longest output (short strings may still take one token per byte).
MAX_TOKENS = 160


def unconstrained(client, seed: int) -> str:
    """Seeded sampling (seed > 0) or greedy (seed 0): either gives the same text in any batch."""
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8 if seed else 16,
                                       temperature=1.0 if seed else 0.0, seed=seed or None)
    return r.choices[0].message.content


def test_sampled_completions_fit_the_schema_beside_unaffected_unconstrained_requests(server):
    client = server.client(timeout=600)
    seeds = [101, 202, 0]
    alone = {seed: unconstrained(client, seed) for seed in seeds}

    # 10 requests of n = 10 (100 completions), each with its own seed, and the same unconstrained
    # requests again while they run (repeatedly, so they share steps with constrained samples).
    results: list = []
    errors: list = []
    again: dict[int, list[str]] = {seed: [] for seed in seeds}

    def constrained(i: int):
        try:
            results.append(client.chat.completions.create(
                model=MODEL_NAME, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=1.0,
                seed=1000 + 100 * i, n=10, response_format=RESPONSE_FORMAT))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def free(seed: int):
        try:
            for _ in range(2):
                again[seed].append(unconstrained(client, seed))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=constrained, args=(i,)) for i in range(10)]
    threads += [threading.Thread(target=free, args=(seed,)) for seed in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert all(not t.is_alive() for t in threads)

    choices = [c for r in results for c in r.choices]
    assert len(choices) == 100
    distinct = set()
    for c in choices:
        assert c.finish_reason == "stop", c
        value = json.loads(c.message.content)
        jsonschema.validate(value, SCHEMA)
        distinct.add(c.message.content)
    assert len(distinct) > 50  # temperature 1: the samples differ
    for seed in seeds:
        assert again[seed] == [alone[seed]] * 2, seed


def test_json_object_on_completions_and_streaming(server):
    client = server.client()
    r = client.completions.create(model=MODEL_NAME, prompt="JSON:", max_tokens=200, temperature=0.0,
                                  extra_body={"response_format": {"type": "json_object"}})
    # Greedy on a random model may fill strings until max_tokens; the text is then a prefix of an
    # object. Either way it starts as one, and a complete one parses.
    text = r.choices[0].text
    assert text.startswith("{")
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    # Streamed: the same text as not streamed (greedy), and a small bounded schema completes.
    small = {"type": "json_schema", "json_schema": {"name": "s", "schema": {
        "type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"enum": [1, 2, 3]}},
        "required": ["ok", "n"]}}}
    plain = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=40,
                                           temperature=0.0, response_format=small)
    chunks = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=40,
                                            temperature=0.0, response_format=small, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == plain.choices[0].message.content
    assert plain.choices[0].finish_reason == "stop"
    value = json.loads(streamed)
    assert value["ok"] in (True, False) and value["n"] in (1, 2, 3)


def test_schemas_the_grammar_cannot_enforce_are_refused(server):
    client = server.client()
    for schema, words in [
        ({"type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}},
         "unsupported JSON schema keyword 'uniqueItems' at #/properties/t"),
        ({"type": "object", "if": {"required": ["a"]}}, "'if' at #"),
        ({"type": "nonsense"}, "nonsense"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(
                model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
                response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        assert words in str(e.value), str(e.value)
        assert "response_format" in str(e.value)


# vLLM's structured_outputs (an extra body field: the openai client passes it through).


def test_structured_outputs_choice_regex_grammar_and_json(server):
    client = server.client(timeout=300)
    choices = ["yes", "no", "it \"depends\"\n"]
    for seed in (1, 2, 3, 4):
        r = client.chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=20, temperature=1.0, seed=seed,
            extra_body={"structured_outputs": {"choice": choices}})
        assert r.choices[0].message.content in choices and r.choices[0].finish_reason == "stop", r
    # A regex on completions, n samples; the same on the stream.
    r = client.completions.create(model=MODEL_NAME, prompt="Code:", max_tokens=20, temperature=1.0,
                                  seed=5, n=4, extra_body={"structured_outputs": {"regex": "[A-F]{2}-[0-9]{3}"}})
    for c in r.choices:
        assert re.fullmatch(r"[A-F]{2}-[0-9]{3}", c.text) and c.finish_reason == "stop", c
    chunks = client.completions.create(model=MODEL_NAME, prompt="Code:", max_tokens=20, temperature=1.0,
                                       seed=5, n=4, stream=True,
                                       extra_body={"structured_outputs": {"regex": "[A-F]{2}-[0-9]{3}"}})
    streamed = ["", "", "", ""]
    for chunk in chunks:
        for c in chunk.choices:
            streamed[c.index] += c.text
    assert streamed == [c.text for c in r.choices]
    # An EBNF grammar.
    grammar = 'root ::= "[" item ("," item)? "]"\nitem ::= "cat" | "dog" | [0-9]'
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=30,
                                       temperature=1.0, seed=6,
                                       extra_body={"structured_outputs": {"grammar": grammar}})
    assert re.fullmatch(r"\[(cat|dog|[0-9])(,(cat|dog|[0-9]))?\]", r.choices[0].message.content), r
    # The same language written in Lark (vLLM converts it to EBNF): rules from `start`, a `|`
    # continuation line, an optional, single quotes, a comment and an import from Lark's common.
    lark = """// a list of one or two items
start: "[" item ["," item] "]"
item: 'cat' | "dog"
    | DIGIT
%import common.DIGIT"""
    for seed in (6, 7):
        r = client.completions.create(model=MODEL_NAME, prompt="List:", max_tokens=30,
                                      temperature=1.0, seed=seed, n=2,
                                      extra_body={"structured_outputs": {"grammar": lark}})
        for c in r.choices:
            assert re.fullmatch(r"\[(cat|dog|[0-9])(,(cat|dog|[0-9]))?\]", c.text), c
            assert c.finish_reason == "stop", c
    # A schema, as an object (its properties in its order) and as its text: the same output.
    schema = {"type": "object", "properties": {"z": {"type": "boolean"}, "a": {"enum": [1, 2]}},
              "required": ["z", "a"]}
    outs = []
    for value in (schema, json.dumps(schema)):
        r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=30,
                                           temperature=1.0, seed=8,
                                           extra_body={"structured_outputs": {"json": value}})
        outs.append(r.choices[0].message.content)
    assert outs[0] == outs[1] and list(json.loads(outs[0])) == ["z", "a"], outs
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=200,
                                       temperature=0.0,
                                       extra_body={"structured_outputs": {"json_object": True}})
    assert r.choices[0].message.content.startswith("{")


def test_bad_structured_outputs_are_refused_by_name(server):
    client = server.client()
    for body, words in [
        ({"regex": "(unclosed"}, "structured_outputs: the regex cannot be compiled"),
        ({"grammar": "root ::= ("}, "structured_outputs: the grammar cannot be compiled"),
        ({"regex": "a", "choice": ["a"]}, "not both 'regex' and 'choice'"),
        ({"choice": []}, "non-empty list of strings"),
        ({"structural_tag": "{}"}, "structured_outputs.structural_tag needs 'format'"),
        ({"structural_tag": "{\"structures\": ["}, "structured_outputs.structural_tag is not JSON"),
        ({"structural_tag": json.dumps(legacy_tag(["<", "["]))},
         'structured_outputs.structural_tag.triggers[1] "[" starts no begin'),
        ({"structural_tag": json.dumps({"format": {"type": "nonsense"}})},
         "structured_outputs: the structural tag cannot be compiled"),
        ({"json": {"type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}}},
         "unsupported JSON schema keyword 'uniqueItems'"),
        ("a+", "structured_outputs must be an object"),
        # Compiled, but no output could fit: refused now, not a 500 at the first draw.
        ({"grammar": "root ::= root"}, "structured_outputs: the grammar admits no output"),
        # Lark grammars: a rule never defined, and no rule at all, named with their line.
        ({"grammar": "start: colour\ncolor: 'red'"},
         "structured_outputs.grammar line 1: rule 'colour' is not defined"),
        ({"grammar": "// nothing here\n%ignore \" \""}, "defines no Lark rule"),
        ({"grammar": "start: /(?<=a)b/"}, "the grammar cannot be compiled"),
        ({"regex": "[^\\x00-\\U0010FFFF]"}, "structured_outputs: the regex admits no output"),
        # Schema text the body's depth check cannot see into (it overflowed the server's stack).
        ({"json": "[" * 100000 + "]" * 100000}, "structured_outputs.json nests deeper than 64"),
        ({"json": ["x" * 100000]}, "structured_outputs.json must be a JSON schema"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
                                           extra_body={"structured_outputs": body})
        assert words in str(e.value) and "structured_outputs" in str(e.value), str(e.value)
        # Neither XGrammar's source paths nor megabytes of the request come back.
        assert ".cc:" not in str(e.value) and len(str(e.value)) < 1000, str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
                                       response_format={"type": "json_object"},
                                       extra_body={"structured_outputs": {"regex": "a"}})
    assert "cannot be combined with a response_format" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8, tools=TOOLS,
                                       tool_choice="required",
                                       extra_body={"structured_outputs": {"regex": "a"}})
    assert "structured_outputs cannot be combined with tool_choice" in str(e.value)


# vLLM's structural tags: the text is free until a trigger, then the tag's (here a tool call's JSON
# between <name> and </name>) until its end, then free again.


def legacy_tag(triggers: list[str]) -> dict:
    """vLLM's legacy structural tag: one structure per tool, each beginning with a trigger."""
    return {"type": "structural_tag", "triggers": triggers,
            "structures": [{"begin": f"<{name}>", "schema": schema, "end": f"</{name}>"}
                           for name, schema in TOOL_SCHEMAS.items()]}


def format_tag(name: str) -> dict:
    """XGrammar's structural tag: exactly one call of `name` and nothing else."""
    return {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<function="], "at_least_one": True,
        "stop_after_first": True,
        "tags": [{"begin": f"<function={name}>", "end": "</function>",
                  "content": {"type": "json_schema", "json_schema": TOOL_SCHEMAS[name],
                              "max_whitespace_cnt": 1}}]}}


def test_structural_tag_leaves_text_free_until_a_trigger(server):
    client = server.client(timeout=300)
    plain = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=24,
                                           temperature=0.0)
    text = plain.choices[0].message.content
    assert "<function=" not in text  # the trigger never came: nothing was constrained
    for body in ({"response_format": legacy_tag(["<function="]) | {
                     "structures": [{"begin": "<function=get_weather>", "schema": WEATHER,
                                     "end": "</function>"}]}},
                 {"structured_outputs": {"structural_tag": json.dumps(
                     {"format": format_tag("get_weather")["format"] | {"at_least_one": False}})}}):
        r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=24,
                                           temperature=0.0, extra_body=body)
        assert r.choices[0].message.content == text, body


def test_structural_tag_constrains_the_text_after_its_trigger(server, chat_model):
    from tokenizers import Tokenizer

    (lt,) = Tokenizer.from_file(str(chat_model / "tokenizer.json")).encode(
        "<", add_special_tokens=False).ids
    client = server.client(timeout=300)
    # "<" is the trigger, and the bias makes the model write it where the text is free: the text
    # is then mostly calls, each's JSON fitting its tool's schema.
    r = client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, max_tokens=120, temperature=1.0, seed=3, n=4,
        logit_bias={str(lt): 100}, response_format=legacy_tag(["<"]))
    for c in r.choices:
        text = c.message.content
        calls = re.findall(r"<(get_weather|get_time)>(.*?)</\1>", text, re.S)
        assert len(calls) >= 2 and text.startswith("<get_"), text
        # Every trigger began a call: outside the complete ones, a "<" only starts the last call,
        # cut off by max_tokens.
        outside = re.sub(r"<(get_weather|get_time)>.*?</\1>", "", text, flags=re.S)
        cut = outside.find("<")
        tail = outside[cut:]
        assert cut < 0 or (text.endswith(tail) and
                           re.match(r"<(get_weather>|get_time>|get_\w*$|g?e?t?$)", tail)), text
        for name, args in calls:
            jsonschema.validate(json.loads(args), TOOL_SCHEMAS[name])
    # Without the bias the trigger never comes (the text is free), as the test above shows; with
    # at_least_one the tag comes first. XGrammar's form on completions: exactly one call, then EOS.
    r = client.completions.create(model=MODEL_NAME, prompt="Call:", max_tokens=60,
                                  temperature=1.0, seed=4, n=4,
                                  extra_body={"response_format": format_tag("get_time")})
    outs = []
    for c in r.choices:
        m = re.fullmatch(r"<function=get_time>(.*)</function>", c.text, re.S)
        assert m and c.finish_reason == "stop", c
        jsonschema.validate(json.loads(m.group(1)), CLOCK)
        outs.append(c.text)
    # structured_outputs takes the same tag as JSON text: the same samples.
    r = client.completions.create(
        model=MODEL_NAME, prompt="Call:", max_tokens=60, temperature=1.0, seed=4, n=4,
        extra_body={"structured_outputs": {"structural_tag": json.dumps(format_tag("get_time"))}})
    assert [c.text for c in r.choices] == outs


def test_bad_structural_tags_are_refused_by_name(server):
    client = server.client()
    weather = [{"begin": "<get_weather>", "schema": WEATHER, "end": "</get_weather>"}]
    for response_format, words in [
        ({"type": "structural_tag", "structures": weather},
         "response_format needs 'triggers' beside 'structures'"),
        # As vLLM: without "structures" it is the format form, stray "triggers" ignored.
        ({"type": "structural_tag", "triggers": ["<"]},
         "response_format needs 'format' (XGrammar's structural tag format) or 'structures'"),
        ({"type": "structural_tag", "structures": [weather[0] | {"schema": ["x"]}],
          "triggers": ["<"]},
         'response_format.structures[0].schema must be a JSON schema (an object), got ["x"]'),
        ({"type": "structural_tag", "structures": weather, "triggers": ["<", "{"]},
         'response_format.triggers[1] "{" starts no begin'),
        ({"type": "structural_tag", "structures": weather, "triggers": ["["]},
         'response_format.structures[0].begin "<get_weather>" starts with no trigger'),
        ({"type": "structural_tag"}, "response_format needs 'format'"),
        ({"type": "structural_tag", "format": "x"}, 'response_format.format must be an object'),
        ({"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": []}},
         "response_format: the structural tag cannot be compiled: "),
        ({"type": "structural_tag", "structures": [weather[0] | {"schema": {
            "type": "object", "properties": {"t": {"type": "array", "uniqueItems": True}}}}],
          "triggers": ["<"]},
         "response_format: the structural tag's schema at format.tags[0].content: unsupported "
         "JSON schema keyword 'uniqueItems'"),
        # A format with no type is the one XGrammar infers: its schema and triggers are checked.
        ({"type": "structural_tag", "format": {"json_schema": {"type": "array",
                                                               "uniqueItems": True}}},
         "response_format: the structural tag's schema at format: unsupported JSON schema "
         "keyword 'uniqueItems'"),
        ({"type": "structural_tag", "format": {"triggers": ["<f", "["], "tags": [
            {"begin": "<f>", "content": {"type": "any_text"}, "end": "</f>"}]}},
         'response_format.format.triggers[1] "[" starts no begin'),
        # XGrammar's failed check, without its C++ condition.
        ({"type": "structural_tag", "format": {"type": "or", "elements": []}},
         "response_format: the structural tag cannot be compiled: Invalid structural tag error: "
         "Or format must have at least one element"),
        ({"type": "structural_tag", "triggers": ["<"], "structures": [
            {"begin": f"<f{i}>", "schema": WEATHER, "end": "</f>"} for i in range(1025)]},
         "response_format.structures holds more than 1024 structures, the most a structural "
         "tag may have"),
    ]:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
                                           response_format=response_format)
        assert words in str(e.value), str(e.value)
        assert ".cc:" not in str(e.value), str(e.value)
        assert "Check failed" not in str(e.value), str(e.value)


def test_a_huge_structural_tag_is_refused_at_once(server):
    """Ten thousand structures (under the server's 1 MiB body limit; a larger limit took more)
    were half a minute of a worker's time, then compiled; past the cap they are refused before
    anything is done with the list (no timing asserted: the 400 is what the cap changes)."""
    structures = [{"begin": f"<f{i}>", "schema": {"type": "object"}, "end": "</f>"}
                  for i in range(10_000)]
    with pytest.raises(openai.BadRequestError) as e:
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
            response_format={"type": "structural_tag", "structures": structures,
                             "triggers": [s["begin"] for s in structures]})
    assert "more than 1024 structures" in str(e.value), str(e.value)


def test_a_structural_tag_of_too_many_formats_is_refused_at_once(server):
    """A "sequence" of ten thousand strings (in the server's 1 MiB body limit) was 10 s and half
    a GiB of XGrammar's compiling; every format in the tag is counted, and past the cap the tag is
    refused before it is compiled."""
    elements = [{"type": "const_string", "value": f"v{i}"} for i in range(10_000)]
    with pytest.raises(openai.BadRequestError) as e:
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
            response_format={"type": "structural_tag",
                             "format": {"type": "sequence", "elements": elements}})
    assert ("response_format.format holds more than 4096 formats in all, the most a structural "
            "tag may have") in str(e.value), str(e.value)


def test_a_huge_json_schema_is_refused_at_once(server):
    """25,000 properties ran XGrammar's compiler for minutes; past the schema's limits it is a 400
    naming the limit and the count, before anything is compiled (response_format, structured_outputs
    and a forced tool call's schema alike)."""
    names = [f"p{i}" for i in range(25_000)]
    schema = {"type": "object", "properties": {n: {"type": "string"} for n in names},
              "required": names}
    too_many = ("too many values in the JSON schema: 75004 at any depth (objects, arrays, strings, "
                "numbers, booleans and nulls), more than the 10000 allowed")
    client = server.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
            response_format={"type": "json_schema",
                             "json_schema": {"name": "big", "schema": schema}})
    assert f"response_format: {too_many}" in str(e.value), str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL_NAME, prompt="x", max_tokens=8,
                                  extra_body={"structured_outputs": {"json": schema}})
    assert f"structured_outputs: {too_many}" in str(e.value), str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=8, tool_choice="required",
            tools=[{"type": "function", "function": {"name": "f", "parameters": schema}}])
    assert "tool_choice: too many values in the JSON schema" in str(e.value), str(e.value)


def test_a_structural_tag_of_too_many_schemas_is_refused_at_once(server):
    """XGrammar compiles each different schema of a tag on its own: a legacy tag of 1,024 took
    tens of seconds. Past 64 different schemas it is a 400 before anything is compiled."""
    structures = [{"begin": f"<f{i}>", "end": "</f>",
                   "schema": {"type": "object", "properties": {f"a{i}": {"type": "string"}}}}
                  for i in range(1024)]
    with pytest.raises(openai.BadRequestError) as e:
        server.client().chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=8,
            response_format={"type": "structural_tag", "structures": structures,
                             "triggers": ["<f"]})
    assert ("response_format holds 1024 different JSON schemas, more than the 64 a structural tag "
            "may have") in str(e.value), str(e.value)


# Forced tool calls: tool_choice "required" or a named function constrains the output to the
# call's JSON (structured::ToolCallSchema), read back into tool_calls (forced_tool_call_parser.h).
WEATHER = {"type": "object",
           "properties": {"city": {"enum": ["Paris", "Oslo"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 3}},
           "required": ["city", "days"]}
CLOCK = {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "parameters": CLOCK}}]
TOOL_SCHEMAS = {"get_weather": WEATHER, "get_time": CLOCK}


def test_named_tool_choice_forces_that_call_streamed_and_not(server):
    client = server.client(timeout=300)
    choice = {"type": "function", "function": {"name": "get_weather"}}
    r = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=60,
                                       temperature=1.0, seed=7, n=4, tools=TOOLS, tool_choice=choice)
    for c in r.choices:
        # A named function finishes "stop" (OpenAI and vLLM: "tool_calls" is for auto and
        # required), with content "" beside the call (vLLM's, for forced calls).
        assert c.finish_reason == "stop", c
        assert c.message.content == ""
        (call,) = c.message.tool_calls
        assert call.type == "function" and call.function.name == "get_weather"
        assert call.id.startswith("call_")
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    # Streamed with the same seed: the same call, its id and name first, then argument pieces.
    chunks = list(client.chat.completions.create(
        model=MODEL_NAME, messages=MESSAGES, max_tokens=60, temperature=1.0, seed=7, tools=TOOLS,
        tool_choice=choice, stream=True))
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].function.name == "get_weather" and deltas[0].id.startswith("call_")
    assert all(d.index == 0 and d.id is None for d in deltas[1:])
    assert "".join(d.function.arguments or "" for d in deltas) == \
        r.choices[0].message.tool_calls[0].function.arguments
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_required_tool_choice_gives_at_least_one_valid_call(server):
    client = server.client(timeout=300)
    for seed in (0, 3):  # greedy, then one seeded sample
        r = client.chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=160, temperature=1.0 if seed else 0.0,
            seed=seed or None, tools=TOOLS, tool_choice="required")
        c = r.choices[0]
        assert c.finish_reason == "tool_calls", c
        assert c.message.content == "" and len(c.message.tool_calls) >= 1
        for call in c.message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), TOOL_SCHEMAS[call.function.name])
        assert len({call.id for call in c.message.tool_calls}) == len(c.message.tool_calls)


def test_forced_tool_choice_with_response_format_is_refused(server):
    client = server.client()
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=8, tools=TOOLS, tool_choice="required",
            response_format={"type": "json_object"})
    assert "cannot be combined with tool_choice" in str(e.value)


def assemble(chunks):
    """A streamed choice's calls [name, arguments, deltas] and its finish reason."""
    calls, finish = [], None
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        assert not choice.delta.content
        for d in choice.delta.tool_calls or []:
            if d.id:
                assert d.index == len(calls) and d.function.name, d
                calls.append([d.function.name, "", 0])
            calls[d.index][1] += d.function.arguments or ""
            calls[d.index][2] += 1
        finish = choice.finish_reason or finish
    return calls, finish


def test_required_tool_choice_streams_and_keeps_calls_cut_short(server, chat_model):
    """tool_choice "required" behaves as a named one: its calls stream as the array forms, in
    json.dumps's spacing ({"a": 1}, as every parser writes them; the grammar's JSON is compact),
    and an output cut by max_tokens keeps its calls as tool_calls (the last one with the
    arguments so far), finishing "length", not as content."""
    from tokenizers import Tokenizer

    client = server.client(timeout=300)
    base = dict(model=MODEL_NAME, messages=MESSAGES, temperature=0.0, tools=TOOLS,
                tool_choice="required")
    whole = client.chat.completions.create(max_tokens=160, extra_body={"return_token_ids": True},
                                           **base).choices[0]
    assert whole.finish_reason == "tool_calls"
    calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls]
    for _, arguments in calls:
        assert arguments == json.dumps(json.loads(arguments), ensure_ascii=False)
    streamed, finish = assemble(client.chat.completions.create(max_tokens=160, stream=True,
                                                               **base))
    assert finish == "tool_calls"
    assert [(name, arguments) for name, arguments, _ in streamed] == calls
    assert streamed[0][2] > 1, "the first call's arguments came in pieces"
    named = client.chat.completions.create(
        max_tokens=160, **dict(base, tool_choice={"type": "function",
                                                  "function": {"name": "get_weather"}}))
    assert named.choices[0].finish_reason == "stop"
    arguments = named.choices[0].message.tool_calls[0].function.arguments
    assert arguments == json.dumps(json.loads(arguments), ensure_ascii=False)

    # Cut by max_tokens two tokens into the first call's parameters (greedy: the same tokens).
    tokenizer = Tokenizer.from_file(str(chat_model / "tokenizer.json"))
    ids = whole.model_extra["token_ids"]
    begun = next(k for k in range(len(ids))
                 if '"parameters":{' in tokenizer.decode(ids[:k], skip_special_tokens=False))
    cut = client.chat.completions.create(max_tokens=begun + 2, **base).choices[0]
    assert cut.finish_reason == "length"
    assert cut.message.content == ""
    (call,) = cut.message.tool_calls
    assert call.function.name == calls[0][0] and call.id.startswith("call_")
    assert calls[0][1].startswith(call.function.arguments) and call.function.arguments
    assert call.function.arguments != calls[0][1]
    streamed_cut, finish = assemble(client.chat.completions.create(
        max_tokens=begun + 2, stream=True, **base))
    assert finish == "length"
    assert [(n, a) for n, a, _ in streamed_cut] == [(call.function.name, call.function.arguments)]
