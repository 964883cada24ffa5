#include "tokenizer/chat_template/chat_template.h"

#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "base/error.h"
#include "base/input_file.h"
#include "base/json_depth.h"
#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/exact_json.h"
#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/lexer.h"
#include "tokenizer/chat_template/parser.h"
#include "tokenizer/chat_template/pystr.h"
#include "tokenizer/chat_template/value.h"

namespace latent::tokenizer {

struct ChatTemplate::Compiled {
  std::string name;
  std::string source;
  std::vector<jinja::NodePtr> body;
};

namespace {

namespace fs = std::filesystem;
using jinja::Value;

std::string ReadFile(const fs::path& path) {
  std::optional<std::string> text = ReadModelFile("tokenizer", path.string(), kMaxModelJsonBytes);
  if (!text) Fail("cannot read ", path.string(), ": no such file");
  return std::move(*text);
}

bool Exists(const fs::path& path) { return PathExists("tokenizer", path.string()); }

nlohmann::ordered_json ReadJson(const fs::path& path) {
  try {
    return nlohmann::ordered_json::parse(ReadFile(path));
  } catch (const nlohmann::json::exception& e) {
    Fail(path.string(), ": invalid JSON: ", e.what());
  }
}

// A special token's text: a string, or an AddedToken object {"content": ...}.
std::optional<std::string> TokenText(const nlohmann::ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return std::nullopt;
}

// The named special tokens transformers passes to templates (its special_tokens_map): the
// standard ones, and any other "*_token" key of the config.
void CollectSpecialTokens(const nlohmann::ordered_json& config,
                          std::map<std::string, std::string>& out) {
  if (!config.is_object()) return;
  static const char* const kStandard[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                          "pad_token", "cls_token", "mask_token"};
  for (const char* key : kStandard) {
    if (config.contains(key)) {
      if (auto text = TokenText(config[key])) {
        out[key] = *text;
      } else if (config[key].is_null()) {
        out.erase(key);
      }
    }
  }
  for (const auto& [key, value] : config.items()) {
    if (key.size() > 6 && key.compare(key.size() - 6, 6, "_token") == 0 && !out.count(key)) {
      if (value.is_string() || (value.is_object() && value.value("__type", "") == "AddedToken")) {
        if (auto text = TokenText(value)) out[key] = *text;
      }
    }
  }
  if (config.contains("extra_special_tokens") && config["extra_special_tokens"].is_object()) {
    for (const auto& [key, value] : config["extra_special_tokens"].items()) {
      if (auto text = TokenText(value)) out[key] = *text;
    }
  }
}

// Refuses JSON nested deeper than kMaxChatJsonDepth before anything copies it: nlohmann's copy
// recurses once per level, and PrepareMessage copies before FromJson checks the depth. A walk
// with its own stack, so the check itself cannot overflow.
void CheckDepth(const nlohmann::ordered_json& json, const char* what) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack = {{&json, 1}};
  while (!stack.empty()) {
    const auto [value, depth] = stack.back();
    stack.pop_back();
    if (!value->is_structured()) continue;
    if (depth > kMaxChatJsonDepth) {
      Fail("chat request: ", what, " nest more than ", kMaxChatJsonDepth, " levels deep");
    }
    for (const auto& item : *value) stack.emplace_back(&item, depth + 1);
  }
}

// continue_final_message: transformers appends this to the final message's text, renders, and
// cuts the prompt where it lands.
constexpr std::string_view kContinueTag = "CONTINUE_FINAL_MESSAGE_TAG ";

// Appends kContinueTag to the final message's content (the last text block of a list of blocks)
// and returns the text it followed, as transformers' render_jinja_template does.
std::string MarkFinalMessage(nlohmann::ordered_json& message, std::string_view source) {
  if (source.find("content") == std::string_view::npos) {
    Fail("chat request: continue_final_message is set to \"content\" but this is not an accepted "
         "field in the chat_template");
  }
  auto content = message.find("content");
  if (content == message.end()) {
    Fail("chat request: continue_final_message is set but the final message has no \"content\" "
         "to continue");
  }
  nlohmann::ordered_json* text = &*content;
  if (content->is_array()) {
    text = nullptr;
    for (auto block = content->rbegin(); block != content->rend() && !text; ++block) {
      if (block->is_object() && block->contains("text")) text = &(*block)["text"];
    }
    if (!text) {
      Fail("chat request: continue_final_message is set but we could not find any text to "
           "continue in the final message");
    }
  }
  if (!text->is_string()) {
    Fail("chat request: continue_final_message needs the final message's text to be a string (got ",
         text->type_name(), ")");
  }
  std::string final_text = text->get<std::string>();
  *text = final_text + std::string(kContinueTag);
  return final_text;
}

// The prompt cut where kContinueTag landed, or an error when the template dropped the final
// text or the tag.
std::string CutAtMark(const std::string& rendered, const std::string& final_text) {
  const std::string stripped = jinja::Strip(final_text, std::nullopt, true, true);
  const std::string_view tag = kContinueTag.substr(0, kContinueTag.size() - 1);  // .strip()
  if (rendered.find(stripped) == std::string::npos || rendered.find(tag) == std::string::npos) {
    Fail("chat request: continue_final_message is set but the final message does not appear in "
         "the chat after applying the chat template (the template may delete part of it); "
         "final message to continue: ", stripped);
  }
  const size_t at = rendered.rfind(tag);
  // The tag's space survives when the template keeps the text as it is; otherwise the template
  // trimmed trailing space, and the prompt is trimmed there too.
  if (rendered.compare(at, kContinueTag.size(), kContinueTag) == 0) return rendered.substr(0, at);
  return jinja::Strip(std::string_view(rendered).substr(0, at), std::nullopt, false, true);
}

// What an assistant turn's null content beside a non-empty tool_calls list becomes.
enum class ToolCallNullContent {
  kDrop,   // dropped with the other null keys (transformers)
  kNone,   // kept as none (ChatTemplate::set_tool_call_content_none)
  kEmpty,  // "" (kNone's continued final message: the prompt ends in its text)
};

// What transformers does to messages before rendering: drop keys whose value is null (but a
// tool-call turn's null content as `null_content` says), and copy the reasoning under both
// "thinking" (first) and "reasoning_content" (last).
nlohmann::ordered_json PrepareMessage(const nlohmann::ordered_json& message, size_t index,
                                      ToolCallNullContent null_content) {
  if (!message.is_object()) {
    Fail("chat request: message ", index, " is not an object (got ", message.type_name(), ")");
  }
  // Only an assistant turn that calls something: an empty list or another role's calls are no
  // call turn, and a template would lose the turn or fail on none there.
  const auto role = message.find("role");
  const auto tool_calls = message.find("tool_calls");
  const bool calls = role != message.end() && *role == "assistant" &&
                     tool_calls != message.end() && tool_calls->is_array() &&
                     !tool_calls->empty();
  nlohmann::ordered_json m = nlohmann::ordered_json::object();
  for (const auto& [key, value] : message.items()) {
    if (!value.is_null()) {
      m[key] = value;
    } else if (calls && key == "content" && null_content != ToolCallNullContent::kDrop) {
      m[key] = null_content == ToolCallNullContent::kNone ? value : nlohmann::ordered_json("");
    }
  }
  const nlohmann::ordered_json* reasoning = nullptr;
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    if (m.contains(key)) {
      reasoning = &m[key];
      break;
    }
  }
  if (reasoning) {
    nlohmann::ordered_json r = *reasoning;
    nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
    aliased["thinking"] = r;
    for (const auto& [key, value] : m.items()) aliased[key] = value;
    aliased["reasoning_content"] = r;
    m = std::move(aliased);
  }
  return m;
}

