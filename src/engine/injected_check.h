// Test-only fault injection for the multi-process mode (docs/reliability.md): with
// LATENT_TEST_FAIL_CHECK=RANK:FORWARD set, forward number FORWARD (1-based, counted on each rank)
// fails a LATENT_CHECK on rank RANK alone, as a bug on one rank would. tests/parallel uses it to
// prove that such a failure ends the job at once; nothing else sets it.
#pragma once

#include <cstdint>
#include <optional>

namespace latent::engine {

// The forward LATENT_TEST_FAIL_CHECK names.
struct InjectedCheck {
  int rank = 0;
  int64_t forward = 1;  // 1-based
};

// Reads LATENT_TEST_FAIL_CHECK once, at a multi-process job's start on every rank (before the
// model loads): nullopt when unset or empty. A value that is not RANK:FORWARD throws
// latent::Error naming the variable there (exit 2), not in a forward, where it would fail every
// request as bad input, or on one rank alone put the ranks out of step.
std::optional<InjectedCheck> ReadInjectedCheck();

// Whether forward `forward` (1-based) on rank `rank` is the one `injected` names.
inline bool InjectedCheckFailure(const std::optional<InjectedCheck>& injected, int rank,
                                 int64_t forward) {
  return injected && injected->rank == rank && injected->forward == forward;
}

}  // namespace latent::engine
