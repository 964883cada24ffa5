#include "server/tool_request.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/tool_template.h"
#include "tokenizer/chat_template/chat_template.h"

namespace latent::server {
namespace {

ServingLimits Limits() {
  ServingLimits l;
  l.model_name = "tiny";
  l.context_tokens = 512;
  l.cache_tokens = 256;
  l.vocab_size = 1000;
  return l;
}

const char* kTools =
    R"("tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}}}}},
      {"type": "function", "function": {"name": "search"}}])";

GenerationRequest Chat(const std::string& fields) {
  return ParseGenerationRequest(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]" + fields + "}",
      Endpoint::kChatCompletions, Limits());
}

// The param of the ApiError `fields` raise, and whether the message holds `words`.
std::string Refused(const std::string& fields, const std::string& words = "") {
  try {
    Chat(fields);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    return e.param();
  }
  return "(accepted)";
}

TEST(ToolRequestTest, ToolChoiceModes) {
  using Mode = ToolChoice::Mode;
  EXPECT_EQ(Chat("").tool_choice.mode, Mode::kNone);  // No tools: nothing to call.
  EXPECT_TRUE(Chat("").tools.is_null());
  EXPECT_TRUE(Chat(R"(, "tools": [])").tools.is_null());
  const GenerationRequest with_tools = Chat(std::string(", ") + kTools);
  EXPECT_EQ(with_tools.tool_choice.mode, Mode::kAuto);
  ASSERT_EQ(with_tools.tools.size(), 2u);
  // Key order kept for the template's tojson.
  EXPECT_EQ(with_tools.tools[0].begin().key(), "type");
  EXPECT_EQ(Chat(std::string(", ") + kTools + R"(, "tool_choice": "none")").tool_choice.mode,
            Mode::kNone);
  EXPECT_EQ(Chat(std::string(", ") + kTools + R"(, "tool_choice": "required")").tool_choice.mode,
            Mode::kRequired);
  const ToolChoice named =
      Chat(std::string(", ") + kTools +
           R"(, "tool_choice": {"type": "function", "function": {"name": "search"}})")
          .tool_choice;
  EXPECT_EQ(named.mode, Mode::kFunction);
  EXPECT_EQ(named.function, "search");
  EXPECT_EQ(Chat(R"(, "tool_choice": "auto")").tool_choice.mode, Mode::kAuto);
}

TEST(ToolRequestTest, RefusalsNameTheField) {
  const std::string tools = std::string(", ") + kTools;
  EXPECT_EQ(Refused(tools + R"(, "tool_choice": "always")"), "tool_choice");
  EXPECT_EQ(Refused(tools + R"(, "tool_choice": 3)"), "tool_choice");
  EXPECT_EQ(Refused(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "x"}})",
                    "not among 'tools'"),
            "tool_choice");
  EXPECT_EQ(Refused(tools + R"(, "tool_choice": {"function": {"name": "search"}})"),
            "tool_choice");
  EXPECT_EQ(Refused(R"(, "tool_choice": "required")", "requires 'tools'"), "tool_choice");
  EXPECT_EQ(Refused(R"(, "tools": {})"), "tools");
  EXPECT_EQ(Refused(R"(, "tools": [3])"), "tools[0]");
  EXPECT_EQ(Refused(R"(, "tools": [{"type": "function"}])"), "tools[0].function");
  EXPECT_EQ(Refused(R"(, "tools": [{"type": "function", "function": {"name": ""}}])"),
            "tools[0].function.name");
  EXPECT_EQ(Refused(R"(, "tools": [{"type": "function", "function": {"name": "a<b"}}])"),
            "tools[0].function.name");
  EXPECT_EQ(Refused(R"(, "tools": [{"function": {"name": "a"}}, {"function": {"name": "a"}}])",
                    "two tools"),
            "tools[1].function.name");
  EXPECT_EQ(Refused(R"(, "tools": [{"function": {"name": "a", "parameters": []}}])"),
            "tools[0].function.parameters");
  EXPECT_EQ(Refused(R"(, "tools": [{"function": {"name": "a", "description": 1}}])"),
            "tools[0].function.description");
  const std::string bad_call =
      R"(, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": )";
  EXPECT_EQ(Refused(bad_call + R"("x"}])"), "messages[1].tool_calls");
  EXPECT_EQ(Refused(bad_call + R"([{"function": {"arguments": "{}"}}]}])"),
            "messages[1].tool_calls[0].function.name");
  EXPECT_EQ(Refused(bad_call + R"([{"function": {"name": "f", "arguments": [1]}}]}])"),
            "messages[1].tool_calls[0].function.arguments");
  EXPECT_EQ(Refused(bad_call + R"([{"type": "code", "function": {"name": "f"}}]}])"),
            "messages[1].tool_calls[0].type");
  EXPECT_EQ(
      Refused(R"(, "messages": [{"role": "tool", "tool_call_id": [1], "content": "r"}])"),
      "messages[0].tool_call_id");
}

