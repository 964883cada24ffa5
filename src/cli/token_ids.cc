#include "cli/token_ids.h"

#include <charconv>

#include "base/error.h"

namespace latent::cli {

std::vector<int32_t> ParseTokenIds(const std::string& text) {
  std::vector<int32_t> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    int32_t id = 0;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || id < 0) {
      Fail("--ids: '", item, "' is not a non-negative token id (expected e.g. 1,2,3)");
    }
    ids.push_back(id);
    start = end + 1;
  }
  if (ids.empty()) Fail("--ids: no token ids given");
  return ids;
}

}  // namespace latent::cli
