#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "base/error.h"
#include "parallel/communicator.h"
#include "parallel/mpi_world.h"

namespace latent::parallel {
namespace {

std::unique_ptr<Communicator>& Current() {
  static std::unique_ptr<Communicator> world = std::make_unique<SingleProcess>();
  return world;
}

bool mpi_started = false;

}  // namespace

bool LaunchedByMpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return true;
  }
  return false;
}

void InitWorld(int* argc, char*** argv) {
  if (!LaunchedByMpi() || mpi_started) return;
#ifdef LATENT_HAVE_MPI
  Current() = MakeMpiWorld(argc, argv);
  mpi_started = true;
#else
  (void)argc;
  (void)argv;
  Fail("started by mpirun (OMPI_COMM_WORLD_SIZE or PMI variables are set), but this latent was "
       "built without MPI: install libopenmpi-dev (make setup) and rebuild");
#endif
}

Communicator& World() { return *Current(); }

void FinalizeWorld() {
  if (!mpi_started) return;
  Current() = std::make_unique<SingleProcess>();  // frees the MPI communicator first
#ifdef LATENT_HAVE_MPI
  FinalizeMpiWorld();
#endif
  mpi_started = false;
}

bool SentByLauncher(pid_t sender) { return sender > 0 && sender == getppid(); }

std::string LauncherSignalLine(int rank, int size, int sig) {
  return StrCat("latent: error: rank ", rank, " of ", size, ": ended by mpirun (",
                sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : strsignal(sig),
                "): another rank has exited or the job was interrupted");
}

void EndedByLauncher(int sig) {
  const std::string line = LauncherSignalLine(World().rank(), World().size(), sig) + "\n";
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, line.data(), line.size());
  _exit(128 + sig);
}

namespace {

// "latent: error: rank R of N: MESSAGE\n".
std::string AbortLine(const std::string& message) {
  return StrCat("latent: error: rank ", World().rank(), " of ", World().size(), ": ", message,
                "\n");
}

}  // namespace

void AbortWorld(const std::string& message, int code) {
  std::fputs(AbortLine(message).c_str(), stderr);
  std::fflush(stderr);
#ifdef LATENT_HAVE_MPI
  if (mpi_started) AbortMpiWorld(code);
#endif
  std::_Exit(code);
}

void AbortWorldFromAnotherThread(const std::string& message, int code) {
#ifdef LATENT_HAVE_MPI
  if (mpi_started) RequestMpiAbort(AbortLine(message), code);
#endif
  AbortWorld(message, code);
}

}  // namespace latent::parallel