nlohmann::ordered_json Turns(const std::string& arguments) {
  return nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": null,
          "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f",
          "arguments": )" +
      arguments + R"(}}]}, {"role": "tool", "tool_call_id": "c", "content": "r"}])");
}

// An assistant turn with tool calls and no "content" key: adding the key grows the message's
// ordered map, which moved the tool_calls array under a reference taken before (found by
// openai_request_fuzzer under ASan; its input is a corpus seed).
TEST(ToolRequestTest, ShapesToolCallTurnsWithoutAContentKey) {
  for (int fields = 1; fields <= 8; ++fields) {  // map capacities around each growth point
    nlohmann::ordered_json message = {{"role", "assistant"}};
    for (int f = 1; f < fields; ++f) message["extra" + std::to_string(f)] = f;
    message["tool_calls"] = nlohmann::ordered_json::parse(
        R"([{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}])");
    nlohmann::ordered_json messages = nlohmann::ordered_json::array({message});
    ShapeToolCallTurns(messages, /*as_objects=*/true, false);
    EXPECT_EQ(messages[0]["content"], "");
    EXPECT_EQ(messages[0]["tool_calls"][0]["function"]["arguments"],
              nlohmann::ordered_json::parse(R"({"x": 1})"));
  }
}

TEST(ToolRequestTest, ShapesToolCallTurnsForTheTemplate) {
  auto messages = Turns(R"("{\"city\": \"Paris\", \"n\": [1, 2]}")");
  ShapeToolCallTurns(messages, /*as_objects=*/true, false);
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"],
            nlohmann::ordered_json::parse(R"({"city": "Paris", "n": [1, 2]})"));
  EXPECT_EQ(messages[1]["content"], "");  // null beside tool calls renders as ""
  EXPECT_EQ(messages[0]["content"], "q");
  // Objects become JSON text for templates that print the arguments.
  messages = Turns(R"({"city": "Paris", "n": [1, 2]})");
  ShapeToolCallTurns(messages, /*as_objects=*/false, false);
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"],
            "{\"city\": \"Paris\", \"n\": [1, 2]}");
  // Text stays text there.
  messages = Turns(R"("{\"a\":1}")");
  ShapeToolCallTurns(messages, false, false);
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
  // Empty text is {}; text that is no JSON object is refused, naming the field.
  messages = Turns(R"("")");
  ShapeToolCallTurns(messages, true, false);
  EXPECT_EQ(messages[1]["tool_calls"][0]["function"]["arguments"],
            nlohmann::ordered_json::object());
  for (const char* bad : {R"("[1]")", R"("{oops")", R"("3")"}) {
    messages = Turns(bad);
    try {
      ShapeToolCallTurns(messages, true, false);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param(), "messages[1].tool_calls[0].function.arguments");
    }
  }
}

