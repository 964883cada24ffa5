// Chat templates: the Jinja templates Hugging Face tokenizers ship to turn a conversation into a
// prompt. latent renders them with its own interpreter of the Jinja subset these templates use,
// byte for byte as transformers' apply_chat_template(..., tokenize=False) does: same sandboxed
// semantics (jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks), same
// globals (raise_exception, strftime_now, namespace, dict), same tojson, and the same input
// preparation (keys whose value is null dropped from messages, reasoning fields aliased).
//
// Rendering is sandboxed: templates cannot reach files or the environment, and output size, loop
// iterations, work and nesting are bounded. Every failure is a latent::Error; template errors say
// "chat template line L col C: ...".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latent::tokenizer {

namespace jinja {
struct Node;
}

struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{16} << 20;  // the prompt, and any string built on the way
  int64_t max_loop_iterations = 1'000'000;     // for-loop iterations per render
  int max_call_depth = 100;                    // nested macro calls
  uint64_t max_work = uint64_t{1} << 30;       // bytes and items produced per render
  size_t max_list_items = size_t{1} << 20;     // items of any list the template builds
};

// How deep caller JSON may nest (messages, tools, documents, template variables; the text of a
// request holding them): as deep as templates take values. nlohmann's copies and dumps recurse
// once per level, so deeper input is refused before anything copies it.
inline constexpr int kMaxChatJsonDepth = 256;

// JSON text from a caller, parsed: a latent::Error starting with `what` when it is not JSON or
// nests deeper than kMaxChatJsonDepth.
nlohmann::ordered_json ParseChatJson(std::string_view text, const std::string& what);

struct ChatRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null: no tools
  nlohmann::ordered_json documents;  // null: no documents
  bool add_generation_prompt = false;
  // End the prompt inside the final message's content, left open for the model to continue
  // (a prefilled reply), as transformers' apply_chat_template(continue_final_message=True):
  // not with add_generation_prompt, and an error when the rendered prompt does not hold the
  // content.
  bool continue_final_message = false;
  // More template variables (enable_thinking, ...): an object, or null.
  nlohmann::ordered_json kwargs;
};

// Where a request's template kwargs set add_generation_prompt, which wins over the request's own
// (as vLLM updates apply_chat_template's arguments with them): the place every front names when
// it is not a bool, "'chat_template_kwargs.add_generation_prompt' must be a boolean" (the server
// and request lines as they parse a request, Render for render-chat's).
inline constexpr const char* kKwargsAddGenerationPrompt =
    "chat_template_kwargs.add_generation_prompt";

class ChatTemplate {
 public:
  // The template of a Hugging Face tokenizer directory: chat_template.jinja (with
  // additional_chat_templates/*.jinja) if present, else tokenizer_config.json's "chat_template"
  // (a string, or a list of {name, template}); special tokens (bos_token, eos_token, ...) from
  // tokenizer_config.json.
  static ChatTemplate FromTokenizerDir(const std::string& dir);
  // One template from source text; `special_tokens` become template variables.
  static ChatTemplate FromString(const std::string& source,
                                 std::map<std::string, std::string> special_tokens = {});

  // The prompt for a conversation. With several named templates, "tool_use" is used when tools
  // are given and exists, else "default".
  std::string Render(const ChatRequest& request) const;
  std::string Render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt,
                     const nlohmann::ordered_json& extra_kwargs = nullptr) const;

  void set_limits(const ChatTemplateLimits& limits) { limits_ = limits; }
  // The name of the template Render uses for a request with (or without) tools; "" when none
  // fits (Render then fails).
  std::string TemplateFor(bool with_tools) const;
  // Whether the template `name` keeps an assistant turn's null "content" beside a non-empty
  // tool_calls list (as none) instead of losing the key as transformers drops every null key:
  // DeepSeek V3's template writes the calls only under `message['content'] is none` (raw jinja2
  // rendering of an OpenAI message). Off by default (transformers' rendering); the server and
  // request lines turn it on per template where it is needed (server::ProbeToolTemplate). A
  // continued final message (continue_final_message) gets "" instead: the prompt ends in its text.
  void set_tool_call_content_none(const std::string& name, bool on);
  // The setting of the template Render uses for a request with (or without) tools.
  bool tool_call_content_none(bool with_tools) const;
  // Whether the template `name` reads a tool call's arguments as an object (GLM-4.5 iterates over
  // its items) rather than as JSON text, as server::ProbeToolTemplate found it. Render does not
  // apply it: the caller shapes the messages first (server::ShapeForTemplate).
  void set_tool_call_arguments_as_objects(const std::string& name, bool on);
  // The setting of the template Render uses for a request with (or without) tools.
  bool tool_call_arguments_as_objects(bool with_tools) const;
  const std::map<std::string, std::string>& special_tokens() const { return special_tokens_; }
  std::vector<std::string> template_names() const;
  // Whether any of the templates' source text contains `text` (e.g. a reasoning marker, to pick
  // the output parser that fits the template).
  bool SourceMentions(std::string_view text) const;

 private:
  struct Compiled;
  static std::shared_ptr<const Compiled> Compile(const std::string& name,
                                                 const std::string& source);

  std::map<std::string, std::shared_ptr<const Compiled>> templates_;
  std::map<std::string, std::string> special_tokens_;
  ChatTemplateLimits limits_;
  // Template names, per tool-call setting above.
  std::set<std::string> tool_call_content_none_;
  std::set<std::string> tool_call_arguments_as_objects_;
};

}  // namespace latent::tokenizer
