// Engine: continuous batching over one model. Requests are submitted and cancelled from any
// thread; each step schedules running and waiting sequences under the token budget, runs one
// forward pass over the packed batch, samples, and reports tokens through each request's
// callback. Step() can be driven directly (offline, tests) or by Start()'s background thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cache/block_pool.h"
#include "engine/activations.h"
#include "engine/batch_builder.h"
#include "engine/cache_manager.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "model/generation_config.h"
#include "model/model.h"

namespace latent::engine {

struct EngineOptions {
  int64_t max_batch_tokens = 2048;
  int32_t max_seqs = 256;
  int64_t max_prompt_logits_rows = 512;  // Prompt-logprob logits rows per step (SchedulerOptions).
  uint32_t block_tokens = cache::kDefaultBlockTokens;
  int32_t num_blocks = 0;      // 0: from cache_memory_gib.
  double cache_memory_gib = 1.0;
  bool prefix_caching = true;
  std::string cache_dtype = "auto";
  model::AttentionForm attention = model::AttentionForm::kAuto;
  // Speculative decoding by prompt lookup (engine/ngram_draft.h): each decoding sequence runs up
  // to this many draft tokens per step after its pending token, verified in the same forward
  // (fewer, or none for a while, after its drafts proved wrong: DraftPace); 0: off. Exact: the
  // tokens and logprobs are those of decoding without drafts, bit for bit (each draft token's
  // row is drawn as its own decode step would draw it). Steps spend only the budget and the
  // blocks nothing else wants on drafts (Scheduler). Models whose layers keep per-sequence state
  // (linear attention) refuse it: that state cannot drop a rejected token.
  int32_t speculative_tokens = 0;
  // The longest and shortest suffix of a sequence looked up for a draft (vLLM's
  // prompt_lookup_max and prompt_lookup_min).
  int32_t speculative_ngram_max = 3;
  int32_t speculative_ngram_min = 1;
  bool check_invariants = false;  // Verify block accounting after every step (tests).
  // Test-only (engine/debug_replay.h): when not empty, every sample emits these token ids instead
  // of sampling, then ends with kStop.
  std::vector<int32_t> debug_replay;
};

struct EngineMetrics {
  int32_t running = 0, waiting = 0;
  int32_t total_blocks = 0, used_blocks = 0, cached_blocks = 0;
  // Sliding-window rows' blocks (retention group 1) held by running sequences, now and at most
  // over the engine's life; their tokens per block (0: the model has no window rows).
  int32_t window_blocks = 0, peak_window_blocks = 0;
  uint32_t window_block_tokens = 0;
  uint32_t block_tokens = 0;
  uint64_t cache_bytes_per_token = 0;
  // The widest layer's bytes per token (656 for DeepSeek V3 dims in fp8 rows), and the rows'
  // dtype ("f32", "bf16" or "fp8": model::CacheDTypeName).
  uint64_t cache_layer_bytes_per_token = 0;
  const char* cache_dtype = "";
  // The counters include a request's end, and the step that produced it, before its callback
  // hears of the end (busy_seconds adds the rest of that step's time after).
  int64_t requests_finished = 0;
  int64_t prompt_tokens = 0, prefix_hit_tokens = 0, generated_tokens = 0;
  int64_t preemptions = 0, steps = 0;
  // Speculative decoding: draft tokens run, and those that proved right.
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;
  double busy_seconds = 0;  // Time spent in steps.
};

class Engine {
 public:
  Engine(std::unique_ptr<model::Model> model, model::GenerationConfig generation, EngineOptions options);
  ~Engine();

  // Validates and queues `request`; returns its id. Throws latent::Error for a request that is
  // malformed or can never fit (longer than the cache or max_position_embeddings).
  int64_t Submit(Request request, OutputCallback on_output);
  // Ends the request at once, freeing its blocks; its callback gets kCancelled. Unknown or
  // finished ids are ignored.
  void Cancel(int64_t request_id);

  // Runs one step on the calling thread. Returns false when there was nothing to do.
  bool Step();
  // Runs steps on a background thread until Stop().
  void Start();
  void Stop();

  EngineMetrics Metrics() const;
  const model::ModelConfig& config() const { return model_->config(); }
  // Tokens one request's sample may hold (prompt + max_tokens) for Submit to take it: the
  // cache's blocks less, on a model with sliding-window rows, those held back for two windows
  // (CacheManager::capacity_tokens). Fixed once constructed; what clients size a default by.
  int64_t capacity_tokens() const { return cache_->capacity_tokens(); }