// With a template that keeps none (DeepSeek V3), a null or absent content stays null, and the
// template sees none where transformers' rendering would have dropped the key.
TEST(ToolRequestTest, KeepsANullContentForTemplatesThatWantNone) {
  auto messages = Turns(R"("{\"a\": 1}")");
  messages[1].erase("content");
  ShapeToolCallTurns(messages, /*as_objects=*/false, /*content_none=*/true);
  EXPECT_TRUE(messages[1].contains("content") && messages[1]["content"].is_null());
  EXPECT_EQ(messages[0]["content"], "q");
  messages = Turns(R"("{\"a\": 1}")");
  ShapeToolCallTurns(messages, false, /*content_none=*/false);
  EXPECT_EQ(messages[1]["content"], "");

  auto chat = tokenizer::ChatTemplate::FromString(
      "{% for m in messages %}[{{ m.content is none }}|{{ m.content is defined }}]{% endfor %}");
  const auto none = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": null}, {"role": "assistant", "content": null,
          "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]}])");
  EXPECT_EQ(chat.Render(none, nullptr, false), "[False|False][False|False]");  // transformers
  chat.set_tool_call_content_none("default", true);
  // Only the tool-call turn keeps its null content.
  EXPECT_EQ(chat.Render(none, nullptr, false), "[False|False][True|True]");
}

// Only an assistant turn with a non-empty tool_calls list keeps none: an empty list (DeepSeek V3
// lost the turn) or a user turn's calls (its template concatenated none) get "" as before.
TEST(ToolRequestTest, KeepsNoneOnlyBesideAnAssistantTurnsCalls) {
  auto messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": null, "tool_calls": [{"function": {"name": "f"}}]},
          {"role": "assistant", "content": null, "tool_calls": []},
          {"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}])");
  const auto sent = messages;
  ShapeToolCallTurns(messages, /*as_objects=*/false, /*content_none=*/true);
  EXPECT_EQ(messages[0]["content"], "");
  EXPECT_EQ(messages[1]["content"], "");
  EXPECT_TRUE(messages[2]["content"].is_null());

  auto chat = tokenizer::ChatTemplate::FromString(
      "{% for m in messages %}[{{ m.content is none }}|{{ m.content is defined }}]{% endfor %}");
  chat.set_tool_call_content_none("default", true);
  auto unshaped = sent;
  unshaped[2]["content"] = nullptr;
  EXPECT_EQ(chat.Render(unshaped, nullptr, false), "[False|False][False|False][True|True]");
}

// continue_final_message on a final tool-call turn: the continued text is "" (a none has no
// text to continue), as before the null was kept.
TEST(ToolRequestTest, ContinuesAFinalToolCallTurnFromEmptyContent) {
  auto messages = Turns(R"("{\"a\": 1}")");
  messages.erase(2);  // ends in the assistant's call turn
  tokenizer::ChatTemplate chat = tokenizer::ChatTemplate::FromString(
      "{% for m in messages %}{% if m.role == 'assistant' and m.content is none %}<call>"
      "{% elif m.role == 'assistant' %}<a>{{ m.content }}<end>{% else %}<{{ m.role }}>"
      "{{ m.content }}{% endif %}{% endfor %}");
  tokenizer::ChatRequest request;
  request.continue_final_message = true;
  request.messages = messages;
  ShapeToolCallTurns(request.messages, false, /*content_none=*/false);
  const std::string as_empty = chat.Render(request);
  EXPECT_EQ(as_empty, "<user>q<a>");
  chat.set_tool_call_content_none("default", true);
  request.messages = messages;
  ShapeToolCallTurns(request.messages, false, /*content_none=*/true);
  EXPECT_EQ(chat.Render(request), as_empty);
  // Not continued, the none stays.
  request.continue_final_message = false;
  EXPECT_EQ(chat.Render(request), "<user>q<call>");
}

// DeepSeek V3's way: the calls only under `content is none`.
constexpr const char* kCallsUnderNone =
    "{% for m in messages %}{% if m.role == 'assistant' and m.content is none %}"
    "{% for t in m.tool_calls %}<call>{{ t.function.name + t.function.arguments }}{% endfor %}"
    "{% elif m.role == 'assistant' %}<a>{{ m.content }}{% else %}<{{ m.role }}>{{ m.content }}"
    "{% endif %}{% endfor %}";

TEST(ToolRequestTest, ProbesWhetherTheTemplateWantsANoneContent) {
  using tokenizer::ChatTemplate;
  ChatTemplate deepseek = ChatTemplate::FromString(kCallsUnderNone);
  EXPECT_TRUE(TemplateWantsToolCallContentNone(deepseek));
  ToolTemplateShape shape = ProbeToolTemplate(deepseek);
  EXPECT_EQ(shape.content_none_templates, std::vector<std::string>{"default"});
  EXPECT_TRUE(deepseek.tool_call_content_none(true) && deepseek.tool_call_content_none(false));
  EXPECT_TRUE(shape.arguments_object_templates.empty());  // objects fail its concatenation
  // Writes the calls either way (Qwen3, DeepSeek V3.1): "".
  EXPECT_FALSE(TemplateWantsToolCallContentNone(ChatTemplate::FromString(
      "{% for m in messages %}{{ m.content or '' }}{% for t in m.tool_calls or [] %}"
      "{{ t.function.arguments }}{% endfor %}{% endfor %}")));
  // Fails on none (`'x' in message.content`, Qwen3's reasoning check): "".
  ChatTemplate trims = ChatTemplate::FromString(
      "{% for m in messages %}{% if '</think>' in m.content %}r{% endif %}"
      "{% for t in m.tool_calls or [] %}"
      "{{ t.function.arguments }}{% endfor %}{% endfor %}");
  EXPECT_FALSE(TemplateWantsToolCallContentNone(trims));
  EXPECT_TRUE(ProbeToolTemplate(trims).content_none_templates.empty());
  // Ignores tool calls: "".
  EXPECT_FALSE(TemplateWantsToolCallContentNone(
      ChatTemplate::FromString("{% for m in messages %}{{ m.content }}{% endfor %}")));
}

// Fails on none (Qwen3's `'</think>' in message.content`), writes the calls beside any content.
constexpr const char* kFailsOnNone =
    "{% for m in messages %}{% if '</think>' in m.content %}r{% endif %}<{{ m.role }}>"
    "{{ m.content }}{% for t in m.tool_calls or [] %}<call>{{ t.function.arguments }}{% endfor %}"
    "{% endfor %}";

// The templates of a tokenizer directory `dir` (made afresh) with a "default" template
// (chat_template.jinja) and a "tool_use" one (additional_chat_templates/tool_use.jinja).
tokenizer::ChatTemplate TwoTemplates(const std::filesystem::path& dir, const char* default_text,
                                     const char* tool_use_text) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "additional_chat_templates");
  std::ofstream(dir / "chat_template.jinja") << default_text;
  std::ofstream(dir / "additional_chat_templates" / "tool_use.jinja") << tool_use_text;
  return tokenizer::ChatTemplate::FromTokenizerDir(dir.string());
}

