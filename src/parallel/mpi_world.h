// The MPI side of world.cc, compiled only when CMake found MPI (LATENT_HAVE_MPI).
#pragma once

#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace latent::parallel {

std::unique_ptr<Communicator> MakeMpiWorld(int* argc, char*** argv);
void FinalizeMpiWorld();
[[noreturn]] void AbortMpiWorld(int code);
// Prints `line` and ends the job, from any thread, never inside MPI beside another thread's call.
[[noreturn]] void RequestMpiAbort(const std::string& line, int code);

}  // namespace latent::parallel
