// A forward that throws, whatever it throws (latent::Error, InternalError from a failed check,
// std::bad_alloc, any other std::exception), fails the requests of its step with an error that
// names it (a failed check as an internal error), and nothing else: the engine goes on, no block
// is lost, and the wrong cache rows the broken forward wrote reach no later request (a prefix hit
// on them would change its tokens: fake_cache_model.h).
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/engine.h"
#include "fake_cache_model.h"

namespace latent::engine {
namespace {

constexpr int32_t kPoison = 63;  // a forward whose batch holds this token throws

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  int finishes = 0;
};

EngineOptions Options() {
  EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 64;
  options.max_batch_tokens = 256;  // every request below prefills in one step
  options.max_seqs = 8;
  options.check_invariants = true;  // block accounting checked after every step
  return options;
}

Request Prompt(std::vector<int32_t> prompt, int64_t max_tokens = 6) {
  Request request;
  request.prompt = std::move(prompt);
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  return request;
}

class Driver {
 public:
  explicit Driver(std::function<void()> fail) {
    auto model = std::make_unique<testing::FakeCacheModel>();
    model->fail_on_token = kPoison;
    model->fail = std::move(fail);
    engine_ = std::make_unique<Engine>(std::move(model), model::GenerationConfig{}, Options());
  }
  int64_t Submit(Request request) {
    return engine_->Submit(std::move(request), [this](const RequestOutput& out) {
      Outcome& o = outcomes_[out.request_id];
      if (out.has_token) o.tokens.push_back(out.token);
      if (out.finish != FinishReason::kNone) {
        o.finish = out.finish;
        o.error = out.error;
        ++o.finishes;
      }
    });
  }
  void RunToEnd() {
    for (int steps = 0; engine_->Step(); ++steps) ASSERT_LT(steps, 1000);
  }
  const Outcome& operator[](int64_t id) { return outcomes_[id]; }
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
  std::map<int64_t, Outcome> outcomes_;
};

// The tokens a request gets alone on an engine whose forward never fails.
std::vector<int32_t> Alone(Request request) {
  Driver fresh(nullptr);
  const int64_t id = fresh.Submit(std::move(request));
  fresh.RunToEnd();
  EXPECT_EQ(fresh[id].finish, FinishReason::kLength);
  return fresh[id].tokens;
}

struct Thrown {
  const char* name;
  std::function<void()> fail;
  const char* message;  // what the request's error must contain
};

class EngineStepFailure : public ::testing::TestWithParam<Thrown> {};

TEST_P(EngineStepFailure, FailsItsStepsRequestsAndNothingElse) {
  Driver d(GetParam().fail);
  // A finished request leaves its full blocks in the prefix cache.
  const std::vector<int32_t> shared = {5, 9, 2, 7, 1, 3, 8, 4};
  const int64_t before = d.Submit(Prompt(shared));
  d.RunToEnd();
  ASSERT_EQ(d[before].finish, FinishReason::kLength);
  EXPECT_EQ(d[before].tokens, Alone(Prompt(shared)));

  // One step: the poisoned request, and one that hits those cached blocks and adds its own.
  std::vector<int32_t> poisoned = {11, 12, 13, 14, 15, kPoison, 17, 18, 19};
  std::vector<int32_t> beside = shared;
  beside.insert(beside.end(), {21, 22, 23, 24, 25, 26});
  const int64_t bad = d.Submit(Prompt(poisoned));
  const int64_t caught = d.Submit(Prompt(beside));
  EXPECT_TRUE(d.engine().Step());
  for (const int64_t id : {bad, caught}) {
    SCOPED_TRACE(id);
    EXPECT_EQ(d[id].finish, FinishReason::kError);
    EXPECT_EQ(d[id].finishes, 1);
    EXPECT_TRUE(d[id].tokens.empty());
    EXPECT_NE(d[id].error.find(GetParam().message), std::string::npos) << d[id].error;
  }
  EngineMetrics m = d.engine().Metrics();
  EXPECT_EQ(m.running + m.waiting, 0);
  EXPECT_EQ(m.used_blocks, 0);

  // The engine goes on. The same prompts again (the poisoned one without its poison: its first
  // block is the failed one's) and one that extends the other failed one's: each gets what it
  // gets alone on a fresh engine, so no row the broken forward wrote was taken for a computed
  // one.
  poisoned[5] = 16;
  std::vector<int32_t> longer = beside;
  longer.insert(longer.end(), {27, 28, 29});
  const std::vector<std::vector<int32_t>> prompts = {beside, poisoned, longer, shared};
  std::vector<int64_t> ids;
  for (const auto& prompt : prompts) ids.push_back(d.Submit(Prompt(prompt)));
  d.RunToEnd();
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(d[ids[i]].finish, FinishReason::kLength) << d[ids[i]].error;
    EXPECT_EQ(d[ids[i]].tokens, Alone(Prompt(prompts[i])));
  }
  m = d.engine().Metrics();
  EXPECT_EQ(m.used_blocks, 0);
  EXPECT_GT(m.prefix_hit_tokens, 0);  // the blocks of `shared` were hit: the test reached them
}

// A failure in a decode step ends the request with the tokens it had sent; one submitted after
// runs as it runs alone.
TEST_P(EngineStepFailure, FailsADecodingRequestKeepingWhatItSent) {
  Driver d(GetParam().fail);
  // The fake model's next token is the sum of the cached ids mod 64: this prompt's first
  // generated token is kPoison, so its first decode step, which feeds that token in, fails.
  const std::vector<int32_t> prompt = {40, 23};
  const std::vector<int32_t> alone = Alone(Prompt(prompt));
  ASSERT_GE(alone.size(), 2u);
  ASSERT_EQ(alone[0], kPoison) << "the fake model's rule changed: pick another prompt";
  const int64_t id = d.Submit(Prompt(prompt));
  d.RunToEnd();
  EXPECT_EQ(d[id].finish, FinishReason::kError);
  EXPECT_EQ(d[id].tokens, std::vector<int32_t>{kPoison});  // sent before the failing step
  EXPECT_NE(d[id].error.find(GetParam().message), std::string::npos) << d[id].error;
  const int64_t after = d.Submit(Prompt({1, 2, 3}));
  d.RunToEnd();
  EXPECT_EQ(d[after].tokens, Alone(Prompt({1, 2, 3})));
  EXPECT_EQ(d.engine().Metrics().used_blocks, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Thrown, EngineStepFailure,
    ::testing::Values(Thrown{"latent_error", [] { Fail("a kernel's check failed"); },
                             "a kernel's check failed"},
                      // A failed check says it is internal: a bug in latent, not the request's.
                      Thrown{"latent_check", [] { LATENT_CHECK(1 + 1 == 3); },
                             "internal error: "},
                      Thrown{"bad_alloc", [] { throw std::bad_alloc(); }, "bad_alloc"},
                      Thrown{"runtime_error",
                             [] { throw std::runtime_error("a library's own error"); },
                             "a library's own error"},
                      Thrown{"not_an_exception", [] { throw 42; }, "unknown"}),
    [](const ::testing::TestParamInfo<Thrown>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace latent::engine