// A tokenizer with a "default" and a "tool_use" template: each is probed as Render picks it
// ("tool_use" with tools, "default" without) and answers for itself. One answer for both lost
// the calls of requests without tools, or failed them on none ("argument of type 'NoneType' is
// not iterable").
TEST(ToolRequestTest, ProbesEachNamedTemplateAsRenderPicksIt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "latent_tool_request_test_templates";
  for (bool none_in_default : {false, true}) {
    tokenizer::ChatTemplate chat =
        none_in_default ? TwoTemplates(dir, kCallsUnderNone, kFailsOnNone)
                        : TwoTemplates(dir, kFailsOnNone, kCallsUnderNone);
    const ToolTemplateShape shape = ProbeToolTemplate(chat);
    EXPECT_EQ(shape.content_none_templates,
              std::vector<std::string>{none_in_default ? "default" : "tool_use"});
    EXPECT_EQ(chat.tool_call_content_none(/*with_tools=*/true), !none_in_default);
    EXPECT_EQ(chat.tool_call_content_none(/*with_tools=*/false), none_in_default);
    for (bool with_tools : {true, false}) {
      SCOPED_TRACE(testing::Message() << "none in default " << none_in_default << ", tools "
                                      << with_tools);
      auto messages = Turns(R"("{\"a\": 7}")");
      ShapeForTemplate(chat, with_tools, messages);
      const auto tools = with_tools ? nlohmann::ordered_json::parse(R"([{"type": "function",
          "function": {"name": "f"}}])")
                                    : nlohmann::ordered_json();
      std::string text;
      EXPECT_NO_THROW(text = chat.Render(messages, tools, false));
      EXPECT_NE(text.find("<call>"), std::string::npos) << text;
      EXPECT_NE(text.find(R"({"a": 7})"), std::string::npos) << text;
    }
  }
  fs::remove_all(dir);
}

