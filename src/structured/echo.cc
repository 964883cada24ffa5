#include "structured/echo.h"

namespace latent::structured {
namespace {

// At most this much of a value the caller sent goes into an error.
constexpr size_t kMaxEchoed = 200;

}  // namespace

std::string Truncated(std::string text) {
  if (text.size() <= kMaxEchoed) return text;
  size_t cut = kMaxEchoed;
  // Not inside a UTF-8 character: the message must stay valid text.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

std::string Echo(const nlohmann::ordered_json& value) {
  return Truncated(
      value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

}  // namespace latent::structured
