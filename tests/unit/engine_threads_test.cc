// The engine driven from many threads while its loop runs (Start()): Submit, Cancel and Metrics
// concurrently, as the server's HTTP threads do. Run under TSan by `make test-tsan`; in the plain
// build it checks that every request ends exactly once and that the cache is free afterwards.
// The model is a small fake that writes and reads real cache rows (fake_cache_model.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "fake_cache_model.h"

namespace latent::engine {
namespace {

using testing::FakeCacheModel;

// Runs ~150 requests from 6 threads (a third cancelled) with Metrics() read all along, and
// returns the engine's metrics at the end.
EngineMetrics SubmitCancelAndReadMetricsFromManyThreads(int32_t speculative_tokens) {
  EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 48;  // 192 tokens for ~40 requests in flight: preemptions happen
  options.max_batch_tokens = 64;
  options.max_seqs = 16;
  options.check_invariants = true;
  options.speculative_tokens = speculative_tokens;
  Engine engine(std::make_unique<FakeCacheModel>(), model::GenerationConfig{}, options);
  engine.Start();

  constexpr int kThreads = 6, kRequestsPerThread = 25;
  std::mutex mutex;
  std::condition_variable all_done;
  std::map<int64_t, int> finishes;  // request id -> final events seen
  std::map<int64_t, int> tokens;    // request id -> tokens seen
  int finished = 0, submitted = 0;

  std::atomic<bool> stop_metrics{false};
  std::thread metrics_reader([&] {
    while (!stop_metrics) {
      const EngineMetrics m = engine.Metrics();
      EXPECT_LE(m.used_blocks, m.total_blocks);
      std::this_thread::yield();
    }
  });

  std::vector<std::thread> clients;
  for (int c = 0; c < kThreads; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(1234 + c);
      std::vector<int64_t> mine;
      for (int i = 0; i < kRequestsPerThread; ++i) {
        Request request;
        const int prompt = 1 + int(rng() % 40);
        for (int p = 0; p < prompt; ++p) request.prompt.push_back(int32_t(rng() % 64));
        request.max_tokens = 1 + int64_t(rng() % 30);
        request.ignore_eos = true;
        if (rng() % 2) {
          request.sampling.temperature = 1.0f;
          request.sampling.seed = rng();
        }
        const int64_t id = engine.Submit(std::move(request), [&](const RequestOutput& out) {
          std::lock_guard<std::mutex> lock(mutex);
          if (out.has_token) ++tokens[out.request_id];
          if (out.finish != FinishReason::kNone) {
            ++finishes[out.request_id];
            ++finished;
            all_done.notify_all();
          }
        });
        {
          std::lock_guard<std::mutex> lock(mutex);
          ++submitted;
        }
        mine.push_back(id);
        // Cancel a third of them, some at once, some later, some from the other threads' ids.
        if (rng() % 3 == 0) {
          if (rng() % 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
          engine.Cancel(mine[rng() % mine.size()]);
        }
        engine.Cancel(1 << 30);  // unknown ids are ignored
      }
    });
  }
  for (std::thread& t : clients) t.join();
  {
    std::unique_lock<std::mutex> lock(mutex);
    EXPECT_TRUE(all_done.wait_for(lock, std::chrono::seconds(120),
                                  [&] { return finished >= submitted; }))
        << finished << " of " << submitted << " requests finished";
  }
  stop_metrics = true;
  metrics_reader.join();

  const EngineMetrics m = engine.Metrics();
  engine.Stop();
  std::lock_guard<std::mutex> lock(mutex);
  EXPECT_EQ(submitted, kThreads * kRequestsPerThread);
  EXPECT_EQ(static_cast<int>(finishes.size()), submitted);
  for (const auto& [id, n] : finishes) EXPECT_EQ(n, 1) << "request " << id << " ended " << n << " times";
  for (const auto& [id, n] : tokens) EXPECT_LE(n, 30) << "request " << id;
  EXPECT_EQ(m.running, 0);
  EXPECT_EQ(m.waiting, 0);
  EXPECT_EQ(m.used_blocks, 0);
  EXPECT_GT(m.steps, 0);
  // Read once every end was heard, with no step awaited: each is counted before it is reported.
  EXPECT_EQ(m.requests_finished, submitted);
  return m;
}

TEST(EngineThreads, SubmitCancelAndMetricsFromManyThreadsWhileTheLoopRuns) {
  SubmitCancelAndReadMetricsFromManyThreads(/*speculative_tokens=*/0);
}

// The same with speculative drafts: DrawRows draws draft rows side by side (each task standing
// the draft tokens in for its own sequence's), the scheduler trims their blocks, and cancels
// land between steps. The fake model's greedy tokens fall into loops (each is the sum of the
// ids before it, mod 64), so drafts run and prove right.
TEST(EngineThreads, TheSameWithSpeculativeDrafts) {
  const EngineMetrics m = SubmitCancelAndReadMetricsFromManyThreads(/*speculative_tokens=*/4);
  EXPECT_GT(m.accepted_draft_tokens, 0);
}

}  // namespace
}  // namespace latent::engine
