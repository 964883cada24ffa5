// Fuzzes the server's request parser and validator (src/server/openai_schema.h) and the stop
// string matcher: any bytes must either parse into a request that satisfies the limits or be
// refused with a 4xx ApiError, and building the responses of whatever parsed must not throw.
//
// Input: the first byte picks the endpoint (completions, chat, tokenize, detokenize) and the
// stream split points; the rest is the request body.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/openai_schema.h"
#include "server/stop_strings.h"
#include "server/tool_call_parser.h"
#include "server/tool_request.h"

namespace {

using latent::server::ApiError;
using latent::server::Endpoint;

#define FUZZ_CHECK(cond)           \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

latent::server::ServingLimits Limits() {
  latent::server::ServingLimits limits;
  limits.model_name = "m";
  limits.context_tokens = 512;
  limits.cache_tokens = 256;
  limits.vocab_size = 1000;
  limits.max_n = 8;
  limits.max_choices = 64;
  return limits;
}

// Feeds `text` to a matcher in pieces of `step` bytes; the output must be the text up to the
// first occurrence of any stop string.
void CheckStopStrings(const std::vector<std::string>& stops, const std::string& text, size_t step) {
  latent::server::StopStringMatcher matcher(stops);
  std::string out;
  for (size_t i = 0; i < text.size(); i += step)
    out += matcher.Push(std::string_view(text).substr(i, step));
  out += matcher.Finish();
  size_t first = std::string::npos;
  for (const std::string& s : stops) first = std::min(first, text.find(s));
  FUZZ_CHECK(out == text.substr(0, first));
  FUZZ_CHECK(matcher.stopped() == (first != std::string::npos));
}

// What a client assembles from a parser's deltas.
struct Assembled {
  std::string content, reasoning;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  void Add(const latent::server::ParsedDelta& d) {
    content += d.content;
    reasoning += d.reasoning;
    for (const latent::server::ToolCallDelta& c : d.tool_calls) {
      if (!c.id.empty()) {
        FUZZ_CHECK(c.index == static_cast<int32_t>(calls.size()) && !c.name.empty());
        calls.emplace_back(c.name, c.arguments);
      } else {
        FUZZ_CHECK(c.index >= 0 && c.index < static_cast<int32_t>(calls.size()));
        calls[c.index].second += c.arguments;
      }
    }
  }
};

// Every tool-call parser on `text`: whole and in pieces of `step` bytes give the same content
// and calls, and the content never grows by text it later takes back.
void CheckToolCallParsers(const std::string& text, const latent::server::OrderedJson& tools,
                          size_t step) {
  for (const char* name : {"deepseek_v3", "deepseek_v31", "deepseek_v32", "kimi_k2", "glm45"}) {
    Assembled whole, pieces;
    auto p = latent::server::MakeToolCallParser(name, tools);
    whole.Add(p->Push(text));
    whole.Add(p->Finish());
    auto q = latent::server::MakeToolCallParser(name, tools);
    for (size_t i = 0; i < text.size(); i += step) {
      pieces.Add(q->Push(std::string_view(text).substr(i, step)));
      FUZZ_CHECK(whole.content.compare(0, pieces.content.size(), pieces.content) == 0);
    }
    pieces.Add(q->Finish());
    FUZZ_CHECK(whole.content == pieces.content && whole.calls == pieces.calls);
    FUZZ_CHECK(whole.reasoning.empty());
  }
}

void CheckGeneration(std::string_view body, Endpoint endpoint, uint8_t selector) {
  const latent::server::ServingLimits limits = Limits();
  latent::server::GenerationRequest r;
  try {
    r = latent::server::ParseGenerationRequest(body, endpoint, limits);
  } catch (const ApiError& e) {
    FUZZ_CHECK(e.status() >= 400 && e.status() < 500);
    latent::server::Dump(latent::server::ErrorJson(e));
    return;
  }
  FUZZ_CHECK(r.sampling.n >= 1 && r.sampling.n <= limits.max_n);
  FUZZ_CHECK(r.num_choices() <= limits.max_choices);
  FUZZ_CHECK(r.sampling.temperature >= 0 && r.sampling.top_p > 0 && r.sampling.top_p <= 1);
  FUZZ_CHECK(!r.max_tokens || *r.max_tokens >= 1);
  FUZZ_CHECK(static_cast<int32_t>(r.stop.size()) <= limits.max_stop);
  if (endpoint == Endpoint::kCompletions) {
    FUZZ_CHECK(!r.prompts.empty());
  } else {
    FUZZ_CHECK(r.messages.is_array() && !r.messages.empty());
  }

  // Each prompt as the server would submit it: ids as given, text as one token per byte.
  std::string text_seen;
  for (const latent::server::PromptSpec& p : r.prompts) {
    std::vector<int32_t> ids = p.ids;
    if (p.is_text) {
      for (unsigned char c : p.text) ids.push_back(c);
      text_seen += p.text;
    }
    try {
      const latent::engine::Request e = latent::server::MakeEngineRequest(r, ids, limits);
      FUZZ_CHECK(e.max_tokens >= 1);
      FUZZ_CHECK(static_cast<int64_t>(e.prompt.size()) + e.max_tokens <= limits.context_tokens);
      FUZZ_CHECK(static_cast<int64_t>(e.prompt.size()) + e.max_tokens <= limits.cache_tokens);
    } catch (const ApiError& e) {
      FUZZ_CHECK(e.status() == 400);
    }
  }
  if (!r.stop.empty()) CheckStopStrings(r.stop, text_seen, 1 + selector % 7);
  if (endpoint == Endpoint::kChatCompletions) {
    // The conversation as the template gets it, and its text as if the model had written it.
    latent::server::OrderedJson messages = r.messages;
    try {
      latent::server::ShapeToolCallTurns(messages, (selector & 4) != 0, (selector & 8) != 0);
    } catch (const ApiError& e) {
      FUZZ_CHECK(e.status() == 400);
    }
    for (const auto& m : r.messages) {
      if (m.contains("content") && m["content"].is_string()) text_seen += m["content"];
    }
    CheckToolCallParsers(text_seen, r.tools, 1 + selector % 5);
  }

  // The responses of such a request, with the prompt text as the output.
  latent::server::ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = "x";
  meta.model = r.model;
  meta.logprobs = r.logprobs;
  meta.return_token_ids = r.return_token_ids;
  meta.include_usage = r.include_usage;
  latent::server::ChoiceOutput choice;
  choice.text = text_seen;
  choice.token_ids = {1, 2};
  latent::server::LogprobEntry entry;
  entry.token = text_seen;
  entry.logprob = -0.5f;
  entry.null_logprob = (selector & 2) != 0;  // An echoed prompt's first token.
  entry.top = {{text_seen, -0.5f}, {"b", -1.0f}};
  choice.logprobs.push_back(entry);
  choice.finish_reason = "stop";
  choice.prompt_token_ids = {1, 2, 3};
  if (r.continuous_usage) choice.usage = latent::server::Usage{3, 2, 1};
  latent::server::Dump(latent::server::ResponseJson(meta, {choice}, {3, 2, 1}));
  latent::server::SseData(latent::server::ChunkJson(meta, choice, selector & 1));
  latent::server::SseData(latent::server::UsageChunkJson(meta, {3, 2, 1}));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  const latent::server::ServingLimits limits = Limits();
  switch (selector % 4) {
    case 0:
      CheckGeneration(body, Endpoint::kCompletions, selector >> 2);
      break;
    case 1:
      CheckGeneration(body, Endpoint::kChatCompletions, selector >> 2);
      break;
    case 2:
      try {
        latent::server::ParseTokenizeRequest(body, limits);
      } catch (const ApiError& e) {
        FUZZ_CHECK(e.status() >= 400 && e.status() < 500);
      }
      break;
    case 3:
      try {
        const auto r = latent::server::ParseDetokenizeRequest(body, limits);
        for (int32_t id : r.tokens) FUZZ_CHECK(id >= 0 && id < limits.vocab_size);
      } catch (const ApiError& e) {
        FUZZ_CHECK(e.status() >= 400 && e.status() < 500);
      }
      break;
  }
  return 0;
}
