// A bound on how deep JSON text from a caller nests, checked on the text before it is parsed.
// nlohmann's parser keeps its own stack, but copying, comparing and dumping a value recurse once
// per level, so a value nested some ten thousand levels deep overflows the stack wherever it is
// next copied. Callers check the text they are given first and refuse it with their own error.
#pragma once

#include <string_view>

namespace latent {

// How deep a request's JSON may nest: the server's whole body, and JSON text a request carries in
// a string (tool-call arguments, a structured_outputs.json schema), which the body's check cannot
// see into.
inline constexpr int kMaxJsonDepth = 64;

// Follows a JSON string's characters after its opening quote, so that scanners of JSON text
// can skip strings without parsing them: Closes(c) is true for the unescaped closing quote.
class JsonStringScan {
 public:
  bool Closes(char c) {
    if (escaped_) {
      escaped_ = false;
      return false;
    }
    escaped_ = c == '\\';
    return c == '"';
  }

 private:
  bool escaped_ = false;
};

// Whether `text` nests arrays and objects more than `max_depth` levels deep. Brackets inside
// strings do not count; the text need not be valid JSON (the parser judges that after).
bool JsonNestsDeeperThan(std::string_view text, int max_depth);

}  // namespace latent
