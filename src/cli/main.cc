// latent: serve multi-head latent attention models. This file only dispatches subcommands and
// turns errors into a one-line message and an exit code (base/exit_code.h): 2 for latent::Error
// (bad input: a checkpoint, config, tokenizer, flag or request latent cannot use; the message
// names the file and the problem) and for a command line CLI11 cannot parse (CLI11 prints its own
// message; --help exits 0), 1 for anything else (a bug in latent: a failed LATENT_CHECK, any
// InternalError; or the system refusing memory).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/exit_code.h"
#include "cli/commands.h"
#include "engine/distributed_model.h"
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

}  // namespace

// Under mpirun (and only then) MPI is initialized first, and no rank may leave the others
// waiting. A command that succeeded finalizes MPI (rank 0's StepBroadcaster has sent the workers
// their stop). One that failed on any rank ends the whole job at once: the others may wait for it
// without a timeout (workers for rank 0's first step, if rank 0 failed before it had a model, e.g.
// serve on a busy port), in a step's collectives (up to LATENT_STEP_TIMEOUT), or in MPI_Finalize,
// which waits for every rank.
int main(int argc, char** argv) {
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
  return code;
}

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"latent: an inference engine for multi-head latent attention models"};
  app.require_subcommand(1);
  int threads = 0;
  app.add_option("--threads", threads,
                 "Compute threads (default: LATENT_THREADS, else the CPUs this process may use)")
      ->check(CLI::NonNegativeNumber);
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
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help, which is not an error); a command line latent cannot
    // use is bad input like any other: exit 2, not CLI11's own codes (105, 106, ...).
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (threads > 0) latent::threads::SetNumThreads(threads);
  for (auto& [sub, run] : commands)
    if (sub->parsed()) return run();  // main turns what it throws into the exit code
  return 1;
}

}  // namespace
