// latent: serve multi-head latent attention models. This file only dispatches subcommands and
// turns errors into a one-line message and an exit code: 2 for latent::Error (bad input: a
// checkpoint, config, tokenizer, flag or request latent cannot use; the message names the file
// and the problem), 1 for anything else (a bug in latent, or the system refusing memory).
#include <algorithm>
#include <iostream>
#include <vector>

#include "base/error.h"
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

// Under mpirun (and only then) MPI is initialized first and finalized on every way out, so that
// no rank leaves the others waiting.
int main(int argc, char** argv) {
  try {
    latent::parallel::InitWorld(&argc, &argv);
  } catch (const latent::Error& e) {
    std::cerr << "latent: error: " << e.what() << "\n";
    return 2;
  }
  const int code = Run(argc, argv);
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

  CLI11_PARSE(app, argc, argv);
  if (threads > 0) latent::threads::SetNumThreads(threads);
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const latent::engine::WorkerFinished&) {
    return 0;  // a rank > 0 served rank 0's steps to the end
  } catch (const latent::Error& e) {
    std::cerr << "latent: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "latent: internal error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}

}  // namespace
