#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "model/arch/registry.h"
#include "server/forced_tool_call_parser.h"
#include "server/reasoning_parser.h"

namespace latent::server {
namespace {

using OrderedJson = nlohmann::ordered_json;

struct Call {
  std::string id, name, arguments;
  bool closed = false;  // A delta said the call is complete.
  bool operator==(const Call& o) const {
    return name == o.name && arguments == o.arguments && closed == o.closed;
  }
};

// What a client assembles from the deltas: content, reasoning and the calls by index.
struct Assembled {
  std::string reasoning, content;
  std::vector<Call> calls;
  bool unfinished = false;  // A delta said a call was cut under way (ParsedDelta::unfinished_call).
  // The content as it grew: each step's total, to check it only ever grows by certain text.
  std::vector<std::string> content_steps;

  void Add(const ParsedDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
    unfinished = unfinished || d.unfinished_call;
    content_steps.push_back(content);
    for (const ToolCallDelta& c : d.tool_calls) {
      if (!c.id.empty()) {
        ASSERT_EQ(static_cast<size_t>(c.index), calls.size()) << "calls open in order";
        ASSERT_FALSE(c.name.empty());
        calls.push_back({c.id, c.name, c.arguments, c.closed});
      } else {
        ASSERT_LT(static_cast<size_t>(c.index), calls.size()) << "arguments of an unknown call";
        ASSERT_FALSE(calls[c.index].closed) << "more of a complete call";
        calls[c.index].arguments += c.arguments;
        calls[c.index].closed = c.closed;
      }
    }
  }
};

OrderedJson Tools() {
  return OrderedJson::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                     "code": {"type": "string"}}}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object",
      "properties": {"query": {"type": "string"}, "filters": {"type": "object"}}}}}
  ])");
}

Assembled Feed(const std::string& parser, const std::vector<std::string>& pieces) {
  std::unique_ptr<OutputParser> p = MakeToolCallParser(parser, Tools());
  Assembled a;
  for (const std::string& piece : pieces) a.Add(p->Push(piece));
  a.Add(p->Finish());
  return a;
}

Assembled Whole(const std::string& parser, const std::string& text) { return Feed(parser, {text}); }

Assembled Forced(const ToolChoice& choice, const std::vector<std::string>& pieces) {
  std::unique_ptr<OutputParser> p = MakeForcedToolCallParser(choice);
  Assembled a;
  for (const std::string& piece : pieces) a.Add(p->Push(piece));
  a.Add(p->Finish());
  return a;
}

// The text cut into two pieces at `cut`.
std::vector<std::string> CutAt(const std::string& text, size_t cut) {
  return {text.substr(0, cut), text.substr(cut)};
}

std::vector<std::string> Bytes(const std::string& text) {
  std::vector<std::string> out;
  for (char c : text) out.emplace_back(1, c);
  return out;
}

// `text` parses the same whole, cut anywhere in two, and byte by byte; the content never shows
// text it later takes back (so never half a marker).
void ExpectSplitInvariant(const std::string& parser, const std::string& text) {
  const Assembled whole = Whole(parser, text);
  auto check = [&](const Assembled& a, const std::string& how) {
    EXPECT_EQ(a.content, whole.content) << how;
    EXPECT_EQ(a.reasoning, whole.reasoning) << how;
    EXPECT_EQ(a.calls, whole.calls) << how;
    EXPECT_EQ(a.unfinished, whole.unfinished) << how;
    for (const std::string& step : a.content_steps) {
      EXPECT_EQ(whole.content.compare(0, step.size(), step), 0) << how << ": leaked " << step;
    }
  };
  for (size_t cut = 0; cut <= text.size(); ++cut) check(Feed(parser, CutAt(text, cut)), "cut");
  check(Feed(parser, Bytes(text)), "bytes");
}

const std::string kV31 =
    "Let me check.\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
    "{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>"
    "{\"query\": \"東京 <b>\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

