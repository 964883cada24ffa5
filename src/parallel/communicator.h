// The processes one model runs on (DESIGN: scale-out over MPI, docs/scale-out.md) and the few
// collectives the forward pass and the step broadcast need. One process without mpirun gets
// SingleProcess: size 1, every collective a no-op, no MPI call at all. Under mpirun, World() is
// the MPI implementation (mpi_communicator.cc) over MPI_COMM_WORLD.
//
// Every collective is deterministic: its result depends only on the ranks' inputs, never on
// timing or arrival order, so every rank computes bit-identical activations and rank 0's logits
// do not vary from run to run.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace latent::parallel {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Copies rank 0's `bytes` bytes at `data` to every other rank's `data`. `wait_forever`: the
  // receiving ranks wait without the step timeout (workers idle between steps); rank 0 and
  // the collectives inside a step fail after it.
  virtual void Broadcast(void* data, int64_t bytes, bool wait_forever = false) = 0;
  // data [n] = the sum over ranks of every rank's data [n], added in rank order
  // (((r0 + r1) + r2) + ...) on every rank, so all ranks hold the same bits.
  virtual void SumInRankOrder(float* data, int64_t n) = 0;
  // Bytes this process has sent and received through collectives so far (for `latent bench`'s
  // communication share and tests).
  virtual int64_t bytes_moved() const = 0;
  virtual double seconds_in_collectives() const = 0;
  // all [size, n] = every rank's mine [n], in rank order, on every rank. Neither counted in
  // bytes_moved and seconds_in_collectives nor recorded by RecordCalls: it carries the step
  // timing's own figures (engine/distributed_model.h).
  virtual void AllGather(const double* mine, int64_t n, double* all) = 0;
  // all [size, bytes] = every rank's `bytes` bytes at `mine`, in rank order, on every rank; not
  // counted either (the start-up checks of engine/rank_check.h). `wait_forever`: no step timeout
  // on any rank, rank 0 included (ranks load their shards at their own pace).
  virtual void AllGatherBytes(const void* mine, int64_t bytes, void* all, bool wait_forever) = 0;

  // While `calls` is not null, every Broadcast and SumInRankOrder also appends the seconds it
  // took on this rank to it (null stops).
  void RecordCalls(std::vector<double>* calls) { calls_ = calls; }

 protected:
  std::vector<double>* calls_ = nullptr;
};

// One process: rank 0 of 1; collectives do nothing.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void Broadcast(void*, int64_t, bool) override {}
  void SumInRankOrder(float*, int64_t) override {}
  int64_t bytes_moved() const override { return 0; }
  double seconds_in_collectives() const override { return 0; }
  void AllGather(const double* mine, int64_t n, double* all) override {
    if (n > 0) std::memcpy(all, mine, n * sizeof(double));
  }
  void AllGatherBytes(const void* mine, int64_t bytes, void* all, bool) override {
    if (bytes > 0) std::memcpy(all, mine, bytes);
  }
};

// Every rank's `mine`, in rank order, on every rank, of any lengths (parallel/gather.cc: the
// lengths, then the strings padded to the longest, through AllGatherBytes). `wait_forever` as for
// AllGatherBytes.
std::vector<std::string> AllGatherStrings(Communicator& comm, const std::string& mine,
                                          bool wait_forever);

// Whether this process was started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, or a PMI/PMIx
// launcher's size variable) with more than nothing to say: then InitWorld initializes MPI.
bool LaunchedByMpi();

// Call once at the start of main: under mpirun, MPI_Init_thread (MPI_THREAD_SERIALIZED: the
// engine calls from its own thread, one call at a time), errors returned instead of aborting,
// and the step timeout from LATENT_STEP_TIMEOUT (seconds, default 300); else nothing. Throws
// latent::Error when launched by mpirun in a build without MPI.
void InitWorld(int* argc, char*** argv);
// The process's communicator (SingleProcess until InitWorld chose MPI).
Communicator& World();
// MPI_Finalize under mpirun; nothing otherwise.
void FinalizeWorld();
// Under mpirun: whether a signal from process `sender` came from this rank's launcher (mpirun, or
// its daemon on another machine: the parent process), which sends SIGTERM to end the job when
// another rank has exited or the job is interrupted, rather than from an operator's kill.
bool SentByLauncher(pid_t sender);
// "latent: error: rank R of N: ended by mpirun (SIG): another rank has exited or the job was
// interrupted": what a rank prints when its launcher ends it.
std::string LauncherSignalLine(int rank, int size, int sig);
// Prints LauncherSignalLine for this process and exits 128 + sig at once: the job is ending, and
// neither a drain nor MPI_Finalize could complete.
[[noreturn]] void EndedByLauncher(int sig);
// Ends every rank of the job at once after printing `message` (MPI_Abort under mpirun, exit
// otherwise): a rank that cannot go on must not leave the others waiting in a collective.
[[noreturn]] void AbortWorld(const std::string& message, int code = 1);
// AbortWorld for a thread other than the one that runs the collectives (serve's signal thread).
// MPI runs at MPI_THREAD_SERIALIZED, so this thread may not call MPI_Abort while that one is
// inside MPI: it sets a flag that the collectives' waiting loop checks between its tests, and
// that thread ends the job; when that thread is outside MPI (loading, computing), this one
// ends it, holding the lock every MPI call takes. One line either way.
[[noreturn]] void AbortWorldFromAnotherThread(const std::string& message, int code);

}  // namespace latent::parallel
