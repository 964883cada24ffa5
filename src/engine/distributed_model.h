// One model over the ranks of an MPI job (docs/scale-out.md). Rank 0 runs the command (the
// engine, its scheduler, the server, sampling); each of its Forward calls first broadcasts the
// batch (token ids, positions, block tables, state slots, forms) and, when its cache is new, the
// cache's geometry (blocks and per-sequence state slots; the engine sends it as it starts, through
// Model::AttachCache, and every rank reports whether it could allocate its replica), so every
// other rank runs the same forward on its own replica of the cache (attention, linear attention
// included, is replicated, so every rank holds the same rows and the same recurrent state; the
// block and slot ids all come from rank 0's scheduler). Routed experts are split across the ranks
// (model::ExpertShard), whose partial MoE outputs are summed inside the forward.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/injected_check.h"
#include "model/model.h"
#include "parallel/communicator.h"

namespace latent::engine {

// Thrown on ranks > 0 by LoadRankedModel once rank 0 has ended the job: main() then finalizes
// MPI and exits 0 without running the rest of the command.
struct WorkerFinished {};

// Loads the model in `dir` for this process's part of the job (parallel::World()):
//  - one process: model::LoadModel, unchanged;
//  - N > 1: every rank first compares what it would compute with rank 0 (engine/rank_check.h:
//    build, --quantize, kernels, checkpoint; after the load the resolved precision), and a rank
//    that differs ends the job before a step;
//  - rank 0 of N: its experts' shard, wrapped so that Forward broadcasts each step;
//  - rank r > 0: its experts' shard; then serves rank 0's steps until rank 0 is done and throws
//    WorkerFinished (never returns).
std::unique_ptr<model::Model> LoadRankedModel(const std::string& dir, model::LoadOptions options);

// Where rank 0's forward steps of one kind spent their time (`latent bench`, bench/scale.py).
struct StepTimes {
  int64_t steps = 0, tokens = 0;
  double seconds = 0;             // rank 0's whole Forward: the step broadcast, then the forward
  double collective_seconds = 0;  // of it in collectives, waiting for the other ranks included
  // Of it the collectives' own time (with StepBroadcaster::set_comm_detail only): per call, the
  // least time any rank spent in it (the last rank to arrive waits for nobody), summed.
  double transfer_seconds = 0;
};

// Steps by kind: prefill (no sequence decoding), decode (every sequence decoding one generated
// token), mixed (both).
struct StepCommStats {
  StepTimes prefill, decode, mixed;
};

// Rank 0's side: broadcasts each step before running it, and a stop message when destroyed.
class StepBroadcaster final : public model::Model {
 public:
  // `injected`: LATENT_TEST_FAIL_CHECK, read at start-up (engine/injected_check.h).
  StepBroadcaster(std::unique_ptr<model::Model> model, parallel::Communicator& comm,
                  std::optional<InjectedCheck> injected = std::nullopt);
  ~StepBroadcaster() override;

  const model::ModelConfig& config() const override { return model_->config(); }
  model::Precision precision() const override { return model_->precision(); }
  uint64_t PrefixCacheSalt(int64_t prompt_len) const override {
    return model_->PrefixCacheSalt(prompt_len);
  }
  void Reserve(int64_t max_tokens) override { model_->Reserve(max_tokens); }
  // Sends the workers the cache's layout now, at start-up; throws latent::Error naming the rank
  // and the bytes when one cannot hold its replica.
  void AttachCache(const cache::PagedRows& rows) const override { SendCacheIfNew(rows); }
  void Forward(const model::ForwardBatch& batch, model::AttentionForm form, float* logits,
               model::ForwardTrace* trace = nullptr) const override;
  void CopyCacheBlock(const cache::PagedRows& rows, cache::BlockId from, cache::BlockId to,
                      uint32_t tokens) const override;
  void CopyStateSlot(const cache::PagedRows& rows, cache::StateSlot from,
                     cache::StateSlot to) const override;

  // Sends the workers `rows`' bytes as they are now, so that every rank holds the rows rank 0
  // wrote outside a forward (bench-step's random rows; the engine writes rows only in forwards,
  // which every rank runs).
  void ShareCacheRows(const cache::PagedRows& rows) const;

  // The time of every step so far, by kind (always counted: a clock read and a sum per step).
  const StepCommStats& comm_stats() const { return stats_; }
  // Also split each step's collective time into transfer and waiting: every rank records each
  // collective's seconds, and after the step the ranks exchange them (one small all-gather
  // per step, outside the step's figures).
  void set_comm_detail(bool on) { detail_ = on; }

 private:
  void SendCacheIfNew(const cache::PagedRows& rows) const;

  std::unique_ptr<model::Model> model_;
  parallel::Communicator& comm_;
  // The cache the workers replicate (rank 0's view; a new one is announced to them).
  mutable const uint8_t* cache_base_ = nullptr;
  mutable int32_t cache_blocks_ = 0;
  mutable uint32_t cache_block_tokens_ = 0;
  mutable const uint8_t* state_base_ = nullptr;
  mutable int32_t state_slots_ = 0;
  bool detail_ = false;
  mutable StepCommStats stats_;
  mutable std::vector<double> calls_;  // [calls] this step's collectives' seconds (detail)
  std::optional<InjectedCheck> injected_;  // test-only (engine/injected_check.h)
  mutable int64_t forwards_ = 0;       // forwards so far (LATENT_TEST_FAIL_CHECK counts them)
};

// Ranks > 0: runs rank 0's steps on `model` with a cache replica of its own until rank 0 sends
// stop. `injected`: as for StepBroadcaster.
void RunWorker(const model::Model& model, parallel::Communicator& comm,
               const std::optional<InjectedCheck>& injected = std::nullopt);

}  // namespace latent::engine