TEST(ToolCallParserTest, DeepseekV31) {
  const Assembled a = Whole("deepseek_v31", kV31);
  EXPECT_EQ(a.content, "Let me check.");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(a.calls[1].name, "search");
  EXPECT_EQ(a.calls[1].arguments, "{\"query\": \"東京 <b>\"}");
  EXPECT_EQ(a.calls[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(a.calls[0].id.size(), 29u);
  EXPECT_NE(a.calls[0].id, a.calls[1].id);
  ExpectSplitInvariant("deepseek_v31", kV31);
}

const std::string kV3 =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    "{\"city\": \"Paris\", \"code\": \"``x``\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>"
    "function<｜tool▁sep｜>search\n```json\n{\"query\": \"a\"}\n```<｜tool▁call▁end｜>"
    "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>";

TEST(ToolCallParserTest, DeepseekV3FencedArguments) {
  const Assembled a = Whole("deepseek_v3", kV3);
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\", \"code\": \"``x``\"}");
  EXPECT_EQ(a.calls[1].arguments, "{\"query\": \"a\"}");
  // Text after the section is content (here a special token that was not skipped).
  EXPECT_EQ(a.content, "<｜end▁of▁sentence｜>");
  ExpectSplitInvariant("deepseek_v3", kV3);
  EXPECT_EQ(ResolveToolCallParser("deepseek_r1", "", nullptr), "deepseek_v3");
}

const std::string kKimi =
    "I'll look.<|tool_calls_section_begin|> <|tool_call_begin|> functions.get_weather:0 "
    "<|tool_call_argument_begin|> {\"city\": \"Paris\"} <|tool_call_end|><|tool_call_begin|>"
    "functions.search:1<|tool_call_argument_begin|>{\"query\": \"x\"}<|tool_call_end|>"
    "<|tool_calls_section_end|>";

TEST(ToolCallParserTest, KimiK2KeepsTheModelsIds) {
  const Assembled a = Whole("kimi_k2", kKimi);
  EXPECT_EQ(a.content, "I'll look.");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].id, "functions.get_weather:0");
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(a.calls[1].id, "functions.search:1");
  ExpectSplitInvariant("kimi_k2", kKimi);
  for (const Assembled& b : {Feed("kimi_k2", Bytes(kKimi)), Feed("kimi_k2", CutAt(kKimi, 40))}) {
    ASSERT_EQ(b.calls.size(), 2u);
    EXPECT_EQ(b.calls[0].id, "functions.get_weather:0");
  }
}

const std::string kGlm =
    "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
    "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>code</arg_key>\n"
    "<arg_value>42</arg_value>\n</tool_call>\n<tool_call>search\n<arg_key>query</arg_key>\n"
    "<arg_value>\"quoted\" \\ 東京</arg_value>\n<arg_key>filters</arg_key>\n"
    "<arg_value>{\"lang\": null, \"n\": [1, 2.5]}</arg_value>\n</tool_call>";

TEST(ToolCallParserTest, Glm45TypesValuesByTheToolSchema) {
  const Assembled a = Whole("glm45", kGlm);
  EXPECT_EQ(a.content, "");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  // days is an integer; code is declared a string, so "42" stays text.
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\", \"days\": 3, \"code\": \"42\"}");
  EXPECT_EQ(a.calls[1].arguments,
            "{\"query\": \"\\\"quoted\\\" \\\\ 東京\", "
            "\"filters\": {\"lang\": null, \"n\": [1, 2.5]}}");
  EXPECT_TRUE(OrderedJson::accept(a.calls[1].arguments));
  ExpectSplitInvariant("glm45", kGlm);
}

TEST(ToolCallParserTest, Glm47NameWithoutNewlineAndNoArguments) {
  const Assembled a =
      Whole("glm45", "ok<tool_call>get_weather<arg_key>city</arg_key><arg_value>Rome</arg_value>"
                     "</tool_call><tool_call>search</tool_call>");
  EXPECT_EQ(a.content, "ok");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Rome\"}");
  EXPECT_EQ(a.calls[1].arguments, "{}");
}

// A forced call's parser that got no text (the output ended inside its reasoning, which the
// reasoning parser took) makes no call, named or "required": the model made none.
TEST(ToolCallParserTest, ForcedCallWithoutTextIsNoCall) {
  for (const ToolChoice& choice : {ToolChoice{ToolChoice::Mode::kFunction, "search"},
                                   ToolChoice{ToolChoice::Mode::kRequired, ""}}) {
    std::unique_ptr<OutputParser> parser = MakeForcedToolCallParser(choice);
    EXPECT_TRUE(parser->Push("").tool_calls.empty());
    const ParsedDelta end = parser->Finish();
    EXPECT_TRUE(end.tool_calls.empty());
    EXPECT_EQ(end.content, "");
  }
}

