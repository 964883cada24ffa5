// Subcommands of the `latent` command. Each command file registers itself with
// LATENT_COMMAND(order, RegisterFn): RegisterFn adds its flags to the CLI11 app and returns the
// function that runs it. `order` fixes the order of --help.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <utility>
#include <vector>

namespace latent::cli {

using Runner = std::function<int()>;
using Registrar = Runner (*)(CLI::App&);

std::vector<std::pair<int, Registrar>>& CommandRegistry();

struct CommandRegistration {
  CommandRegistration(int order, Registrar registrar) {
    CommandRegistry().emplace_back(order, registrar);
  }
};

}  // namespace latent::cli

#define LATENT_COMMAND(order, registrar) \
  static const ::latent::cli::CommandRegistration registration_##registrar(order, registrar)