TEST(ToolRequestTest, ProbesHowTheTemplateReadsArguments) {
  using tokenizer::ChatTemplate;
  // Concatenates the arguments (DeepSeek): objects fail, so JSON text.
  EXPECT_FALSE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{% for m in messages %}{% for t in m.tool_calls or [] %}"
      "{{ t.function.name + ':' + t.function.arguments }}{% endfor %}{% endfor %}")));
  // Prints them, objects through tojson (Kimi K2): JSON text.
  EXPECT_FALSE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{{ tools | tojson }}{% for m in messages %}{% for t in m.tool_calls or [] %}"
      "{% if t.function.arguments is string %}{{ t.function.arguments }}{% else %}"
      "{{ t.function.arguments | tojson }}{% endif %}{% endfor %}{% endfor %}")));
  // Prints them as they come: JSON text (an object would print as Python's repr).
  EXPECT_FALSE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{% for m in messages %}{% for t in m.tool_calls or [] %}[{{ t.function.arguments }}]"
      "{% endfor %}{% endfor %}")));
  // Prints the tools schema key by key and the arguments as they come: JSON text (the schema's
  // keys are not the call's).
  EXPECT_FALSE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{% for t in tools %}{% for k in t.function.parameters.properties %}<{{ k }}>{% endfor %}"
      "{% endfor %}{% for m in messages %}{% for t in m.tool_calls or [] %}"
      "[{{ t.function.arguments }}]{% endfor %}{% endfor %}")));
  // Iterates over them (GLM-4.5): objects.
  EXPECT_TRUE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{{ tools | tojson }}{% for m in messages %}{% for t in m.tool_calls or [] %}"
      "{% if t.function.arguments is mapping %}{% for k, v in t.function.arguments.items() %}"
      "<k>{{ k }}</k><v>{{ v }}</v>{% endfor %}{% else %}raw {{ t.function.arguments }}"
      "{% endif %}{% endfor %}{% endfor %}")));
  // Iterates over them and quotes each key (fails on text): objects, in single quotes as in
  // double ones.
  EXPECT_TRUE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{% for m in messages %}{% for t in m.tool_calls or [] %}"
      "{% for k, v in t.function.arguments.items() %}{'{{ k }}': '{{ v }}'}{% endfor %}"
      "{% endfor %}{% endfor %}")));
  EXPECT_TRUE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{{ tools | tojson }}{% for m in messages %}{% for t in m.tool_calls or [] %}"
      "{% for k, v in t.function.arguments.items() %}<parameter name=\"{{ k }}\">{{ v }}"
      "</parameter>{% endfor %}{% endfor %}{% endfor %}")));
  // Prints objects through tojson and fails on text: objects (the only way the call shows).
  EXPECT_TRUE(TemplateReadsArgumentsAsObject(ChatTemplate::FromString(
      "{% for m in messages %}{% for t in m.tool_calls or [] %}"
      "{{ t.function.arguments.items() | list | length }}{{ t.function.arguments | tojson }}"
      "{% endfor %}{% endfor %}")));
  // Ignores tool calls: JSON text.
  EXPECT_FALSE(TemplateReadsArgumentsAsObject(
      ChatTemplate::FromString("{% for m in messages %}{{ m.content }}{% endfor %}")));
}

// Iterates over the arguments' items (GLM-4.5), or prints them as they come.
constexpr const char* kIteratesArguments =
    "{% for m in messages %}{% for t in m.tool_calls or [] %}"
    "{% for k, v in t.function.arguments.items() %}<{{ k }}={{ v }}>{% endfor %}"
    "{% endfor %}{% endfor %}";
constexpr const char* kPrintsArguments =
    "{% for m in messages %}{% for t in m.tool_calls or [] %}[{{ t.function.arguments }}]"
    "{% endfor %}{% endfor %}";

// A "default" and a "tool_use" template that read arguments differently: each is probed as
// Render picks it and its requests get the arguments as it reads them. One answer (the tool_use
// template's) for both failed the other's requests without tools, or printed Python's repr of
// an object.
TEST(ToolRequestTest, ProbesEachNamedTemplatesArgumentsAsRenderPicksIt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "latent_tool_request_test_arguments";
  for (bool objects_in_default : {false, true}) {
    tokenizer::ChatTemplate chat =
        objects_in_default ? TwoTemplates(dir, kIteratesArguments, kPrintsArguments)
                           : TwoTemplates(dir, kPrintsArguments, kIteratesArguments);
    const ToolTemplateShape shape = ProbeToolTemplate(chat);
    EXPECT_EQ(shape.arguments_object_templates,
              std::vector<std::string>{objects_in_default ? "default" : "tool_use"});
    EXPECT_EQ(chat.tool_call_arguments_as_objects(/*with_tools=*/true), !objects_in_default);
    EXPECT_EQ(chat.tool_call_arguments_as_objects(/*with_tools=*/false), objects_in_default);
    for (bool with_tools : {true, false}) {
      SCOPED_TRACE(testing::Message() << "objects in default " << objects_in_default
                                      << ", tools " << with_tools);
      const auto tools = with_tools ? nlohmann::ordered_json::parse(R"([{"type": "function",
          "function": {"name": "f"}}])")
                                    : nlohmann::ordered_json();
      // JSON text as clients send it, and an object: the same prompt.
      for (const char* arguments : {R"("{\"a\": 7}")", R"({"a": 7})"}) {
        auto messages = Turns(arguments);
        ShapeForTemplate(chat, with_tools, messages);
        std::string text;
        EXPECT_NO_THROW(text = chat.Render(messages, tools, false));
        EXPECT_EQ(text, objects_in_default != with_tools ? "<a=7>" : R"([{"a": 7}])");
      }
    }
  }
  fs::remove_all(dir);
}