// The grammar's compact JSON comes out in json.dumps's spacing, as the markup parsers' arguments
// do, streamed as it comes (every split gives the same calls), complete once the JSON closed.
TEST(ToolCallParserTest, ForcedCallsStreamInPythonSpacing) {
  const ToolChoice named{ToolChoice::Mode::kFunction, "get_weather"};
  const std::string args = R"({"city":"Pa, \"ris\": {x}","days":[1,{"a":null}]})";
  const std::string spaced = R"({"city": "Pa, \"ris\": {x}", "days": [1, {"a": null}]})";
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const std::string array = R"([{"name":"get_weather","parameters":)" + args +
                            R"(},{"name":"search","parameters":{}}])";
  for (size_t cut = 0; cut <= array.size(); ++cut) {
    const Assembled n = Forced(named, CutAt(args, std::min(cut, args.size())));
    ASSERT_EQ(n.calls.size(), 1u) << cut;
    EXPECT_EQ(n.calls[0].name, "get_weather");
    EXPECT_EQ(n.calls[0].arguments, spaced) << cut;
    EXPECT_TRUE(n.calls[0].closed) << cut;
    EXPECT_EQ(n.content, "");
    const Assembled r = Forced(required, CutAt(array, cut));
    ASSERT_EQ(r.calls.size(), 2u) << cut;
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(r.calls[0].arguments, spaced) << cut;
    EXPECT_EQ(r.calls[1].name, "search");
    EXPECT_EQ(r.calls[1].arguments, "{}");
    EXPECT_TRUE(r.calls[0].closed && r.calls[1].closed) << cut;
    EXPECT_EQ(r.content, "") << cut;
  }
  // "required" streams: the first call's id, name and the start of its parameters go out before
  // the array ends.
  std::unique_ptr<OutputParser> p = MakeForcedToolCallParser(required);
  const ParsedDelta first = p->Push(R"([{"name":"search","parameters":{"query":"to)");
  ASSERT_EQ(first.tool_calls.size(), 1u);
  EXPECT_EQ(first.tool_calls[0].name, "search");
  EXPECT_FALSE(first.tool_calls[0].id.empty());
  EXPECT_EQ(first.tool_calls[0].arguments, R"({"query": "to)");
  EXPECT_FALSE(first.tool_calls[0].closed);
}

