// The MPI communicator: MPI_COMM_WORLD with errors returned (MPI_ERRORS_RETURN), every collective
// non-blocking and waited for with a deadline, so that a rank that died or hangs ends the job with
// a message naming what did not complete instead of a hang.
#include <mpi.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "parallel/mpi_world.h"

namespace latent::parallel {
namespace {

using Clock = std::chrono::steady_clock;

// MPI is initialised at MPI_THREAD_SERIALIZED: threads may call it, never two at once. Every MPI
// call of this file holds this lock for that one call (never across a wait), so that another
// thread (serve's signal thread) may end the job while the engine's thread waits in a
// collective: RequestMpiAbort.
std::mutex mpi_mutex;

template <typename Call>
int Locked(Call call) {
  std::lock_guard<std::mutex> lock(mpi_mutex);
  return call();
}

// An abort another thread asked for (RequestMpiAbort): its line and exit code, written before
// abort_requested is set. The waiting loop of the engine's thread checks the flag between tests.
std::atomic<bool> abort_requested{false};
std::string requested_line;
int requested_code = 1;

// Prints the requested line and ends the job; on whichever thread sees the request first (the
// lock keeps the other out of MPI until the process ends).
[[noreturn]] void AbortAsRequested() {
  std::lock_guard<std::mutex> lock(mpi_mutex);
  std::fputs(requested_line.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, requested_code);
  std::_Exit(requested_code);
}

// How often a wait without a timeout (the start-up checks) says it still waits.
constexpr double kNoticeSeconds = 60;
// The point-to-point messages by which ranks tell rank 0 they reached a start-up check.
constexpr int kArrivalTag = 1;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(double timeout_s) : timeout_s_(timeout_s) {
    std::lock_guard<std::mutex> lock(mpi_mutex);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    std::lock_guard<std::mutex> lock(mpi_mutex);
    MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // MPI counts are ints: a step too large for one (a --max-batch-tokens x hidden size past 2^31
  // floats) is refused by name instead of wrapping. Every rank moves the same counts, so every
  // rank fails at the same point.
  static int Count(int64_t n, const char* what) {
    if (n > std::numeric_limits<int>::max()) {
      Fail(what, " of ", n, " elements exceeds what one MPI call moves (2^31 - 1): lower "
           "--max-batch-tokens");
    }
    return static_cast<int>(n);
  }

  void Broadcast(void* data, int64_t bytes, bool wait_forever) override {
    const auto start = Clock::now();
    MPI_Request request;
    const int count = Count(bytes, "a step broadcast");
    Check(Locked([&] { return MPI_Ibcast(data, count, MPI_BYTE, 0, comm_, &request); }),
          "broadcast");
    Wait(&request, "the step broadcast", wait_forever && rank_ != 0);
    moved_ += rank_ == 0 ? bytes * (size_ - 1) : bytes;
    Took(start);
  }

  // Reduce-scatter then all-gather, both by hand so the order of the additions is fixed: rank r
  // sums slice r of every rank's data in rank order, then every rank gathers the summed slices.
  // Per rank this sends and receives 2 (N-1)/N of the data (an all-gather of the whole would
  // move (N-1) times the data).
  void SumInRankOrder(float* data, int64_t n) override {
    if (n == 0) return;
    Count(n, "the MoE partial sums");  // so that every slice's count and offset fit too
    const auto start = Clock::now();
    std::vector<int> counts(size_), displs(size_);
    for (int r = 0; r < size_; ++r) {
      const int64_t lo = n * r / size_, hi = n * (r + 1) / size_;
      counts[r] = static_cast<int>(hi - lo);
      displs[r] = static_cast<int>(lo);
    }
    const int mine = counts[rank_];
    // slices [N, mine]: every rank's slice `rank_`.
    slices_.resize(static_cast<size_t>(size_) * mine);
    std::vector<int> recv_counts(size_, mine), recv_displs(size_);
    for (int r = 0; r < size_; ++r) recv_displs[r] = r * mine;
    MPI_Request request;
    Check(Locked([&] {
            return MPI_Ialltoallv(data, counts.data(), displs.data(), MPI_FLOAT, slices_.data(),
                                  recv_counts.data(), recv_displs.data(), MPI_FLOAT, comm_,
                                  &request);
          }),
          "all-to-all");
    Wait(&request, "the MoE partial sums (all-to-all)", false);
    float* sum = data + displs[rank_];
    for (int i = 0; i < mine; ++i) {
      float s = slices_[i];
      for (int r = 1; r < size_; ++r) s += slices_[static_cast<size_t>(r) * mine + i];
      sum[i] = s;
    }
    Check(Locked([&] {
            return MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, data, counts.data(), displs.data(),
                                   MPI_FLOAT, comm_, &request);
          }),
          "all-gather");
    Wait(&request, "the MoE partial sums (all-gather)", false);
    const int64_t others = n - mine;
    moved_ += 2 * (others * static_cast<int64_t>(sizeof(float)) +
                   static_cast<int64_t>(mine) * (size_ - 1) * static_cast<int64_t>(sizeof(float)));
    Took(start);
  }

