// CompletionSession's stream, driven by a real engine over a fake model: the chunks do not depend
// on when the HTTP loop first reads the stream (here, only once every token has come).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "favoured_token_model.h"
#include "server/completion_session.h"
#include "server/metrics.h"
#include "server/server_context.h"

namespace latent::server {
namespace {

using OJson = nlohmann::ordered_json;

// The SSE events' JSON, without "[DONE]".
std::vector<OJson> Events(const std::string& sse) {
  std::vector<OJson> events;
  size_t at = 0;
  while ((at = sse.find("data: ", at)) != std::string::npos) {
    const size_t end = sse.find("\n\n", at);
    const std::string data = sse.substr(at + 6, end - at - 6);
    if (data != "[DONE]") events.push_back(OJson::parse(data));
    at = end;
  }
  return events;
}

// A chat stream of 3 tokens (always "b") with continuous_usage_stats, read only after the engine
// produced them all: the opening (role) chunk still counts no completion tokens, as vLLM's,
// and every chunk's usage is what went out so far, without prompt_tokens_details.
TEST(CompletionSessionStream, ContinuousUsageCountsOnlyTokensSent) {
  engine::EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 16;
  options.max_batch_tokens = 32;
  options.max_seqs = 2;
  engine::Engine engine(
      std::make_unique<engine::testing::FavouredTokenModel>(64, [](int32_t, int64_t) { return 1; }),
      model::GenerationConfig{}, options);
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})");
  const tokenizer::ChatTemplate chat_template =
      tokenizer::ChatTemplate::FromString("{% for m in messages %}{{ m.content }}{% endfor %}");
  ServerMetrics metrics;
  ServerContext context;
  context.engine = &engine;
  context.tokenizer = &tok;
  context.chat_template = &chat_template;
  context.metrics = &metrics;
  context.limits.model_name = "m";
  context.limits.context_tokens = 32;
  context.limits.cache_tokens = 64;
  context.limits.vocab_size = 64;

  const std::string body = R"({"model": "m", "messages": [{"role": "user", "content": "aba"}],
      "max_tokens": 3, "ignore_eos": true, "stream": true, "return_token_ids": true,
      "stream_options": {"include_usage": true, "continuous_usage_stats": true}})";
  auto session = std::make_shared<CompletionSession>(
      context, ParseGenerationRequest(body, Endpoint::kChatCompletions, context.limits),
      CompletionSession::Clock::now());
  session->Start();
  for (int steps = 0; engine.Step(); ++steps) ASSERT_LT(steps, 20);
  while (!session->done()) ASSERT_TRUE(session->Wait(std::chrono::milliseconds(0)));

  const std::vector<OJson> events = Events(session->TakeStream());
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  int64_t sent = 0;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const OJson& choice = events[i]["choices"][0];
    if (choice.contains("token_ids")) sent += static_cast<int64_t>(choice["token_ids"].size());
    EXPECT_EQ(events[i]["usage"],
              OJson({{"prompt_tokens", 3},
                     {"completion_tokens", sent},
                     {"total_tokens", 3 + sent}}))
        << events[i].dump();
  }
  EXPECT_EQ(sent, 3);
  // The final usage chunk keeps its prompt_tokens_details.
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 3);
  EXPECT_TRUE(events.back()["usage"].contains("prompt_tokens_details"));
}

}  // namespace
}  // namespace latent::server