// An output cut short (max_tokens, a stop string) keeps its calls as tool calls, the last one
// with the arguments so far and not complete, "required" as named; not content.
TEST(ToolCallParserTest, ForcedCallsCutShort) {
  const Assembled named = Forced({ToolChoice::Mode::kFunction, "search"}, {R"({"query":"a)"});
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_EQ(named.calls[0].arguments, R"({"query": "a)");
  EXPECT_FALSE(named.calls[0].closed);
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const Assembled r = Forced(
      required, {R"([{"name":"search","parameters":{"query":"a"}},{"name":"get_weather",)",
                 R"("parameters":{"city":"Os)"});
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_TRUE(r.calls[0].closed);
  EXPECT_EQ(r.calls[1].name, "get_weather");
  EXPECT_EQ(r.calls[1].arguments, R"({"city": "Os)");
  EXPECT_FALSE(r.calls[1].closed);
  EXPECT_EQ(r.content, "");
  // Cut before a call's parameters began: no call for it, and no content.
  const Assembled early = Forced(required, {R"([{"name":"sea)"});
  EXPECT_TRUE(early.calls.empty());
  EXPECT_EQ(early.content, "");
  EXPECT_TRUE(early.unfinished);
  // The parameters' end at the array's end, with the element's "}" cut: not complete.
  const Assembled open = Forced(required, {R"([{"name":"search","parameters":{})"});
  ASSERT_EQ(open.calls.size(), 1u);
  EXPECT_EQ(open.calls[0].arguments, "{}");
  EXPECT_FALSE(open.calls[0].closed);
}

// "required" cut after a complete call, in the next one before its name came out (here by the
// stop string `"get_weather",`) or right after the "," that begins it: the complete call stays,
// and the parser says a call was under way, so the choice does not finish "tool_calls" with the
// second call silently missing. Cut between the last call and the "]", nothing was under way.
TEST(ToolCallParserTest, RequiredCallCutBeforeItsNameIsUnfinished) {
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const std::string first = R"([{"name":"search","parameters":{"query":"a"}})";
  for (const std::string tail : {",\n {\"name\":", ",", ",{", R"(,{"parameters":{"k":1},)"}) {
    const Assembled a = Forced(required, Bytes(first + tail));
    ASSERT_EQ(a.calls.size(), 1u) << tail;
    EXPECT_EQ(a.calls[0].arguments, R"({"query": "a"})");
    EXPECT_TRUE(a.calls[0].closed) << tail;
    EXPECT_TRUE(a.unfinished) << tail;
    EXPECT_EQ(a.content, "") << tail;
  }
  for (const std::string& text : {first, first + "\n", first + "]"}) {
    const Assembled a = Forced(required, {text});
    ASSERT_EQ(a.calls.size(), 1u) << text;
    EXPECT_TRUE(a.calls[0].closed) << text;
    EXPECT_FALSE(a.unfinished) << text;
  }
  EXPECT_FALSE(Forced(required, {}).unfinished);
}

// A second "parameters" (or "name") in one element would make the arguments two objects in a
// row (`{"q": "x"}{"q": "y"}`, not JSON) or the call two names: the element is malformed, the
// call out so far not complete, and the text from the second key on is content.
TEST(ToolCallParserTest, RequiredCallWithARepeatedKeyIsMalformed) {
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  const Assembled params = Forced(
      required, Bytes(R"([{"name":"search","parameters":{"q":"x"},"parameters":{"q":"y"}}])"));
  ASSERT_EQ(params.calls.size(), 1u);
  EXPECT_EQ(params.calls[0].arguments, R"({"q": "x"})");
  EXPECT_FALSE(params.calls[0].closed);
  EXPECT_EQ(params.content, R"("parameters":{"q":"y"}}])");
  const Assembled name =
      Forced(required, {R"([{"name":"search","parameters":{},"name":"get_weather"}])"});
  ASSERT_EQ(name.calls.size(), 1u);
  EXPECT_EQ(name.calls[0].name, "search");
  EXPECT_FALSE(name.calls[0].closed);
  EXPECT_EQ(name.content, R"("name":"get_weather"}])");
  // Before the call went out: no call, all of the text is content.
  for (const std::string text : {R"([{"name":"a","name":"b","parameters":{}}])",
                                 R"([{"parameters":{},"parameters":{},"name":"a"}])"}) {
    const Assembled a = Forced(required, Bytes(text));
    EXPECT_TRUE(a.calls.empty()) << text;
    EXPECT_EQ(a.content, text);
  }
  // Other keys may repeat (the grammar allows none; they are skipped).
  const Assembled other = Forced(required, {R"([{"x":1,"name":"a","x":2,"parameters":{}}])"});
  ASSERT_EQ(other.calls.size(), 1u);
  EXPECT_TRUE(other.calls[0].closed);
}

// Text that is not the forced JSON (no grammar allows it) is content: all of it before any call
// went out, else from where it stops fitting; the open call stays, not complete.
TEST(ToolCallParserTest, ForcedOutputThatDoesNotFitIsContent) {
  const ToolChoice required{ToolChoice::Mode::kRequired, ""};
  for (const std::string text : {"I will not call.", "[]x", R"([{"name":1,"parameters":{}}])",
                                 R"([{"name":"a"} oops)"}) {
    const Assembled a = Forced(required, Bytes(text));
    EXPECT_TRUE(a.calls.empty()) << text;
    EXPECT_EQ(a.content, text) << text;
  }
  const Assembled a = Forced(required, {R"([{"name":"a","parameters":{"k":1} x}])"});
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, R"({"k": 1})");
  EXPECT_FALSE(a.calls[0].closed);
  EXPECT_EQ(a.content, "x}]");
  const Assembled named = Forced({ToolChoice::Mode::kFunction, "a"}, {R"({"k":1} x)"});
  ASSERT_EQ(named.calls.size(), 1u);
  EXPECT_FALSE(named.calls[0].closed);
}

// A value the model nests far deeper than a request may (kMaxJsonDepth) stays text: parsing it
// and writing it back would recurse once per level, past the stack.
TEST(ToolCallParserTest, DeeplyNestedValuesStayText) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const Assembled a =
      Whole("glm45", "<tool_call>search<arg_key>filters</arg_key><arg_value>" + deep +
                         "</arg_value></tool_call>");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"filters\": \"" + deep + "\"}");
  // tool_choice "required" reads its array with a depth counter, never parsing the parameters:
  // as deep as it comes, they are the call's arguments text.
  const Assembled r =
      Forced({ToolChoice::Mode::kRequired, ""},
             {"[{\"name\":\"search\",\"parameters\":{\"q\":" + deep + "}}]"});
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, "{\"q\": " + deep + "}");
  EXPECT_TRUE(r.calls[0].closed);
  EXPECT_EQ(r.content, "");
}

const std::string kDsml =
    "Checking.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"search\">\n"
    "<｜DSML｜parameter name=\"query\" string=\"true\">42</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"filters\" string=\"false\">{\"a\":[true,null]}</｜DSML｜parameter>\n"
    "</｜DSML｜invoke>\n</｜DSML｜function_calls>";