 private:
  struct RequestState {
    Request request;
    SamplingTables sampling_tables;  // built by Submit, off the engine's thread
    OutputCallback on_output;
    std::vector<std::unique_ptr<Sequence>> samples;
    int32_t live = 0;
  };
  struct Submission {
    int64_t id;
    std::unique_ptr<RequestState> state;
  };

  void DrainQueues();
  void Admit(int64_t id, std::unique_ptr<RequestState> state);
  void CancelNow(int64_t id);
  void Commit(const SchedulePlan& plan, const BuiltBatch& batch, const float* logits);
  // Reports the prompt logprobs of `rows` (logits [rows.count, vocab] from `logits`).
  void ReportPromptLogprobs(Sequence& seq, const PromptLogitsRows& rows, const float* logits);
  // A sequence's next token from its logits row, or the error that stopped the draw.
  struct Drawn {
    SampledToken sampled;
    std::string error;  // empty: `sampled` holds the token
  };
  Drawn Draw(const Sequence& seq, const float* logits) const;
  // Every row sampled in this step, side by side: fills its structured-output mask (when
  // constrained) and draws its token (except under debug replay, whose draws are made as the
  // tokens are accepted, as are a forked sample's). A draft's rows follow its first while the
  // draws equal the draft (not under a grammar, whose state would have to advance). Rows
  // missing from a slot's list are drawn when accepted.
  std::vector<std::vector<Drawn>> DrawRows(const SchedulePlan& plan, const BuiltBatch& batch,
                                           const float* logits);
  // Appends a sampled token to `seq` (`drawn`, or drawn now from `logits`), reports it, and
  // finishes the sequence when it stops.
  void AcceptToken(Sequence& seq, const float* logits, const Drawn* drawn = nullptr);
  void ForkSamples(RequestState& state, Sequence& first, const float* logits);
  // Sets each running decode's draft (EngineOptions::speculative_tokens).
  void ProposeDrafts();
  // After the pending token of `seq` was accepted from the first of its `draft` + 1 rows
  // (`rows`, [draft + 1, vocab]): accepts the draft tokens that equal what is drawn at their
  // positions, each drawn as its own step would have (the draw after the last of them too), and
  // commits their rows.
  // `drawn`: DrawRows' draws of the rows, as far as it made them.
  void VerifyDraft(Sequence& seq, int64_t draft, const float* rows,
                   const std::vector<Drawn>& drawn);
  void Finish(Sequence& seq, FinishReason reason, const std::string& error = "");
  void CheckInvariants() const;
  // Publishes the scheduler's and the pool's gauges for Metrics().
  void PublishGauges();
  // Publishes the gauges after one of `state`'s samples has ended, and counts the request in
  // requests_finished when that was its last; called before the end is reported.
  void PublishEnd(const RequestState& state);
  // Drops requests whose samples have all finished and whose ends have been reported.
  void RetireFinished();
  // Adds to() - from() to busy_seconds (and one to steps when new_step) under the lock.
  void AddBusyTime(std::chrono::steady_clock::time_point from,
                   std::chrono::steady_clock::time_point to, bool new_step);

  std::unique_ptr<model::Model> model_;
  model::GenerationConfig generation_;
  // generation_.EndIds(vocab): the EOS ids, the tokenizer's among them, that end a sample unless
  // ignore_eos (and that min_tokens holds off).
  std::vector<int32_t> eos_ids_;
  EngineOptions options_;
  std::unique_ptr<CacheManager> cache_;
  cache::BlockPool* pool_;  // cache_'s pool.
  std::unique_ptr<Scheduler> scheduler_;
  BuiltBatch batch_;  // batch_.forward.rows: cache_'s rows, set once.
  Activations activations_;
  std::map<int64_t, std::unique_ptr<RequestState>> requests_;
  int64_t next_sequence_id_ = 0;
  uint64_t seed_base_;

  // Guards the queues, next_request_id_ and metrics_ (counters, and the gauges PublishGauges
  // copies from the scheduler and the pool); never held across a step.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Submission> submit_queue_;
  std::vector<int64_t> cancel_queue_;
  int64_t next_request_id_ = 0;
  EngineMetrics metrics_;
  std::mutex step_mutex_;  // One step at a time.
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace latent::engine
