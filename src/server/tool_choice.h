// OpenAI's tool_choice, as parsed by ParseToolChoice (tool_request.h).
#pragma once

#include <string>

namespace latent::server {

// "auto" (the model decides), "none" (no tool calls: the output is all content), "required" (at
// least one call), or {"type": "function", "function": {"name": ...}}.
struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kFunction };
  Mode mode = Mode::kNone;
  std::string function;  // kFunction: the name, one of the tools'.
};

}  // namespace latent::server