TEST(ToolCallParserTest, DeepseekV32Dsml) {
  const Assembled a = Whole("deepseek_v32", kDsml);
  EXPECT_EQ(a.content, "Checking.");
  ASSERT_EQ(a.calls.size(), 2u);
  EXPECT_EQ(a.calls[0].name, "get_weather");
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Paris\", \"days\": 3}");
  EXPECT_EQ(a.calls[1].arguments, "{\"query\": \"42\", \"filters\": {\"a\": [true, null]}}");
  ExpectSplitInvariant("deepseek_v32", kDsml);
}

TEST(ToolCallParserTest, ArgumentsStreamIncrementally) {
  // JSON arguments go out as they come, not only once the call ends.
  std::unique_ptr<OutputParser> p = MakeToolCallParser("deepseek_v31", Tools());
  p->Push("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>");
  const ParsedDelta d = p->Push("{\"city\": \"Pa");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, "{\"city\": \"Pa");
  // Key/value arguments: the id and name go out at once, the object when the call closes (a
  // later argument may repeat a key, whose last value wins).
  std::unique_ptr<OutputParser> g = MakeToolCallParser("glm45", Tools());
  const ParsedDelta first = g->Push("<tool_call>get_weather\n<arg_key>city</arg_key>");
  ASSERT_EQ(first.tool_calls.size(), 1u);
  EXPECT_EQ(first.tool_calls[0].name, "get_weather");
  EXPECT_EQ(first.tool_calls[0].arguments, "");
  EXPECT_TRUE(g->Push("<arg_value>Paris</arg_value>").tool_calls.empty());
  EXPECT_EQ(g->Push("</tool_call>").tool_calls.at(0).arguments, "{\"city\": \"Paris\"}");
}

// A repeated key gives valid JSON: its first place, its last value (vLLM builds a dict), in both
// key/value families, however the text is split.
TEST(ToolCallParserTest, RepeatedKeyKeepsTheLastValue) {
  const std::string glm =
      "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>a</arg_value>\n"
      "<arg_key>filters</arg_key><arg_value>{}</arg_value><arg_key>query</arg_key>\n"
      "<arg_value>b</arg_value>\n</tool_call>";
  const Assembled g = Whole("glm45", glm);
  ASSERT_EQ(g.calls.size(), 1u);
  EXPECT_EQ(g.calls[0].arguments, "{\"query\": \"b\", \"filters\": {}}");
  ExpectSplitInvariant("glm45", glm);
  const std::string dsml =
      "<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"search\">\n"
      "<｜DSML｜parameter name=\"q\" string=\"true\">a</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"q\" string=\"false\">2</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  const Assembled d = Whole("deepseek_v32", dsml);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "{\"q\": 2}");
  ExpectSplitInvariant("deepseek_v32", dsml);
}

// GLM's values that are not JSON are read as Python literals (vLLM's ast.literal_eval fallback);
// a declared string stays the text, and what is neither stays a string.
TEST(ToolCallParserTest, GlmReadsPythonLiterals) {
  const std::string glm =
      "<tool_call>get_weather\n<arg_key>days</arg_key><arg_value>True</arg_value>"
      "<arg_key>a</arg_key><arg_value> None </arg_value>"
      "<arg_key>b</arg_key><arg_value>{'k': [1, (2, 3)], 'f': False,}</arg_value>"
      "<arg_key>c</arg_key><arg_value>'it\\'s'</arg_value>"
      "<arg_key>d</arg_key><arg_value>+.5</arg_value>"
      "<arg_key>e</arg_key><arg_value>true_ish</arg_value>"
      "<arg_key>code</arg_key><arg_value>True</arg_value></tool_call>";
  const Assembled g = Whole("glm45", glm);
  ASSERT_EQ(g.calls.size(), 1u);
  EXPECT_EQ(g.calls[0].arguments,
            "{\"days\": true, \"a\": null, \"b\": {\"k\": [1, [2, 3]], \"f\": false}, "
            "\"c\": \"it's\", \"d\": 0.5, \"e\": \"true_ish\", \"code\": \"True\"}");
  EXPECT_TRUE(OrderedJson::accept(g.calls[0].arguments));
  // DSML's string="false" values are JSON only (vLLM's DSML parser has no such fallback).
  const Assembled d = Whole("deepseek_v32",
                            "<｜DSML｜function_calls><｜DSML｜invoke name=\"f\">"
                            "<｜DSML｜parameter name=\"x\" string=\"false\">True"
                            "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>");
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "{\"x\": \"True\"}");
}

