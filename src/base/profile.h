// Cheap per-op wall-time accounting for finding where a step spends its time.
//
// LATENT_PROFILE=1 (or true, yes, on) in the environment turns it on: every
// LATENT_PROFILE_SCOPE(op) adds its wall time and one call to that op's row of the current phase
// (prefill or decode, set by the engine per step), and the table is printed to stderr at exit.
// Off (the default), a scope is one predictable branch on a global read once at start-up: no
// clock reads, no atomics.
//
// Scopes should not nest inside scopes of another op (the table adds them up as disjoint); the
// "step" row is the whole forward pass, so step minus the rest is what no scope covers.
#pragma once

#include <chrono>
#include <cstdint>

namespace latent::profile {

enum class Op : int {
  kStep,          // Model::Forward, whole (engine step forward)
  kEmbed,         // embedding rows
  kNorm,          // RMS norms of the hidden state (input, post-attention, final)
  kAttnProj,      // q / kv_a / o projections, kv_a norm, RoPE, cache writes
  kAttnAbsorb,    // W_UK / W_UV products of the absorbed form
  kAttnCore,      // softmax(q.k) v over the cached rows (gather included)
  kDsaIndexer,    // DSA indexer scoring and top-k
  kRouter,        // MoE router logits and top-k
  kExperts,       // routed experts (gather, GEMMs, scatter-add)
  kSharedExperts, // shared experts
  kDenseMlp,      // dense MLP layers
  kResidual,      // residual adds and copies between blocks
  kLmHead,        // lm_head GEMV/GEMM
  kSampling,      // sampling over the logits (engine)
  kSchedule,      // scheduling and batch building (engine)
  kCount
};

enum class Phase : int { kPrefill, kDecode, kCount };

namespace internal {
extern const bool g_enabled;
void Add(Op op, int64_t ns);
}  // namespace internal

inline bool Enabled() { return internal::g_enabled; }

// Throws latent::Error naming LATENT_PROFILE when it is not a boolean (1/true/yes/on,
// 0/false/no/off): the CLI calls it at start-up, where a typo must stop the command.
void CheckEnvironment();

// The phase later scopes are charged to (the engine sets it per step; prefill by default).
void SetPhase(Phase phase);

// Prints the table to `stderr` (also done at exit when enabled).
void Print();

class Scope {
 public:
  explicit Scope(Op op) : op_(op) {
    if (internal::g_enabled) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (internal::g_enabled) {
      internal::Add(op_, std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start_)
                             .count());
    }
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Op op_;
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace latent::profile

#define LATENT_PROFILE_CONCAT2(a, b) a##b
#define LATENT_PROFILE_CONCAT(a, b) LATENT_PROFILE_CONCAT2(a, b)
#define LATENT_PROFILE_SCOPE(op) \
  ::latent::profile::Scope LATENT_PROFILE_CONCAT(latent_profile_scope_, __LINE__)(::latent::profile::Op::op)
