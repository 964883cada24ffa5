// latent: serve multi-head latent attention models. This file only dispatches subcommands and
// turns errors into a one-line message and an exit code (base/exit_code.h): 2 for latent::Error
// (bad input: a checkpoint, config, tokenizer, flag or request latent cannot use; the message
// names the file and the problem) and for a command line CLI11 cannot parse (CLI11 prints its own
// message; --help exits 0), 1 for anything else (a bug in latent: a failed LATENT_CHECK, any
// InternalError; or the system refusing memory). A command that ran but could not write its
// standard output (a full disk, a closed pipe) exits 2 too, with
// `latent: error: writing standard output: ...`: a truncated result must not look like success.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/detached_threads.h"
#include "base/error.h"
#include "base/exit_code.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "cli/version.h"
#include "engine/distributed_model.h"
#include "engine/environment_check.h"
#include "parallel/communicator.h"
#include "threads/thread_pool.h"

namespace latent::cli {

std::vector<std::pair<int, Registrar>>& CommandRegistry() {
  static std::vector<std::pair<int, Registrar>> registry;
  return registry;
}

}  // namespace latent::cli

namespace {

int Run(int argc, char** argv);

// A standard stream closed at start (`latent ... >&-`, `<&-`) would be taken by the next file
// latent opens: the command's output written into it, or its input read from it. Holding
// /dev/null there, open the other way (read-only for stdout and stderr, write-only for stdin),
// keeps the descriptor taken and every write or read failing (EBADF): CheckStdout reports the
// writes, and CheckStandardInput refuses stdin to whatever would read it.
void HoldClosedStdStreams() {
  for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int held = open("/dev/null", (fd == STDIN_FILENO ? O_WRONLY : O_RDONLY) | O_CLOEXEC);
    if (held >= 0 && held != fd) {
      dup2(held, fd);
      close(held);
    }
  }
}

// Flushes stdout and throws latent::Error if any write to it failed: a full disk, a closed
// descriptor, a pipe whose reader left while SIGPIPE is ignored.
// The reason is known when the failing write is this flush's; one that failed earlier, while the
// command ran (more output than the buffer), left only the stream's error flag.
void CheckStdout() {
  errno = 0;
  std::cout.flush();  // with stdio in sync: fflush(stdout), where the error shows
  int error = errno;
  const bool flushed = std::fflush(stdout) == 0;
  if (error == 0) error = errno;
  if (flushed && std::cout.good() && !std::ferror(stdout)) return;
  latent::Fail("writing standard output: ",
               error != 0 ? std::strerror(error) : "a write failed (the output is incomplete)");
}

}  // namespace

// Under mpirun (and only then) MPI is initialized first, and no rank may leave the others
// waiting. A command that succeeded finalizes MPI (rank 0's StepBroadcaster has sent the workers
// their stop). One that failed on any rank ends the whole job at once: the others may wait for it
// without a timeout (workers for rank 0's first step, if rank 0 failed before it had a model, e.g.
// serve on a busy port), in a step's collectives (up to LATENT_STEP_TIMEOUT), or in MPI_Finalize,
// which waits for every rank.
int main(int argc, char** argv) {
  HoldClosedStdStreams();
  try {
    latent::parallel::InitWorld(&argc, &argv);
  } catch (const latent::Error& e) {
    std::cerr << "latent: error: " << e.what() << "\n";
    return 2;
  }
  int code = 1;
  std::string error;  // what failed, printed after "latent: "
  try {
    code = Run(argc, argv);
    if (code == 0) CheckStdout();
  } catch (const latent::engine::WorkerFinished&) {
    code = 0;  // a rank > 0 served rank 0's steps to the end
  } catch (...) {
    latent::ExitOutcome outcome = latent::ExitOutcomeOf(std::current_exception());
    code = outcome.code;
    error = std::move(outcome.error);
  }
  if (code != 0 && latent::parallel::World().size() > 1) {
    // AbortWorld prints "latent: error: rank r of n: " before the message.
    if (error.empty()) error = latent::StrCat("the command failed (exit code ", code, ")");
    if (error.starts_with("error: ")) error.erase(0, 7);
    // AbortWorld ends the process without unwinding: what rank 0 wrote to a pipe goes out first.
    std::cout.flush();
    std::fflush(nullptr);
    latent::parallel::AbortWorld(latent::StrCat(error, "; ending the job"), code);
  }
  if (!error.empty()) std::cerr << "latent: " << error << "\n";
  latent::parallel::FinalizeWorld();
  if (latent::DetachedThreadsRunning() > 0) {
    // A grammar compile a shut-down server stopped waiting for: the static destructors must not
    // run under it (base/detached_threads.h).
    std::cout.flush();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}

namespace {

// Commands that run no model: they start no compute threads.
const std::set<std::string> kLightCommands = {"detokenize", "info", "render-chat", "tokenize"};

int Run(int argc, char** argv) {
  CLI::App app{"latent: an inference engine for multi-head latent attention models"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads,
                 latent::StrCat("Compute threads, at most ", latent::threads::kMaxThreads,
                                " (default: LATENT_THREADS, else the CPUs this process may use)"))
      ->check(latent::cli::NonNegative(threads, latent::threads::kMaxThreads));
  app.set_version_flag("--version", latent::cli::VersionText());
  app.fallthrough();  // `latent generate --threads 2 ...` works too
  auto registry = latent::cli::CommandRegistry();
  std::sort(registry.begin(), registry.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<CLI::App*, latent::cli::Runner>> commands;
  for (const auto& [order, registrar] : registry) {
    const size_t before = app.get_subcommands({}).size();
    latent::cli::Runner runner = registrar(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(runner));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::RequiredError& e) {
    // `latent bogus`: CLI11 says only "A subcommand is required"; name the word it did not know.
    const std::vector<std::string> extra = app.remaining();
    if (app.get_subcommands().empty() && !extra.empty() && !extra.front().starts_with("-")) {
      std::string names;
      for (const auto& [sub, run] : commands) {
        names += (names.empty() ? "" : ", ") + sub->get_name();
      }
      std::cerr << "latent: error: unknown command '" << extra.front() << "' (commands: " << names
                << "; see latent --help)\n";
      return 2;
    }
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help, which is not an error); a command line latent cannot
    // use is bad input like any other: exit 2, not CLI11's own codes (105, 106, ...).
    return app.exit(e) == 0 ? 0 : 2;
  }
  // Settings read where they are first used, read now: a bad one (LATENT_THREADS=abc,
  // LATENT_GEMM=bogus, ...) stops the command here, named, not its first request.
  latent::engine::CheckEnvironment();
  for (auto& [sub, run] : commands) {
    if (!sub->parsed()) continue;
    // A command that computes starts the pool now, so that a system refusing its threads fails
    // before a model loads, naming --threads. The others (tokenize, info, ...) run no model and
    // hold no threads; a pool started lazily would fail with the same named error.
    if (!kLightCommands.contains(sub->get_name())) {
      if (threads > 0) latent::threads::SetNumThreads(threads); else latent::threads::NumThreads();
    }
    return run();  // main turns what it throws into the exit code
  }
  return 1;
}

}  // namespace