// vLLM's glm4_moe strips a value that is not a declared string (Python's str.strip: Unicode
// whitespace too) before it reads it, and keeps it stripped when it is neither JSON nor a Python
// literal; keys are stripped the same way. A declared string is the text as written.
TEST(ToolCallParserTest, GlmStripsValuesItCannotRead) {
  const std::string glm =
      "<tool_call>get_weather\n<arg_key>e</arg_key><arg_value>\n  two words \t\n</arg_value>"
      "<arg_key>f</arg_key><arg_value>\u00a0\u30005\u2003</arg_value>"
      "<arg_key>\u2003g\u0085</arg_key><arg_value>\x0c\x1fmaybe\u0085\u2028</arg_value>"
      "<arg_key>city</arg_key><arg_value>\n Paris \u3000</arg_value></tool_call>";
  const Assembled g = Whole("glm45", glm);
  ASSERT_EQ(g.calls.size(), 1u);
  EXPECT_EQ(g.calls[0].arguments,
            "{\"e\": \"two words\", \"f\": 5, \"g\": \"maybe\", \"city\": \"\\n Paris \u3000\"}");
  ExpectSplitInvariant("glm45", glm);
}

TEST(ToolCallParserTest, WithoutMarkupEverythingIsContent) {
  for (const std::string name :
       {"deepseek_v3", "deepseek_v31", "deepseek_v32", "kimi_k2", "glm45"}) {
    const std::string text = "Plain answer with <tags>, <｜odd｜> and trailing space \n";
    EXPECT_EQ(Whole(name, text).content, text) << name;
    EXPECT_TRUE(Whole(name, text).calls.empty()) << name;
    // A partial marker at the very end is content too.
    EXPECT_EQ(Whole(name, "x <tool_c").content, "x <tool_c") << name;
    EXPECT_EQ(Whole(name, "x <｜tool▁calls").content, "x <｜tool▁calls") << name;
    EXPECT_EQ(Feed(name, Bytes(text)).content, text) << name;
  }
}

TEST(ToolCallParserTest, MalformedMarkupFallsBackToContent) {
  // Nothing parses after the section begins: all of it is content.
  const std::string bad_v31 = "a<｜tool▁calls▁begin｜>oops<｜tool▁call▁begin｜>x";
  EXPECT_EQ(Whole("deepseek_v31", bad_v31).content, bad_v31);
  EXPECT_TRUE(Whole("deepseek_v31", bad_v31).calls.empty());
  const std::string bad_name = "<tool_call>not a name\n<arg_key>k</arg_key></tool_call>tail";
  EXPECT_EQ(Whole("glm45", bad_name).content, bad_name);
  const std::string bad_kimi =
      "<|tool_calls_section_begin|><|tool_call_begin|>no_index<|tool_call_argument_begin|>{}";
  EXPECT_EQ(Whole("kimi_k2", bad_kimi).content, bad_kimi);
  const std::string bad_dsml = "<｜DSML｜function_calls><｜DSML｜invoke>x";
  EXPECT_EQ(Whole("deepseek_v32", bad_dsml).content, bad_dsml);
  // A call whose name was out stays; the rest, from where parsing stopped, is content.
  const Assembled a = Whole(
      "glm45", "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Oslo</arg_value>junk"
               "</tool_call>");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(a.content, "junk</tool_call>");
  EXPECT_FALSE(a.calls[0].closed) << "its end marker never came";
  // Later markup is not parsed any more.
  const Assembled b = Whole("deepseek_v31", bad_v31 + kV31);
  EXPECT_TRUE(b.calls.empty());
  EXPECT_EQ(b.content, bad_v31 + kV31);
  for (size_t cut = 0; cut <= bad_v31.size(); ++cut) {
    EXPECT_EQ(Feed("deepseek_v31", CutAt(bad_v31, cut)).content, bad_v31) << cut;
  }
  ExpectSplitInvariant("glm45", bad_name);
}

// Markup that does not parse is content byte for byte: the whitespace before it (dropped before
// markup that parses) and after it too, however the text is split.
TEST(ToolCallParserTest, MalformedMarkupKeepsItsWhitespace) {
  const std::map<std::string, std::string> outputs = {
      {"deepseek_v31", "Hi <｜tool▁calls▁begin｜>oops not a call"},
      {"deepseek_v3", "Hi \n\n<｜tool▁calls▁begin｜>oops \n"},
      {"kimi_k2", "Hi\t<|tool_calls_section_begin|>nope"},
      {"glm45", "Hi \n<tool_call>not a name\n<arg_key>k</arg_key></tool_call> \n"},
      {"deepseek_v32", "Hi \n<｜DSML｜function_calls><｜DSML｜invoke>x"},
  };
  for (const auto& [name, text] : outputs) {
    EXPECT_EQ(Whole(name, text).content, text) << name;
    ExpectSplitInvariant(name, text);
  }
  // After a call that parsed, the malformed rest keeps its own trailing whitespace.
  const Assembled a = Whole(
      "glm45", "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Oslo</arg_value>junk \n");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.content, "junk \n");
}

