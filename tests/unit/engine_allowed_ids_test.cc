// allowed_token_ids at Engine::Submit: under a grammar the grammar's end (EOS) stays drawable
// though the list leaves it out, and min_tokens with a list of only the ids it holds off is
// refused up front.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "engine/engine.h"
#include "favoured_token_model.h"

namespace latent::engine {
namespace {

using ::testing::HasSubstr;

constexpr int32_t kAllowedEos = 1;
constexpr int32_t kAllowedFavoured = 20;  // the model's best token at every position

// A grammar of exactly `length` tokens of id 10, then its end: EOS, allowed only there.
class TenThenEnd : public TokenConstraint {
 public:
  explicit TenThenEnd(int length) : left_(length) {}
  void FillNextTokenBitmask(uint32_t* bitmask) override {
    for (int w = 0; w < 2; ++w) bitmask[w] = 0;
    const int32_t t = left_ > 0 ? 10 : kAllowedEos;
    bitmask[t >> 5] |= 1u << (t & 31);
  }
  bool Accept(int32_t token) override {
    if (token != (left_ > 0 ? 10 : kAllowedEos)) return false;
    if (left_-- == 0) done_ = true;
    return true;
  }
  bool IsTerminated() const override { return done_; }

 private:
  int left_;
  bool done_ = false;
};

class TenThenEndFactory : public TokenConstraintFactory {
 public:
  std::unique_ptr<TokenConstraint> Start() const override {
    return std::make_unique<TenThenEnd>(2);
  }
};

// `listed`: kAllowedEos is generation_config's EOS; otherwise only the tokenizer's (primary),
// which generation_config leaves out (Kimi K2's [EOS]).
std::unique_ptr<Engine> MakeAllowedIdsEngine(bool listed = true) {
  EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 64;
  options.max_batch_tokens = 64;
  options.max_seqs = 4;
  options.check_invariants = true;
  model::GenerationConfig generation;
  if (listed) {
    generation.eos_token_ids = {kAllowedEos};
  } else {
    generation.eos_token_ids = {40};
    generation.primary_eos_id = kAllowedEos;
  }
  // One-hot logits on kAllowedFavoured at every position.
  auto model = std::make_unique<testing::FavouredTokenModel>(
      64, [](int32_t, int64_t) { return kAllowedFavoured; });
  return std::make_unique<Engine>(std::move(model), generation, options);
}

struct AllowedOutcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

AllowedOutcome GenerateAllowed(Engine& engine, Request request) {
  AllowedOutcome o;
  engine.Submit(std::move(request), [&o](const RequestOutput& out) {
    if (out.has_token) o.tokens.push_back(out.token);
    if (out.finish != FinishReason::kNone) {
      o.finish = out.finish;
      o.error = out.error;
    }
  });
  for (int steps = 0; engine.Step(); ++steps) EXPECT_LT(steps, 100);
  return o;
}

Request AllowedPrompt() {
  Request r;
  r.prompt = {2, 3, 4};
  r.max_tokens = 8;
  return r;
}

// The list narrows what the grammar allows, but the grammar's end is not the list's to take
// away: without EOS in it, every such request would fail once its text was complete.
TEST(EngineAllowedIdsTest, GrammarEndsThoughTheListLeavesEosOut) {
  auto engine = MakeAllowedIdsEngine();
  Request r = AllowedPrompt();
  r.sampling.allowed_token_ids = std::vector<int32_t>{10, 10, 11};
  r.constraint = std::make_shared<TenThenEndFactory>();
  const AllowedOutcome o = GenerateAllowed(*engine, std::move(r));
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{10, 10, kAllowedEos}));
}

// Without a grammar the list is the whole of what may be drawn (vLLM's): EOS stays out.
TEST(EngineAllowedIdsTest, WithoutAGrammarTheListIsStrict) {
  auto engine = MakeAllowedIdsEngine();
  Request r = AllowedPrompt();
  r.max_tokens = 3;
  r.sampling.allowed_token_ids = std::vector<int32_t>{11, 10, 11};
  const AllowedOutcome o = GenerateAllowed(*engine, std::move(r));
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{10, 10, 10}));
}

// min_tokens holds off EOS and stop_token_ids; a list of nothing else could not honour it.
TEST(EngineAllowedIdsTest, MinTokensWithOnlyHeldOffIdsAllowedIsRefused) {
  auto engine = MakeAllowedIdsEngine();
  Request eos_only = AllowedPrompt();
  eos_only.min_tokens = 2;
  eos_only.sampling.allowed_token_ids = std::vector<int32_t>{kAllowedEos, kAllowedEos};
  try {
    engine->Submit(std::move(eos_only), nullptr);
    ADD_FAILURE() << "min_tokens with only EOS allowed was taken";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("allowed_token_ids holds only EOS and stop_token_ids"));
    EXPECT_THAT(e.what(), HasSubstr("min_tokens (2)"));
  }
  Request stop_and_eos = AllowedPrompt();
  stop_and_eos.min_tokens = 1;
  stop_and_eos.stop_token_ids = {30};
  stop_and_eos.sampling.allowed_token_ids = std::vector<int32_t>{30, kAllowedEos};
  EXPECT_THROW(engine->Submit(std::move(stop_and_eos), nullptr), Error);
  // Taken: another token is allowed, min_tokens is 0, or EOS is not held off (ignore_eos).
  Request other = AllowedPrompt();
  other.min_tokens = 2;
  other.max_tokens = 2;
  other.sampling.allowed_token_ids = std::vector<int32_t>{kAllowedEos, 12};
  EXPECT_EQ(GenerateAllowed(*engine, std::move(other)).tokens, (std::vector<int32_t>{12, 12}));
  Request no_min = AllowedPrompt();
  no_min.sampling.allowed_token_ids = std::vector<int32_t>{kAllowedEos};
  EXPECT_EQ(GenerateAllowed(*engine, std::move(no_min)).tokens,
            (std::vector<int32_t>{kAllowedEos}));
  Request ignored = AllowedPrompt();
  ignored.min_tokens = 1;
  ignored.max_tokens = 1;
  ignored.ignore_eos = true;
  ignored.sampling.allowed_token_ids = std::vector<int32_t>{kAllowedEos};
  EXPECT_EQ(GenerateAllowed(*engine, std::move(ignored)).tokens,
            (std::vector<int32_t>{kAllowedEos}));
}

// The tokenizer's EOS is the grammar's end and is held off by min_tokens though generation_config
// does not list it.
TEST(EngineAllowedIdsTest, TheTokenizersEosCountsThoughUnlisted) {
  auto engine = MakeAllowedIdsEngine(/*listed=*/false);
  Request r = AllowedPrompt();
  r.sampling.allowed_token_ids = std::vector<int32_t>{10};
  r.constraint = std::make_shared<TenThenEndFactory>();
  const AllowedOutcome o = GenerateAllowed(*engine, std::move(r));
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{10, 10, kAllowedEos}));
  Request eos_only = AllowedPrompt();
  eos_only.min_tokens = 1;
  eos_only.sampling.allowed_token_ids = std::vector<int32_t>{kAllowedEos};
  EXPECT_THROW(engine->Submit(std::move(eos_only), nullptr), Error);
}

}  // namespace
}  // namespace latent::engine
