// Engine::Metrics() counts a request's end, and the step that produced it, before the request's
// callback hears of the end: a caller that has its outputs (LLM.generate returning, a client
// reading /metrics after its response) finds them counted, not one step later.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/engine.h"
#include "fake_cache_model.h"

namespace latent::engine {
namespace {

using testing::FakeCacheModel;

EngineOptions SmallOptions() {
  EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 32;
  options.max_batch_tokens = 64;
  options.max_seqs = 8;
  options.check_invariants = true;
  return options;
}

Request MakeRequest(int64_t max_tokens, int32_t n) {
  Request request;
  request.prompt = {1, 2, 3, 4, 5};
  request.max_tokens = max_tokens;
  request.ignore_eos = true;
  request.sampling.n = n;
  if (n > 1) {
    request.sampling.temperature = 1.0f;
    request.sampling.seed = 7;
  }
  return request;
}

// What Metrics() said when a request's last sample reported its end.
struct AtEnd {
  int64_t requests_finished = 0, steps = 0, generated_tokens = 0;
  int64_t ended_before = 0;  // requests whose ends were reported before this one
  int64_t tokens_heard = 0;  // tokens the callbacks had reported, this one's last among them
};

TEST(EngineMetrics, CountsARequestsEndBeforeItsCallbackHearsOfIt) {
  Engine engine(std::make_unique<FakeCacheModel>(), model::GenerationConfig{}, SmallOptions());
  std::map<int64_t, int32_t> samples_left;  // request id -> samples not yet ended
  std::map<int64_t, AtEnd> at_end;
  int64_t ended = 0, tokens = 0;
  auto callback = [&](const RequestOutput& out) {
    if (out.has_token) ++tokens;
    if (out.finish == FinishReason::kNone || --samples_left[out.request_id] > 0) return;
    const EngineMetrics m = engine.Metrics();
    at_end[out.request_id] = {m.requests_finished, m.steps, m.generated_tokens, ended++, tokens};
  };
  // Different lengths end in different steps; n = 3 ends when its last sample does.
  const std::vector<std::pair<int64_t, int32_t>> shapes = {{1, 1}, {3, 1}, {2, 3}, {6, 1}};
  for (const auto& [max_tokens, n] : shapes) {
    const int64_t id = engine.Submit(MakeRequest(max_tokens, n), callback);
    samples_left[id] = n;
  }
  const int64_t cancelled = engine.Submit(MakeRequest(50, 1), callback);
  samples_left[cancelled] = 1;
  for (int i = 0; i < 3; ++i) engine.Step();
  engine.Cancel(cancelled);  // ends in the next step's DrainQueues, before any forward
  while (engine.Step()) {
  }
  const EngineMetrics last = engine.Metrics();
  ASSERT_EQ(at_end.size(), shapes.size() + 1);
  EXPECT_EQ(last.requests_finished, static_cast<int64_t>(shapes.size()) + 1);
  int64_t latest_step = 0;
  for (const auto& [id, m] : at_end) {
    EXPECT_EQ(m.requests_finished, m.ended_before + 1) << "request " << id;
    EXPECT_EQ(m.generated_tokens, m.tokens_heard) << "request " << id;
    EXPECT_GT(m.steps, 0) << "request " << id;
    latest_step = std::max(latest_step, m.steps);
  }
  // The step that ended the last request counts in what its callback read.
  EXPECT_EQ(latest_step, last.steps);
}

// The same seen from another thread while the loop runs (Start()), as LLM.generate sees it:
// once the caller holds every request's end, Metrics() has counted them all.
TEST(EngineMetrics, ACallerHoldingEveryEndFindsThemAllCounted) {
  Engine engine(std::make_unique<FakeCacheModel>(), model::GenerationConfig{}, SmallOptions());
  engine.Start();
  std::mutex mutex;
  std::condition_variable done;
  int32_t ended = 0;
  constexpr int32_t kRequests = 3;
  for (int32_t i = 0; i < kRequests; ++i) {
    engine.Submit(MakeRequest(2 + i, 1), [&](const RequestOutput& out) {
      if (out.finish == FinishReason::kNone) return;
      std::lock_guard<std::mutex> lock(mutex);
      ++ended;
      done.notify_all();
    });
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    ASSERT_TRUE(done.wait_for(lock, std::chrono::seconds(60), [&] { return ended == kRequests; }));
  }
  const EngineMetrics m = engine.Metrics();  // at once: no sleep, no further step awaited
  engine.Stop();
  EXPECT_EQ(m.requests_finished, kRequests);
  EXPECT_GT(m.steps, 0);
}

}  // namespace
}  // namespace latent::engine
