// Test-only fault injection for the multi-process mode (docs/reliability.md): with
// LATENT_TEST_FAIL_CHECK=RANK:FORWARD set, forward number FORWARD (1-based, counted on each rank)
// fails a LATENT_CHECK on rank RANK alone, as a bug on one rank would. tests/parallel uses it to
// prove that such a failure ends the job at once; nothing else sets it.
#pragma once

#include <cstdint>

namespace latent::engine {

// Whether forward `forward` (1-based) on rank `rank` is the one LATENT_TEST_FAIL_CHECK names.
// Unset (always, outside the tests): false. A value that is not RANK:FORWARD is bad input.
bool InjectedCheckFailure(int rank, int64_t forward);

}  // namespace latent::engine