Value ListOfObjects(const nlohmann::ordered_json& v, const char* what) {
  if (v.is_null()) return Value::None();
  if (!v.is_array()) Fail("chat request: ", what, " must be a list (got ", v.type_name(), ")");
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_object()) Fail("chat request: ", what, " item ", i, " is not an object");
  }
  return jinja::FromJson(v);
}

}  // namespace

nlohmann::ordered_json ParseChatJson(std::string_view text, const std::string& what) {
  if (JsonNestsDeeperThan(text, kMaxChatJsonDepth)) {
    Fail(what, ": JSON nests more than ", kMaxChatJsonDepth, " levels deep");
  }
  try {
    return ParseJsonExactIntegers(text);
  } catch (const nlohmann::json::exception& e) {
    Fail(what, ": invalid JSON: ", e.what());
  } catch (const JsonIntegerRangeError& e) {
    Fail(what, ": ", e.what());
  }
}

std::shared_ptr<const ChatTemplate::Compiled> ChatTemplate::Compile(const std::string& name,
                                                                    const std::string& source) {
  size_t bad = 0;
  if (!jinja::ValidUtf8(source, &bad)) {
    Fail("chat template", name == "default" ? "" : " '" + name + "'",
         " is not valid UTF-8 (byte offset ", bad, ")");
  }
  auto compiled = std::make_shared<Compiled>();
  compiled->name = name;
  compiled->source = source;
  compiled->body = jinja::Parse(jinja::Tokenize(source));
  return compiled;
}

