// Threads left to run on their own, and how many still run. XGrammar's compiles cannot be
// interrupted: a server shutting down stops waiting for one (structured_output.h) and exits while
// it runs. The process must then end without static destructors (std::_Exit, after the output is
// flushed): they would destroy what the thread may still use. main() checks DetachedThreadsRunning.
#pragma once

#include <cstddef>
#include <functional>

namespace latent {

// Runs `work` on a new detached thread, counted as running until `work` (and what it captured) is
// destroyed; `work` must not throw. Throws std::system_error when the system refuses the thread.
void RunDetached(std::function<void()> work);

// Threads RunDetached started that have not finished.
size_t DetachedThreadsRunning();

}  // namespace latent
