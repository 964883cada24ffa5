#include "base/json_depth.h"

namespace latent {

bool JsonNestsDeeperThan(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  JsonStringScan string;
  for (char c : text) {
    if (in_string) {
      in_string = !string.Closes(c);
      continue;
    }
    if (c == '"') {
      in_string = true;
      string = JsonStringScan();
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;  // never below 0: a stray closer must not lend depth to later openers
    }
  }
  return false;
}

}  // namespace latent