  int64_t bytes_moved() const override { return moved_; }
  double seconds_in_collectives() const override { return seconds_; }

  void AllGather(const double* mine, int64_t n, double* all) override {
    MPI_Request request;
    const int count = Count(n, "the step timing");
    Check(Locked([&] {
            return MPI_Iallgather(mine, count, MPI_DOUBLE, all, count, MPI_DOUBLE, comm_, &request);
          }),
          "all-gather");
    Wait(&request, "the step timing (all-gather)", false);
  }

  void AllGatherBytes(const void* mine, int64_t bytes, void* all, bool wait_forever) override {
    MPI_Request request;
    const int count = Count(bytes, "a start-up check");
    // Without a timeout, rank 0 learns which ranks have arrived (each sends it a byte first), so
    // that its log names the ranks it still waits for (a rank stuck loading, on a hung file
    // system, would otherwise leave every rank waiting silently).
    std::vector<MPI_Request> arrivals;  // rank 0: [size] (its own null); others: [1]
    char arrived = 1;
    std::vector<char> arrived_from(size_);
    if (wait_forever && rank_ == 0) {
      arrivals.assign(size_, MPI_REQUEST_NULL);
      for (int r = 1; r < size_; ++r) {
        Check(Locked([&] {
                return MPI_Irecv(&arrived_from[r], 1, MPI_BYTE, r, kArrivalTag, comm_,
                                 &arrivals[r]);
              }),
              "receive");
      }
    } else if (wait_forever) {
      arrivals.assign(1, MPI_REQUEST_NULL);
      Check(Locked([&] {
              return MPI_Isend(&arrived, 1, MPI_BYTE, 0, kArrivalTag, comm_, &arrivals[0]);
            }),
            "send");
    }
    Check(Locked([&] {
            return MPI_Iallgather(mine, count, MPI_BYTE, all, count, MPI_BYTE, comm_, &request);
          }),
          "all-gather");
    Wait(&request, "the ranks' start-up check (all-gather)", wait_forever,
         wait_forever ? &arrivals : nullptr);
    // Every rank has arrived (its byte was sent before its all-gather began): these complete.
    for (MPI_Request& arrival : arrivals) WaitShort(&arrival, "the ranks' start-up check");
  }

 private:
  void Took(Clock::time_point start) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    seconds_ += seconds;
    if (calls_ != nullptr) calls_->push_back(seconds);
  }

