#include "base/profile.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/env.h"
#include "base/error.h"

namespace latent::profile {
namespace {

constexpr int kOps = static_cast<int>(Op::kCount);
constexpr int kPhases = static_cast<int>(Phase::kCount);

const char* const kOpNames[kOps] = {
    "step (forward)", "embed",        "norms",    "attn proj+rope", "attn absorb W_UK/W_UV",
    "attn core",      "dsa indexer",  "moe router", "moe experts",  "moe shared experts",
    "dense mlp",      "residual",     "lm_head",  "sampling",       "schedule+batch"};
const char* const kPhaseNames[kPhases] = {"prefill", "decode"};

struct Totals {
  std::atomic<int64_t> ns[kPhases][kOps] = {};
  std::atomic<int64_t> calls[kPhases][kOps] = {};
};

Totals& totals() {
  static Totals t;
  return t;
}

std::atomic<int> g_phase{0};

// What made LATENT_PROFILE unreadable; empty when it was read. Read during static
// initialization, where an exception would end the process (or a Python interpreter importing
// latent), so the error waits for CheckEnvironment.
std::string& ReadError() {
  static std::string error;
  return error;
}

bool ReadEnabled() {
  bool on = false;
  try {
    on = EnvBool("LATENT_PROFILE").value_or(false);
  } catch (const Error& e) {
    ReadError() = e.what();
  }
  if (on) {
    totals();  // constructed before the handler, so destroyed after it runs
    std::atexit(Print);
  }
  return on;
}

}  // namespace

namespace internal {
const bool g_enabled = ReadEnabled();
}  // namespace internal

void CheckEnvironment() {
  (void)internal::g_enabled;  // read by now
  if (!ReadError().empty()) Fail(ReadError());
}

namespace internal {

void Add(Op op, int64_t ns) {
  const int p = g_phase.load(std::memory_order_relaxed);
  totals().ns[p][static_cast<int>(op)].fetch_add(ns, std::memory_order_relaxed);
  totals().calls[p][static_cast<int>(op)].fetch_add(1, std::memory_order_relaxed);
}
}  // namespace internal

void SetPhase(Phase phase) { g_phase.store(static_cast<int>(phase), std::memory_order_relaxed); }

void Print() {
  Totals& t = totals();
  std::fprintf(stderr, "\nlatent profile (LATENT_PROFILE=1): wall ms per op class\n");
  for (int p = 0; p < kPhases; ++p) {
    const double step_ms = t.ns[p][0].load() / 1e6;
    const int64_t steps = t.calls[p][0].load();
    double outside = 0;  // ops that are not inside the forward pass
    for (int o = 0; o < kOps; ++o) {
      if (static_cast<Op>(o) == Op::kSampling || static_cast<Op>(o) == Op::kSchedule) {
        outside += t.ns[p][o].load() / 1e6;
      }
    }
    if (steps == 0 && outside == 0) continue;
    std::fprintf(stderr, "%-8s %-24s %10s %8s %10s %7s\n", kPhaseNames[p], "op", "ms", "calls",
                 "ms/step", "%fwd");
    double covered = 0;
    for (int o = 0; o < kOps; ++o) {
      const int64_t calls = t.calls[p][o].load();
      if (calls == 0) continue;
      const double ms = t.ns[p][o].load() / 1e6;
      const Op op = static_cast<Op>(o);
      const bool inside = op != Op::kStep && op != Op::kSampling && op != Op::kSchedule;
      if (inside) covered += ms;
      std::fprintf(stderr, "%-8s %-24s %10.1f %8lld %10.3f %7.1f\n", kPhaseNames[p], kOpNames[o],
                   ms, static_cast<long long>(calls), steps > 0 ? ms / steps : 0.0,
                   step_ms > 0 ? 100.0 * ms / step_ms : 0.0);
    }
    if (step_ms > 0) {
      std::fprintf(stderr, "%-8s %-24s %10.1f %8s %10.3f %7.1f\n", kPhaseNames[p],
                   "(forward, unaccounted)", step_ms - covered, "", (step_ms - covered) / steps,
                   100.0 * (step_ms - covered) / step_ms);
    }
  }
}

}  // namespace latent::profile
