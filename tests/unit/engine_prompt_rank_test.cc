// PromptTokenLogprob::rank: vLLM's Logprob.rank of a prompt token, the count of logits at least
// its own (batched_count_greater_than's >=), so tokens tied with it rank it behind them; computed
// only when Request::prompt_ranks asks (echo's logprobs need none).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/engine.h"
#include "favoured_token_model.h"

namespace latent::engine {
namespace {

// Every row favours token 10 (logit 5); tokens 0..3 tie with it, the other 59 have logit 0.
std::vector<PromptTokenLogprob> PromptLogprobs(bool ranks) {
  EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 16;
  options.max_batch_tokens = 32;
  options.max_seqs = 2;
  Engine engine(std::make_unique<testing::FavouredTokenModel>(
                    64, [](int32_t, int64_t) { return 10; }, 5.0f,
                    [](int64_t v, int32_t) { return v < 4 ? 5.0f : 0.0f; }),
                model::GenerationConfig{}, options);
  Request request;
  request.prompt = {10, 10, 2, 20};
  request.max_tokens = 0;
  request.prompt_logprobs = 1;
  request.prompt_ranks = ranks;
  std::vector<PromptTokenLogprob> got;
  engine.Submit(std::move(request), [&got](const RequestOutput& out) {
    got.insert(got.end(), out.prompt_logprobs.begin(), out.prompt_logprobs.end());
  });
  for (int steps = 0; engine.Step(); ++steps) EXPECT_LT(steps, 20);
  return got;
}

TEST(EnginePromptRank, TiesRankTheTokenBehindThem) {
  const std::vector<PromptTokenLogprob> got = PromptLogprobs(/*ranks=*/true);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].token, 10);
  EXPECT_EQ(got[0].rank, 5);  // 0, 1, 2, 3 and itself
  EXPECT_EQ(got[1].token, 2);
  EXPECT_EQ(got[1].rank, 5);
  EXPECT_EQ(got[2].token, 20);
  EXPECT_EQ(got[2].rank, 64);  // every logit is at least its 0
}

TEST(EnginePromptRank, LeftOutUnlessAskedFor) {
  const std::vector<PromptTokenLogprob> got = PromptLogprobs(/*ranks=*/false);
  ASSERT_EQ(got.size(), 3u);
  for (const PromptTokenLogprob& e : got) EXPECT_EQ(e.rank, 0) << e.token;
  EXPECT_EQ(got[2].top.size(), 1u);  // The logprobs themselves still come.
}

}  // namespace
}  // namespace latent::engine