ChatTemplate ChatTemplate::FromString(const std::string& source,
                                      std::map<std::string, std::string> special_tokens) {
  ChatTemplate t;
  t.templates_["default"] = Compile("default", source);
  t.special_tokens_ = std::move(special_tokens);
  return t;
}

ChatTemplate ChatTemplate::FromTokenizerDir(const std::string& dir) {
  const fs::path root(dir);
  if (!IsDirectory("tokenizer directory", dir)) {
    Fail("tokenizer directory ", dir, " does not exist");
  }
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const fs::path config_path = root / "tokenizer_config.json";
  if (Exists(config_path)) config = ReadJson(config_path);

  std::map<std::string, std::string> sources;
  if (Exists(root / "chat_template.jinja")) {
    sources["default"] = ReadFile(root / "chat_template.jinja");
  }
  const fs::path more = root / "additional_chat_templates";
  if (IsDirectory("tokenizer", more.string())) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(more, error)) {
      if (entry.path().extension() == ".jinja") {
        sources[entry.path().stem().string()] = ReadFile(entry.path());
      }
    }
    if (error) Fail("tokenizer ", more.string(), ": cannot read: ", error.message());
  }
  if (sources.empty() && config.is_object() && config.contains("chat_template")) {
    const auto& ct = config["chat_template"];
    if (ct.is_string()) {
      sources["default"] = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const auto& item : ct) {
        if (!item.is_object() || !item.contains("name") || !item.contains("template") ||
            !item["name"].is_string() || !item["template"].is_string()) {
          Fail(config_path.string(),
               ": chat_template list items must be {\"name\": ..., \"template\": ...}");
        }
        sources[item["name"].get<std::string>()] = item["template"].get<std::string>();
      }
    } else if (!ct.is_null()) {
      Fail(config_path.string(), ": chat_template must be a string or a list of named templates");
    }
  }
  if (sources.empty()) {
    Fail("no chat template in ", dir,
         ": tokenizer_config.json has no chat_template and there is no chat_template.jinja");
  }

  ChatTemplate t;
  for (const auto& [name, source] : sources) t.templates_[name] = Compile(name, source);
  // special_tokens_map.json (legacy) overrides the config when the config has no
  // added_tokens_decoder, as transformers reads it.
  CollectSpecialTokens(config, t.special_tokens_);
  const fs::path map_path = root / "special_tokens_map.json";
  if (Exists(map_path) && !(config.is_object() && config.contains("added_tokens_decoder"))) {
    CollectSpecialTokens(ReadJson(map_path), t.special_tokens_);
  }
  return t;
}

std::vector<std::string> ChatTemplate::template_names() const {
  std::vector<std::string> names;
  for (const auto& [name, compiled] : templates_) names.push_back(name);
  return names;
}

std::string ChatTemplate::TemplateFor(bool with_tools) const {
  if (templates_.size() == 1) return templates_.begin()->first;
  if (with_tools && templates_.count("tool_use")) return "tool_use";
  return templates_.count("default") ? "default" : "";
}

namespace {

// A per-template tool-call setting: `name` in `names` or not.
void SetTemplateFlag(std::set<std::string>& names, const std::string& name, bool on) {
  if (on) {
    names.insert(name);
  } else {
    names.erase(name);
  }
}

}  // namespace

void ChatTemplate::set_tool_call_content_none(const std::string& name, bool on) {
  SetTemplateFlag(tool_call_content_none_, name, on);
}

bool ChatTemplate::tool_call_content_none(bool with_tools) const {
  return tool_call_content_none_.count(TemplateFor(with_tools)) > 0;
}

void ChatTemplate::set_tool_call_arguments_as_objects(const std::string& name, bool on) {
  SetTemplateFlag(tool_call_arguments_as_objects_, name, on);
}

bool ChatTemplate::tool_call_arguments_as_objects(bool with_tools) const {
  return tool_call_arguments_as_objects_.count(TemplateFor(with_tools)) > 0;
}

