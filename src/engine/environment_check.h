// The LATENT_* settings that are read where they are first used (the compute pool, the profile,
// the kernel choice, the loader, the attention), read at once: a value latent cannot read
// (LATENT_THREADS=abc, LATENT_GEMM=bogus, LATENT_KEY_FOLD=yes, ...) stops a command, or the
// making of a Python LLM, before any work, naming the variable, not its first request.
#pragma once

namespace latent::engine {

// Throws latent::Error naming the first variable whose value is unreadable (base/env.h).
void CheckEnvironment();

}  // namespace latent::engine