// A call is complete once its end marker came, in every family, however the text is split; a
// call whose arguments were cut (here as a stop string "}\n```" cuts V3's) is not: the choice
// must not finish "tool_calls" on it.
TEST(ToolCallParserTest, CallsCompleteAtTheirEndMarker) {
  const std::map<std::string, std::string> outputs = {
      {"deepseek_v31", kV31},
      {"deepseek_v32", kDsml},
      {"deepseek_v3",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
       "{\"city\": \"Paris\", \"n\": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {"kimi_k2",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0"
       "<|tool_call_argument_begin|>{\"query\": \"x\"}<|tool_call_end|>"},
      {"glm45", "<tool_call>search\n<arg_key>query</arg_key><arg_value>x</arg_value></tool_call>"},
  };
  for (const auto& [name, text] : outputs) {
    const Assembled a = Whole(name, text);
    ASSERT_FALSE(a.calls.empty()) << name;
    for (const Call& call : a.calls) EXPECT_TRUE(call.closed) << name << " " << call.name;
    ExpectSplitInvariant(name, text);
  }
  const std::string v3 = outputs.at("deepseek_v3");
  const Assembled cut = Whole("deepseek_v3", v3.substr(0, v3.find("}\n```")));
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, "{\"city\": \"Paris\", \"n\": 1");
  EXPECT_FALSE(cut.calls[0].closed);
}

TEST(ToolCallParserTest, OutputEndingInsideACall) {
  // Cut at max_tokens: the call stays with what came of its arguments.
  const Assembled a = Whole(
      "deepseek_v31", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"ci");
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_EQ(a.calls[0].arguments, "{\"ci");
  EXPECT_EQ(a.content, "");
  EXPECT_FALSE(a.calls[0].closed);
  // Key/value calls are ended; a half-read argument is the markup of a cut call: dropped.
  const Assembled g =
      Whole("glm45", "<tool_call>get_weather\n<arg_key>city</arg_key><arg_value>Os");
  ASSERT_EQ(g.calls.size(), 1u);
  EXPECT_EQ(g.calls[0].arguments, "{}");
  EXPECT_EQ(g.content, "");
  EXPECT_FALSE(g.calls[0].closed);
  EXPECT_TRUE(g.unfinished);
  // Before any name: no call, and the markup is not content either (as vLLM drops it).
  const Assembled k =
      Whole("kimi_k2", "Hm.<|tool_calls_section_begin|><|tool_call_begin|>functions.ge");
  EXPECT_TRUE(k.calls.empty());
  EXPECT_EQ(k.content, "Hm.");
  EXPECT_TRUE(k.unfinished);
}

// An output cut (a stop string, max_tokens) after a complete call, inside the next call's markup
// before its name came out: the complete call stays, the cut call's markup is dropped (not
// content), and the parser says a call was under way, so the choice does not finish "tool_calls"
// with the calls that were to follow silently missing. Whitespace after a complete call is no
// call under way.
TEST(ToolCallParserTest, CallCutBeforeItsNameIsUnfinished) {
  struct Case {
    std::string parser, text;
    size_t cut;           // Where the output ends: before the second call's name.
    std::string content;  // The content before the markup.
  };
  const Case cases[] = {
      {"deepseek_v3", kV3, kV3.find("search"), ""},
      {"deepseek_v31", kV31, kV31.find("search"), "Let me check."},
      {"deepseek_v32", kDsml, kDsml.find("search"), "Checking."},
      {"kimi_k2", kKimi, kKimi.find("functions.search"), "I'll look."},
      {"glm45", kGlm, kGlm.find("<tool_call>search") + 11, ""},
  };
  for (const auto& [name, text, cut, content] : cases) {
    const Assembled whole = Whole(name, text);
    EXPECT_FALSE(whole.unfinished) << name;
    const std::string head = text.substr(0, cut);
    const Assembled a = Whole(name, head);
    ASSERT_EQ(a.calls.size(), 1u) << name;
    EXPECT_EQ(a.calls[0], whole.calls[0]) << name;
    EXPECT_TRUE(a.calls[0].closed) << name;
    EXPECT_TRUE(a.unfinished) << name;
    EXPECT_EQ(a.content, content) << name << ": no markup in content";
    ExpectSplitInvariant(name, head);
  }
  const std::string end = "<｜tool▁call▁end｜>\n";
  const std::string after_first = kV3.substr(0, kV3.find(end) + end.size());
  const Assembled a = Whole("deepseek_v3", after_first);
  ASSERT_EQ(a.calls.size(), 1u);
  EXPECT_TRUE(a.calls[0].closed);
  EXPECT_FALSE(a.unfinished);
  EXPECT_EQ(a.content, "");
}

