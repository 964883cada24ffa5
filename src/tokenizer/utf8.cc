#include "tokenizer/utf8.h"

namespace latent::tokenizer {

size_t ValidUtf8CharLength(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
  const uint8_t c = b(0);
  if (c < 0x80) return 1;
  size_t len;
  uint32_t cp;
  if ((c & 0xe0) == 0xc0) {
    len = 2;
    cp = c & 0x1f;
  } else if ((c & 0xf0) == 0xe0) {
    len = 3;
    cp = c & 0x0f;
  } else if ((c & 0xf8) == 0xf0) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() < len) return 0;
  for (size_t i = 1; i < len; ++i) {
    if ((b(i) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i) & 0x3f);
  }
  static constexpr uint32_t kMinForLength[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMinForLength[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

size_t CompleteUtf8Prefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t len = ValidUtf8CharLength(s.substr(pos));
    if (len == 0) break;
    pos += len;
  }
  return pos;
}

size_t Utf8CharCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
  return n;
}

size_t IncompleteUtf8Suffix(std::string_view s) {
  // The last byte that is not a continuation byte starts the last unit (a lead byte always does,
  // even after an unfinished sequence); only a lead of a longer sequence can be unfinished.
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const auto lead = static_cast<uint8_t>(s[s.size() - k]);
    if ((lead & 0xc0) == 0x80) continue;
    // The second byte's range excludes overlong forms, surrogates and code points above
    // U+10FFFF.
    size_t need;
    uint8_t lo = 0x80, hi = 0xbf;
    if (lead >= 0xc2 && lead <= 0xdf) {
      need = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      need = 3;
      if (lead == 0xe0) lo = 0xa0;
      if (lead == 0xed) hi = 0x9f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      need = 4;
      if (lead == 0xf0) lo = 0x90;
      if (lead == 0xf4) hi = 0x8f;
    } else {
      return 0;  // ASCII, or a byte that never starts a character
    }
    if (k >= need) return 0;
    for (size_t i = 1; i < k; ++i) {
      const auto c = static_cast<uint8_t>(s[s.size() - k + i]);
      if (i == 1 ? (c < lo || c > hi) : (c & 0xc0) != 0x80) return 0;  // already invalid
    }
    return k;
  }
  return 0;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

}  // namespace latent::tokenizer
