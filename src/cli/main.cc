// latent: serve multi-head latent attention models. This file only dispatches subcommands and
// turns latent::Error into a one-line message and exit code 1.
#include <iostream>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"latent: an inference engine for multi-head latent attention models"};
  app.require_subcommand(1);
  std::vector<std::pair<CLI::App*, latent::cli::Runner>> commands;
  auto add = [&](latent::cli::Runner (*reg)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    latent::cli::Runner runner = reg(app);
    commands.emplace_back(app.get_subcommands({})[before], std::move(runner));
  };
  add(latent::cli::RegisterInfo);
  add(latent::cli::RegisterLogits);
  add(latent::cli::RegisterGenerate);

  CLI11_PARSE(app, argc, argv);
  try {
    for (auto& [sub, run] : commands)
      if (sub->parsed()) return run();
  } catch (const latent::Error& e) {
    std::cerr << "latent: error: " << e.what() << "\n";
    return 1;
  }
  return 1;
}
