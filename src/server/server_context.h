// What request handling needs from the loaded model: the engine, the tokenizer and chat template
// (either may be absent from a checkpoint), the limits requests are checked against, and the
// metrics. Built once the model is loaded; read-only afterwards (the engine is thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "server/metrics.h"
#include "server/openai_schema.h"
#include "structured/structured_output.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace latent::server {

struct ServerContext {
  engine::Engine* engine = nullptr;
  const tokenizer::Tokenizer* tokenizer = nullptr;         // Null: token-id prompts only.
  const tokenizer::ChatTemplate* chat_template = nullptr;  // Null: no chat completions.
  ServingLimits limits;
  ServerMetrics* metrics = nullptr;
  // The resolved --reasoning-parser for chat completions; empty: none.
  std::string reasoning_parser;
  // The id of the reasoning parser's end marker (ReasoningEndMarker), where a grammar starts on
  // a chat that may reason first; -1: no parser, or the tokenizer splits the marker.
  int32_t reasoning_end_token = -1;
  // The id of its start marker (ReasoningStartMarker), which, as a first token, makes a grammar
  // wait for the end where the model may open the reasoning; -1 as above.
  int32_t reasoning_start_token = -1;
  // The resolved --tool-call-parser; empty: none (tool markup stays content).
  std::string tool_call_parser;
  // The tokens of the tool-call parser's markers that the tokenizer marks special, sorted: a
  // request with tools decodes them even under skip_special_tokens.
  std::vector<int32_t> tool_marker_tokens;
  // The same for the reasoning parser's markers (<think>, </think>): a chat request decodes them
  // even under skip_special_tokens, since the parser splits the text at them.
  std::vector<int32_t> reasoning_marker_tokens;
  // response_format json_object / json_schema: grammars over this model's vocabulary. Null: the
  // server refuses them.
  structured::LazyStructuredOutput* structured = nullptr;
};

}  // namespace latent::server
