// Parsing of `--ids 1,2,3`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace latent::cli {

// Throws latent::Error naming the bad entry.
std::vector<int32_t> ParseTokenIds(const std::string& text);

}  // namespace latent::cli
