#include "engine/injected_check.h"

#include <cstdlib>
#include <exception>
#include <string>

#include "base/error.h"

namespace latent::engine {

std::optional<InjectedCheck> ReadInjectedCheck() {
  const char* value = std::getenv("LATENT_TEST_FAIL_CHECK");
  if (value == nullptr || *value == '\0') return std::nullopt;
  const std::string text = value;
  const size_t colon = text.find(':');
  try {
    size_t rank_end = 0, forward_end = 0;
    if (colon != std::string::npos) {
      const int rank = std::stoi(text.substr(0, colon), &rank_end);
      const int64_t forward = std::stoll(text.substr(colon + 1), &forward_end);
      if (rank_end == colon && forward_end == text.size() - colon - 1 && rank >= 0 &&
          forward >= 1) {
        return InjectedCheck{rank, forward};
      }
    }
  } catch (const std::exception&) {  // not a number, or out of range: refused below
  }
  Fail("LATENT_TEST_FAIL_CHECK: '", text, "' is not RANK:FORWARD (a rank >= 0, a forward >= 1)");
}

}  // namespace latent::engine