  void Check(int code, const char* what) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    Locked([&] { return MPI_Error_string(code, text, &length); });
    AbortWorld(std::string("MPI ") + what + " failed: " + std::string(text, length) +
               " (a rank has probably died)");
  }

  // Drives `request` to completion, yielding the CPU between tests (ranks may share cores:
  // mpirun --oversubscribe), after a few milliseconds sleeping a little so an idle worker costs
  // nothing. Past the step timeout, ends the job, unless `forever` (a worker idle between steps,
  // the start-up checks). With `arrivals` (the start-up checks: AllGatherBytes), says every
  // kNoticeSeconds (or the step timeout, if shorter) that this rank still waits; rank 0 names
  // the ranks whose arrivals have not completed.
  void Wait(MPI_Request* request, const char* what, bool forever,
            std::vector<MPI_Request>* arrivals = nullptr) {
    const auto start = Clock::now();
    const double notice_s = std::min(kNoticeSeconds, timeout_s_);
    double next_notice = notice_s;
    for (int64_t i = 0;; ++i) {
      int done = 0;
      Check(Locked([&] { return MPI_Test(request, &done, MPI_STATUS_IGNORE); }), what);
      if (done) return;
      if (abort_requested.load()) AbortAsRequested();
      if (i < 2000) {
        sched_yield();
        continue;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(i < 20000 ? 20 : 500));
      if ((i & 63) != 0) continue;
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (arrivals != nullptr && waited >= next_notice) {
        next_notice += notice_s;
        StillWaiting(waited, arrivals);
      }
      if (!forever && waited > timeout_s_) {
        char message[256];
        std::snprintf(message, sizeof message,
                      "%s did not complete within the step timeout (%.0f s, LATENT_STEP_TIMEOUT): "
                      "another rank has died or hangs; ending the job",
                      what, timeout_s_);
        AbortWorld(message, 3);
      }
    }
  }

  // "latent: rank 0 of 4: still waiting for rank(s) 2, 3 at the start-up check (60 s): ...".
  void StillWaiting(double waited, std::vector<MPI_Request>* arrivals) {
    std::string missing;
    if (rank_ == 0 && arrivals != nullptr) {
      for (int r = 1; r < static_cast<int>(arrivals->size()); ++r) {
        int done = 0;
        MPI_Request* arrival = &(*arrivals)[r];
        Check(Locked([&] { return MPI_Test(arrival, &done, MPI_STATUS_IGNORE); }),
              "the ranks' start-up check");
        if (!done) missing += StrCat(missing.empty() ? "" : ", ", r);
      }
    }
    const std::string whom = missing.empty() ? "the other ranks" : "rank(s) " + missing;
    std::fprintf(stderr,
                 "latent: rank %d of %d: still waiting for %s at the start-up check (%.0f s): a "
                 "rank that has not arrived is still loading, or hangs (a stuck file system?); "
                 "this wait has no timeout\n",
                 rank_, size_, whom.c_str(), waited);
    std::fflush(stderr);
  }

  // Completes `request`, which needs no other rank to act any more.
  void WaitShort(MPI_Request* request, const char* what) {
    for (;;) {
      int done = 0;
      Check(Locked([&] { return MPI_Test(request, &done, MPI_STATUS_IGNORE); }), what);
      if (done) return;
      sched_yield();
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  std::vector<float> slices_;
  int64_t moved_ = 0;
  double seconds_ = 0;
};

// mpirun ends the other ranks with SIGTERM when one exits abnormally (or the job is
// interrupted): say so on this rank's stderr before going, so rank 0's log tells why it ended. A
// SIGTERM from anyone else (an operator's kill) says that instead, with the sender's pid: the
// other ranks then get mpirun's. Both texts are made at start: a handler may not allocate.
char launcher_message[200];
size_t launcher_message_length = 0;
char other_message[120];  // followed by the sender's pid and other_message_end
size_t other_message_length = 0;
constexpr char kOtherMessageEnd[] = ": ending this rank (mpirun then ends the others)\n";

void OnSigterm(int, siginfo_t* info, void*) {
  if (info == nullptr || SentByLauncher(info->si_pid)) {
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, launcher_message, launcher_message_length);
  } else {
    char pid[24];
    int at = sizeof pid;
    for (long value = info->si_pid; at > 0 && (value > 0 || at == sizeof pid); value /= 10) {
      pid[--at] = static_cast<char>('0' + value % 10);
    }
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, other_message, other_message_length);
    n = write(STDERR_FILENO, pid + at, sizeof pid - at);
    n = write(STDERR_FILENO, kOtherMessageEnd, sizeof kOtherMessageEnd - 1);
  }
  _exit(128 + SIGTERM);
}

}  // namespace

std::unique_ptr<Communicator> MakeMpiWorld(int* argc, char*** argv) {
  // MPI's own threads start blocking SIGINT and SIGTERM, so that these reach latent's threads
  // (serve's signal thread drains on them; elsewhere OnSigterm below), never an MPI thread's
  // default action.
  sigset_t blocked, previous;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
  int provided = 0;
  const int init = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (init != MPI_SUCCESS) Fail("MPI_Init_thread failed");
  if (provided < MPI_THREAD_SERIALIZED) {
    Fail("this MPI library does not support MPI_THREAD_SERIALIZED (the engine calls MPI from its "
         "own thread)");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  double timeout_s = 300;
  if (const char* value = std::getenv("LATENT_STEP_TIMEOUT"); value != nullptr && *value != '\0') {
    char* end = nullptr;
    timeout_s = std::strtod(value, &end);
    if (end == value || *end != '\0' || !(timeout_s > 0)) {
      Fail("LATENT_STEP_TIMEOUT must be a positive number of seconds, not '", value, "'");
    }
  }
  auto world = std::make_unique<MpiCommunicator>(timeout_s);
  const std::string launcher = LauncherSignalLine(world->rank(), world->size(), SIGTERM) + "\n";
  launcher_message_length = std::min(sizeof launcher_message - 1, launcher.size());
  std::memcpy(launcher_message, launcher.data(), launcher_message_length);
  const int length = std::snprintf(other_message, sizeof other_message,
                                   "latent: error: rank %d of %d: received SIGTERM from pid ",
                                   world->rank(), world->size());
  other_message_length = std::min(sizeof other_message - 1, static_cast<size_t>(length));
  struct sigaction action = {};
  action.sa_sigaction = OnSigterm;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  std::fprintf(stderr, "latent: rank %d of %d (pid %d)\n", world->rank(), world->size(),
               static_cast<int>(getpid()));
  return world;
}

void FinalizeMpiWorld() {
  std::lock_guard<std::mutex> lock(mpi_mutex);
  MPI_Finalize();
}

void RequestMpiAbort(const std::string& line, int code) {
  static std::atomic<bool> requested{false};
  if (!requested.exchange(true)) {
    requested_line = line;
    requested_code = code;
    abort_requested.store(true);
  }
  // Here when the engine's thread is outside MPI (loading, computing); else it takes the request
  // at its next test and this waits for the lock until the process ends.
  AbortAsRequested();
}

void AbortMpiWorld(int code) {
  std::lock_guard<std::mutex> lock(mpi_mutex);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace latent::parallel
