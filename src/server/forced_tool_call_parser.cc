#include "server/forced_tool_call_parser.h"

#include <nlohmann/json.hpp>

#include "base/json_depth.h"
#include "server/openai_schema.h"
#include "server/tool_call_parser.h"

namespace latent::server {
namespace {

// tool_choice {"type": "function", "function": {"name": NAME}}: every piece of text is more of
// NAME's arguments.
class NamedCallParser : public OutputParser {
 public:
  explicit NamedCallParser(std::string name) : name_(std::move(name)) {}

  ParsedDelta Push(std::string_view text) override {
    ParsedDelta out;
    if (text.empty()) return out;
    ToolCallDelta call;
    if (!started_) {
      call.id = NewToolCallId();
      call.name = name_;
      started_ = true;
    }
    call.arguments = text;
    out.tool_calls.push_back(std::move(call));
    return out;
  }
  // No text, no call: the model made none (an output that ended inside its reasoning, so the
  // grammar never started), and a made-up one would finish "tool_calls" as if it had.
  ParsedDelta Finish() override { return {}; }

 private:
  const std::string name_;
  bool started_ = false;
};

// tool_choice "required": an array of {"name", "parameters"}, read once the output has ended.
class RequiredCallsParser : public OutputParser {
 public:
  ParsedDelta Push(std::string_view text) override {
    text_ += text;
    return {};
  }
  ParsedDelta Finish() override {
    ParsedDelta out;
    // Output nested deeper than a request may be is no call (copying it would recurse per level).
    const nlohmann::ordered_json calls = JsonNestsDeeperThan(text_, kMaxJsonDepth)
                                             ? nlohmann::ordered_json()
                                             : nlohmann::ordered_json::parse(text_, nullptr, false);
    bool valid = calls.is_array() && !calls.empty();
    for (size_t i = 0; valid && i < calls.size(); ++i) {
      valid = calls[i].is_object() && calls[i].contains("name") && calls[i]["name"].is_string() &&
              calls[i].contains("parameters");
    }
    if (!valid) {
      out.content = std::move(text_);
      return out;
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      out.tool_calls.push_back({static_cast<int32_t>(i), NewToolCallId(),
                                calls[i]["name"].get<std::string>(), calls[i]["parameters"].dump()});
    }
    return out;
  }

 private:
  std::string text_;
};

}  // namespace

std::unique_ptr<OutputParser> MakeForcedToolCallParser(const ToolChoice& choice) {
  if (choice.mode == ToolChoice::Mode::kFunction) return std::make_unique<NamedCallParser>(choice.function);
  return std::make_unique<RequiredCallsParser>();
}

}  // namespace latent::server