// The start-up log names the templates an answer holds for only when the probed ones differ:
// ", JSON text in the others" beside every template reading objects named no template at all.
TEST(ToolRequestTest, DescribesTheProbesAnswersPerTemplateOnlyWhereTheyDiffer) {
  ToolTemplateShape shape;
  EXPECT_EQ(ToolTemplateShapeText(shape), "JSON text and a null content beside them as \"\"");
  shape.templates = {"tool_use", "default"};
  shape.arguments_object_templates = {"tool_use", "default"};
  EXPECT_EQ(ToolTemplateShapeText(shape), "objects and a null content beside them as \"\"");
  shape.arguments_object_templates = {"tool_use"};
  shape.content_none_templates = {"tool_use", "default"};
  EXPECT_EQ(ToolTemplateShapeText(shape),
            "objects in template 'tool_use', JSON text in the others and a null content beside "
            "them as none");
  shape.templates = {"default"};
  shape.arguments_object_templates = {"default"};
  shape.content_none_templates = {};
  EXPECT_EQ(ToolTemplateShapeText(shape), "objects and a null content beside them as \"\"");

  // Two templates that both read objects, as the probe finds them.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "latent_tool_request_test_shape_text";
  tokenizer::ChatTemplate chat = TwoTemplates(dir, kIteratesArguments, kIteratesArguments);
  const ToolTemplateShape probed = ProbeToolTemplate(chat);
  EXPECT_EQ(probed.templates, (std::vector<std::string>{"tool_use", "default"}));
  EXPECT_EQ(ToolTemplateShapeText(probed), "objects and a null content beside them as \"\"");
  fs::remove_all(dir);
}

TEST(ToolRequestTest, ResponseAndChunksCarryToolCalls) {
  ResponseMeta meta;
  meta.endpoint = Endpoint::kChatCompletions;
  meta.id = "chatcmpl-x";
  meta.model = "tiny";
  ChoiceOutput c;
  c.finish_reason = "tool_calls";
  c.tool_calls = {{0, "call_a", "get_weather", "{\"city\": \"Paris\"}"}};
  const OrderedJson r = ResponseJson(meta, {c}, Usage{});
  const OrderedJson& message = r["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  EXPECT_EQ(message["tool_calls"][0]["id"], "call_a");
  EXPECT_EQ(message["tool_calls"][0]["type"], "function");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_FALSE(message["tool_calls"][0].contains("index"));
  // A stream: the call's first chunk has id, type and name; later ones only arguments.
  ChoiceOutput first;
  first.tool_calls = {{1, "call_b", "search", "{\"q\": "}};
  const OrderedJson d1 = ChunkJson(meta, first)["choices"][0]["delta"];
  EXPECT_EQ(d1["tool_calls"][0]["index"], 1);
  EXPECT_EQ(d1["tool_calls"][0]["id"], "call_b");
  EXPECT_EQ(d1["tool_calls"][0]["function"]["name"], "search");
  EXPECT_FALSE(d1.contains("content"));
  ChoiceOutput more;
  more.text = "x";
  more.tool_calls = {{1, "", "", "\"a\"}"}};
  const OrderedJson d2 = ChunkJson(meta, more)["choices"][0]["delta"];
  EXPECT_EQ(d2.dump(),
            R"({"content":"x","tool_calls":[{"index":1,"function":{"arguments":"\"a\"}"}}]})");
  // Without tool calls a message keeps its content string.
  ChoiceOutput plain;
  EXPECT_EQ(ResponseJson(meta, {plain}, Usage{})["choices"][0]["message"].dump(),
            R"({"role":"assistant","content":""})");
}

}  // namespace
}  // namespace latent::server
