// The engine driven from many threads while its loop runs (Start()): Submit, Cancel and Metrics
// concurrently, as the server's HTTP threads do. Run under TSan by `make test-tsan`; in the plain
// build it checks that every request ends exactly once and that the cache is free afterwards.
// The model is a small fake (one layer, a 64-token vocabulary) that writes and reads real cache
// rows, so the paged cache and the block pool are exercised as in serving.
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
#include "model/model.h"

namespace latent::engine {
namespace {

class FakeModel : public model::Model {
 public:
  FakeModel() {
    c_.model_type = "deepseek_v3";
    c_.architecture = "deepseek_v3";
    c_.vocab_size = 64;
    c_.hidden_size = 8;
    c_.num_hidden_layers = 1;
    c_.num_attention_heads = 1;
    c_.max_position_embeddings = 4096;
    c_.kv_lora_rank = 6;
    c_.qk_nope_head_dim = 2;
    c_.qk_rope_head_dim = 2;
    c_.v_head_dim = 2;
    c_.moe_layers = {false};
    c_.dtype = "float32";
  }
  const model::ModelConfig& config() const override { return c_; }

  // Each token's cached row holds its id; a logits row favours (sum of the ids its sequence has
  // cached up to it) mod vocab, so the output depends on what the cache holds.
  void Forward(const model::ForwardBatch& batch, model::AttentionForm, float* logits,
               model::ForwardTrace*) const override {
    const cache::PagedRows& cache = *batch.rows;
    const int64_t width = c_.kv_lora_rank + c_.qk_rope_head_dim;
    std::vector<float> row(width);
    for (size_t t = 0; t < batch.token_ids.size(); ++t) {
      std::fill(row.begin(), row.end(), float(batch.token_ids[t]));
      cache.WriteRow(batch.BlockTable(batch.seq_slots[t]), 0, model::kLatentRow, batch.positions[t],
                     row.data());
    }
    std::vector<float> rows;
    for (size_t r = 0; r < batch.logits_rows.size(); ++r) {
      const int32_t t = batch.logits_rows[r];
      const int64_t count = batch.positions[t] + 1;
      rows.resize(count * width);
      cache.GatherRows(batch.BlockTable(batch.seq_slots[t]), 0, model::kLatentRow, count, rows.data());
      int64_t sum = 0;
      for (int64_t p = 0; p < count; ++p) sum += static_cast<int64_t>(rows[p * width]);
      float* out = logits + r * c_.vocab_size;
      for (int64_t v = 0; v < c_.vocab_size; ++v) out[v] = float(v % 7) * 0.1f;
      out[sum % c_.vocab_size] = 5.0f;
    }
  }

 private:
  model::ModelConfig c_;
};

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
  Engine engine(std::make_unique<FakeModel>(), model::GenerationConfig{}, options);
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
