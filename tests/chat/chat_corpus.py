"""Deterministic conversations for the chat template parity tests: OpenAI-format messages with
system prompts, multi-turn dialogue, tool calls (arguments as JSON strings and as objects), tool
outputs, tool lists, reasoning fields, content given as a list of parts, and template kwargs."""

from __future__ import annotations

import json

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web; returns up to `limit` results. Unicode: 検索 «quotes» \"dq\" \\ backslash",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
                "safe": {"type": "boolean", "default": True},
                "score": {"type": "number", "default": 0.5},
                "filters": {
                    "type": "object",
                    "properties": {"lang": {"type": ["string", "null"], "default": None}},
                },
                "tags": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["query"],
        },
    },
}

CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
    },
}


def call(name: str, args: dict, as_string: bool, call_id: str = "call_0", with_type: bool = True) -> dict:
    c = {"id": call_id, "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}
    if with_type:
        c = {"id": call_id, "type": "function", "function": c["function"]}
    return c


def tool_turn(as_string: bool, content=None, with_type: bool = True) -> list[dict]:
    return [
        {"role": "user", "content": "What's the weather in Paris and in 東京?"},
        {"role": "assistant", "content": content, "tool_calls": [
            call("get_weather", {"city": "Paris"}, as_string, "call_1", with_type),
            call("get_weather", {"city": "東京", "unit": "celsius"}, as_string, "call_2", with_type),
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 18, \"sky\": \"cloudy\"}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "{\"temp\": 24.5, \"sky\": \"clear\"}"},
    ]


def conversations() -> list[dict]:
    """Each item: {"id", "messages", optional "tools", "add_generation_prompt", "kwargs"}."""
    c: list[dict] = []

    def add(cid, messages, agp, tools=None, **kwargs):
        item = {"id": cid, "messages": messages, "add_generation_prompt": agp}
        if tools is not None:
            item["tools"] = tools
        if kwargs:
            item["kwargs"] = kwargs
        c.append(item)

    hello = [{"role": "user", "content": "Hello!"}]
    add("user_only_gen", hello, True)
    add("user_only_nogen", hello, False)
    sys_user = [{"role": "system", "content": "You are a concise assistant."},
                {"role": "user", "content": "Name three primes."}]
    add("system_user_gen", sys_user, True)
    add("system_user_nogen", sys_user, False)
    multi = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello! How can I help?"},
             {"role": "user", "content": "Tell me a joke."},
             {"role": "assistant", "content": "Why did the chicken cross the road? To get to the other side."},
             {"role": "user", "content": "Another one, please."}]
    add("multi_turn_gen", multi, True)
    add("multi_turn_nogen", multi, False)
    add("ends_with_assistant", multi[:5], False)
    add("ends_with_assistant_gen", multi[:5], True)
    add("two_system_prompts", [{"role": "system", "content": "Rule one."},
                               {"role": "system", "content": "Rule two."},
                               {"role": "user", "content": "Go."}], True)
    add("no_system_multi", multi[1:4], True)
    add("unicode_and_escapes", [
        {"role": "system", "content": "Réponds en français. 你好！ Emoji: 🚀🎉"},
        {"role": "user", "content": "Quote \"this\" and 'that', backslash \\ and tab\tand\nnewline {{ not jinja }} {% raw %}"},
        {"role": "assistant", "content": "D'accord — «citation» ✓"},
        {"role": "user", "content": "Merci\r\nbeaucoup   "}], True)
    add("empty_contents", [{"role": "system", "content": ""}, {"role": "user", "content": ""},
                           {"role": "assistant", "content": ""}, {"role": "user", "content": "?"}], True)
    add("whitespace_content", [{"role": "user", "content": "  \n padded \n  "},
                               {"role": "assistant", "content": "\n\nanswer\n\n"},
                               {"role": "user", "content": "\t"}], False)
    add("tool_calls_string_args", tool_turn(True) + [
        {"role": "assistant", "content": "Paris is cloudy (18°C); Tokyo is clear (24.5°C)."}], False, tools=[WEATHER_TOOL])
    add("tool_calls_string_args_gen", tool_turn(True), True, tools=[WEATHER_TOOL])
    add("tool_calls_empty_content", tool_turn(True, content=""), True, tools=[WEATHER_TOOL])
    add("tool_calls_with_text", tool_turn(True, content="Let me check both cities."), True, tools=[WEATHER_TOOL])
    add("tool_calls_dict_args", tool_turn(False), True, tools=[WEATHER_TOOL, CALC_TOOL])
    add("tool_calls_dict_args_text", tool_turn(False, content="Checking.") + [
        {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks"}], True,
        tools=[WEATHER_TOOL])
    add("tool_calls_no_type", tool_turn(True, with_type=False), True, tools=[WEATHER_TOOL])
    add("single_tool_call", [
        {"role": "system", "content": "You can use tools."},
        {"role": "user", "content": "What is 12*(3+4)?"},
        {"role": "assistant", "content": None, "tool_calls": [call("calculator", {"expr": "12*(3+4)"}, True)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "84"},
        {"role": "assistant", "content": "12*(3+4) = 84."},
        {"role": "user", "content": "And 2**10?"}], True, tools=[CALC_TOOL])
    add("tools_listed_no_calls", sys_user, True, tools=[WEATHER_TOOL, SEARCH_TOOL, CALC_TOOL])
    add("tools_listed_no_system", hello, True, tools=[SEARCH_TOOL])
    add("tools_empty_list", hello, True, tools=[])
    add("tool_output_then_gen", [
        {"role": "user", "content": "Search for jinja2 docs"},
        {"role": "assistant", "content": "", "tool_calls": [call("search", {"query": "jinja2 docs", "limit": 3, "safe": True, "score": 0.75, "filters": {"lang": None}, "tags": ["python", "テンプレート"]}, True)]},
        {"role": "tool", "tool_call_id": "call_0", "name": "search", "content": "1. https://jinja.palletsprojects.com"}], True,
        tools=[SEARCH_TOOL])
    add("tool_nested_dict_args", [
        {"role": "user", "content": "Search"},
        {"role": "assistant", "content": "", "tool_calls": [call("search", {"query": "x \"quoted\"", "limit": 3, "safe": False, "score": 1e-05, "filters": {"lang": None}, "tags": ["a", "b"]}, False)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "no results"}], True, tools=[SEARCH_TOOL])
    # Round trips as latent's server renders them: the calls it returned sent back (content ""
    # for null, Kimi K2's own functions.NAME:IDX ids), their results, and the next turn.
    kimi_calls = [call("get_weather", {"city": "Paris", "days": 3}, True, "functions.get_weather:0"),
                  call("search", {"query": "東京 weather"}, True, "functions.search:1")]
    add("tool_round_trip_model_ids", [
        {"role": "user", "content": "Weather in Paris, and search 東京 weather."},
        {"role": "assistant", "content": "", "tool_calls": kimi_calls},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "{\"temp\": 18}"},
        {"role": "tool", "tool_call_id": "functions.search:1", "content": "1. https://example.com"}],
        True, tools=[WEATHER_TOOL, SEARCH_TOOL])
    add("tool_calls_with_reasoning", [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Need the tool.",
         "tool_calls": [call("get_weather", {"city": "Oslo"}, False)]},
        {"role": "tool", "tool_call_id": "call_0", "content": "rain"}], True, tools=[WEATHER_TOOL])
    add("tool_cycle_twice", [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", {"city": "Oslo"}, False, "call_a")]},
        {"role": "tool", "tool_call_id": "call_a", "content": "rain"},
        {"role": "assistant", "content": "Rain in Oslo."},
        {"role": "user", "content": "And 2*21?"},
        {"role": "assistant", "content": "", "tool_calls": [call("calculator", {"expr": "2*21"}, False, "call_b")]},
        {"role": "tool", "tool_call_id": "call_b", "content": "42"}], True, tools=[WEATHER_TOOL, CALC_TOOL])
    add("reasoning_content_last", [
        {"role": "user", "content": "Is 97 prime?"},
        {"role": "assistant", "content": "Yes, 97 is prime.", "reasoning_content": "Check divisors up to 9: 2,3,5,7 do not divide 97."}], False)
    add("reasoning_content_history", [
        {"role": "user", "content": "Is 97 prime?"},
        {"role": "assistant", "content": "Yes.", "reasoning_content": "Divisors up to 9 fail."},
        {"role": "user", "content": "And 91?"}], True)
    add("think_tags_in_content", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nSimple addition.\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"}], True)
    add("think_tags_last_turn", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>adding</think>4"}], False)
    add("thinking_kwarg_true", sys_user, True, thinking=True, enable_thinking=True)
    add("thinking_kwarg_false", sys_user, True, thinking=False, enable_thinking=False)
    add("thinking_kwarg_history", multi, True, enable_thinking=False)
    add("content_parts", [
        {"role": "user", "content": [{"type": "text", "text": "Describe "}, {"type": "text", "text": "this."}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A picture."}]},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}, {"type": "text", "text": "And this?"}]}], True)
    add("prefix_assistant", [
        {"role": "user", "content": "Continue:"},
        {"role": "assistant", "content": "Once upon a time", "prefix": True}], False, thinking=True)
    add("extra_message_keys", [
        {"role": "user", "content": "Hi", "name": "alice", "metadata": {"k": [1, 2]}},
        {"role": "assistant", "content": "Hello alice", "refusal": None}], True)
    add("tool_response_like_user", [
        {"role": "user", "content": "Question"},
        {"role": "user", "content": "<tool_response>\nraw\n</tool_response>"}], True)
    long = [{"role": "system", "content": "Count with me."}]
    for i in range(12):
        long.append({"role": "user", "content": f"Number {i}?"})
        long.append({"role": "assistant", "content": f"{i} — {'even' if i % 2 == 0 else 'odd'}"})
    add("long_conversation", long, False)
    add("long_conversation_gen", long + [{"role": "user", "content": "Done?"}], True)
    add("system_only", [{"role": "system", "content": "Only a system prompt."}], True)
    add("custom_bos_kwarg", hello, True, bos_token="<BOS>", custom_flag=[1, 2.5, None])
    return c
