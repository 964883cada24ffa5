// `latent --version`: pyproject.toml's version (CMake reads it) and the source it was built from.
#pragma once

#include <string>

#include "base/error.h"
#include "engine/rank_check.h"

namespace latent::cli {

inline std::string VersionText() {
  return StrCat("latent ", LATENT_VERSION, " (source ", engine::SourceState(), ")");
}

}  // namespace latent::cli