TEST(ToolCallParserTest, ChainsAfterTheReasoningParser) {
  const std::string text = "<think>I should call it</think>\n\n" + kV31;
  auto make = [] {
    return std::make_unique<ParserChain>(std::make_unique<ThinkParser>(ThinkStart::kMayOpen),
                                         MakeToolCallParser("deepseek_v31", Tools()));
  };
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    auto chain = make();
    Assembled a;
    for (const std::string& piece : CutAt(text, cut)) a.Add(chain->Push(piece));
    a.Add(chain->Finish());
    EXPECT_EQ(a.reasoning, "I should call it") << cut;
    // The whitespace after </think> is the answer's (as the reasoning parser alone gives it).
    EXPECT_EQ(a.content, "\n\nLet me check.") << cut;
    ASSERT_EQ(a.calls.size(), 2u) << cut;
    EXPECT_EQ(a.calls[1].arguments, "{\"query\": \"東京 <b>\"}");
  }
}

TEST(ToolCallParserTest, PythonJsonDumps) {
  EXPECT_EQ(PythonJsonDumps(OrderedJson::parse(R"({"b":1,"a":[1,2.5,"é\n",null,true,{}]})")),
            "{\"b\": 1, \"a\": [1, 2.5, \"é\\n\", null, true, {}]}");
}

// Each family's declared markup (Arch::tool_call_formats) is one a parser reads, and
// --tool-call-parser auto picks it when the template does not show the markup.
TEST(ToolCallParserTest, FamiliesDeclareKnownFormats) {
  int declared = 0;
  for (const model::Arch& arch : model::Archs()) {
    for (const auto& [model_type, format] : arch.tool_call_formats) {
      EXPECT_EQ(model::ToolCallFormatFor(model_type), format) << model_type;
      EXPECT_EQ(ResolveToolCallParser(format, "", nullptr), format) << model_type;
      EXPECT_EQ(ResolveToolCallParser("auto", format, nullptr), format) << model_type;
      ++declared;
    }
  }
  EXPECT_EQ(declared, 4);  // kimi_k2, deepseek_v32, glm4_moe_lite, glm_moe_dsa
  EXPECT_EQ(model::ToolCallFormatFor("glm4_moe_lite"), "glm45");
  EXPECT_EQ(model::ToolCallFormatFor("deepseek_v3"), "");  // its template tells V3 from V3.1
  EXPECT_EQ(model::ToolCallFormatFor("not_a_model"), "");
}

TEST(ToolCallParserTest, ResolvesNames) {
  // The tool-call markup the model's family declares for a model_type (its arch file).
  auto format_of = [](const std::string& type) { return model::ToolCallFormatFor(type); };
  auto mentions = [](std::string source) {
    return [source](std::string_view text) { return source.find(text) != std::string::npos; };
  };
  EXPECT_EQ(ResolveToolCallParser("none", format_of("kimi_k2"), nullptr), "");
  EXPECT_EQ(ResolveToolCallParser("glm47", "", nullptr), "glm45");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("deepseek_v3"),
                                  mentions("<｜tool▁sep｜>' + name + '\n```json")), "deepseek_v3");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("deepseek_v3"), mentions("<｜tool▁sep｜>")),
            "deepseek_v31");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("deepseek_v3"), mentions("<|im_middle|>")),
            "kimi_k2");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("deepseek_v3"), mentions("<arg_key>")),
            "glm45");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("kimi_k2"), mentions("")), "kimi_k2");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("deepseek_v32"), nullptr), "deepseek_v32");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("glm_moe_dsa"), nullptr), "glm45");
  EXPECT_EQ(ResolveToolCallParser("auto", format_of("deepseek_v3"), mentions("plain")), "");
  try {
    ResolveToolCallParser("hermes", "", nullptr);
    FAIL() << "an unknown parser is refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown parser 'hermes'"), std::string::npos);
  }
}

}  // namespace
}  // namespace latent::server
