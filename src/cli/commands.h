// Subcommands of the `latent` command. Each registers its flags on the CLI11 app and returns
// the function that runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace latent::cli {

using Runner = std::function<int()>;

Runner RegisterInfo(CLI::App& app);
Runner RegisterLogits(CLI::App& app);
Runner RegisterGenerate(CLI::App& app);

}  // namespace latent::cli