bool ChatTemplate::SourceMentions(std::string_view text) const {
  for (const auto& [name, compiled] : templates_) {
    if (compiled->source.find(text) != std::string::npos) return true;
  }
  return false;
}

std::string ChatTemplate::Render(const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& extra_kwargs) const {
  // Checked before the copies below (Render checks its request again, at no risk).
  CheckDepth(messages, "messages");
  CheckDepth(tools, "tools");
  CheckDepth(extra_kwargs, "template kwargs");
  ChatRequest request;
  request.messages = messages;
  request.tools = tools;
  request.add_generation_prompt = add_generation_prompt;
  request.kwargs = extra_kwargs;
  return Render(request);
}

std::string ChatTemplate::Render(const ChatRequest& request) const {
  CheckDepth(request.messages, "messages");
  CheckDepth(request.tools, "tools");
  CheckDepth(request.documents, "documents");
  CheckDepth(request.kwargs, "template kwargs");
  // An add_generation_prompt among the template kwargs wins, as vLLM updates apply_chat_template's
  // arguments with chat_template_kwargs; a bool, as the request's own switch must be.
  bool add_generation_prompt = request.add_generation_prompt;
  if (request.kwargs.is_object() && request.kwargs.contains("add_generation_prompt")) {
    const auto& v = request.kwargs["add_generation_prompt"];
    if (!v.is_boolean()) Fail("chat request: '", kKwargsAddGenerationPrompt, "' must be a boolean");
    add_generation_prompt = v.get<bool>();
  }
  if (request.continue_final_message && add_generation_prompt) {
    Fail("chat request: continue_final_message and add_generation_prompt are not compatible: "
         "continue_final_message continues the final message, add_generation_prompt starts a new "
         "assistant message");
  }
  const std::string name = TemplateFor(!request.tools.is_null());
  if (name.empty()) {
    std::string names;
    for (const auto& [n, c] : templates_) names += (names.empty() ? "" : ", ") + n;
    Fail("this tokenizer has several chat templates (", names, ") and none named 'default'");
  }
  const Compiled* compiled = templates_.at(name).get();
  const bool keep_none = tool_call_content_none_.count(name) > 0;

  std::vector<std::pair<std::string, Value>> vars;
  std::string final_text;  // continue_final_message: the text the prompt ends in
  try {
    if (!request.messages.is_array()) {
      Fail("chat request: messages must be a list (got ", request.messages.type_name(), ")");
    }
    if (request.messages.empty()) {
      Fail("chat request: cannot apply a chat template to an empty conversation");
    }
    std::vector<Value> messages;
    for (size_t i = 0; i < request.messages.size(); ++i) {
      const bool continued = request.continue_final_message && i + 1 == request.messages.size();
      const ToolCallNullContent null_content =
          !keep_none ? ToolCallNullContent::kDrop
                     : (continued ? ToolCallNullContent::kEmpty : ToolCallNullContent::kNone);
      nlohmann::ordered_json m = PrepareMessage(request.messages[i], i, null_content);
      if (continued) {
        final_text = MarkFinalMessage(m, compiled->source);
      }
      messages.push_back(jinja::FromJson(m));
    }
    vars.emplace_back("messages", Value::List(std::move(messages)));
    vars.emplace_back("tools", ListOfObjects(request.tools, "tools"));
    vars.emplace_back("documents", ListOfObjects(request.documents, "documents"));
    vars.emplace_back("add_generation_prompt", Value::Bool(add_generation_prompt));
    std::map<std::string, Value> kwargs;
    for (const auto& [name, text] : special_tokens_) kwargs[name] = Value::String(text);
    if (!request.kwargs.is_null()) {
      if (!request.kwargs.is_object())
        Fail("chat request: extra template kwargs must be an object");
      for (const auto& [key, value] : request.kwargs.items()) {
        if (key == "add_generation_prompt") continue;  // taken above
        if (key == "messages" || key == "tools" || key == "documents") {
          Fail("chat request: '", key, "' cannot be passed as an extra template kwarg");
        }
        kwargs[key] = jinja::FromJson(value);
      }
    }
    for (auto& [name, value] : kwargs) vars.emplace_back(name, std::move(value));
  } catch (const jinja::TemplateError& e) {
    Fail("chat request: ", e.what());
  }
  jinja::Interpreter interp(limits_);
  std::string rendered = interp.Render(compiled->body, std::move(vars));
  if (request.continue_final_message) return CutAtMark(rendered, final_text);
  return rendered;
}

}  // namespace latent::tokenizer
