// The MPI side of world.cc, compiled only when CMake found MPI (LATENT_HAVE_MPI).
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace latent::parallel {

std::unique_ptr<Communicator> MakeMpiWorld(int* argc, char*** argv);
void FinalizeMpiWorld();
[[noreturn]] void AbortMpiWorld(int code);

}  // namespace latent::parallel
