#include "tokenizer/chat_template/pystr.h"

#include <unicode/uchar.h>
#include <unicode/uniset.h>

#include <algorithm>

#include "base/error.h"

namespace latent::tokenizer::jinja {

size_t CharLen(std::string_view s) {
  if (s.empty()) return 0;
  const auto b = static_cast<unsigned char>(s[0]);
  size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (n > s.size()) return 1;
  for (size_t i = 1; i < n; ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) return 1;
  }
  return n;
}

namespace {

char32_t DecodeOne(std::string_view s, size_t* len) {
  *len = CharLen(s);
  const auto b = static_cast<unsigned char>(s[0]);
  if (b < 0x80) return b;
  if (*len == 1) return 0xFFFD;
  char32_t c = b & (0xFF >> (*len + 1));
  for (size_t i = 1; i < *len; ++i) c = (c << 6) | (static_cast<unsigned char>(s[i]) & 0x3F);
  return c;
}

}  // namespace

std::u32string Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    out.push_back(DecodeOne(s.substr(i), &len));
    i += len;
  }
  return out;
}

void AppendCodePoint(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) AppendCodePoint(c, out);
  return out;
}

size_t CodePointCount(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += CharLen(s.substr(i))) ++n;
  return n;
}

size_t ByteOffset(std::string_view s, int64_t index) {
  size_t pos = 0;
  for (int64_t i = 0; i < index && pos < s.size(); ++i) pos += CharLen(s.substr(pos));
  return pos;
}

bool IsSpace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool IsLineBreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
         c == 0x85 || c == 0x2028 || c == 0x2029;
}

namespace {

// Letters with simple one-to-one case pairs in the covered blocks.
bool LatinExtAPair(char32_t c) {
  // U+0100..U+017F alternate upper/lower, except the ranges that alternate the other way.
  if (c >= 0x100 && c <= 0x137) return true;
  if (c >= 0x139 && c <= 0x148) return true;
  if (c >= 0x14A && c <= 0x177) return true;
  if (c >= 0x179 && c <= 0x17E) return true;
  return false;
}

bool LatinExtAUpper(char32_t c) {
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return c % 2 == 1;
  return c % 2 == 0;
}

}  // namespace

bool IsUpper(char32_t c) {
  if (c < 0x80) return c >= 'A' && c <= 'Z';
  if (c >= 0xC0 && c <= 0xDE) return c != 0xD7;
  if (LatinExtAPair(c)) return LatinExtAUpper(c);
  if (c == 0x178) return true;
  if (c >= 0x391 && c <= 0x3A9) return c != 0x3A2;
  if (c >= 0x400 && c <= 0x42F) return true;
  if (c >= 0xFF21 && c <= 0xFF3A) return true;
  return false;
}

bool IsLower(char32_t c) {
  if (c < 0x80) return c >= 'a' && c <= 'z';
  if (c == 0xAA || c == 0xB5 || c == 0xBA) return true;
  if (c >= 0xDF && c <= 0xFF) return c != 0xF7;
  if (LatinExtAPair(c)) return !LatinExtAUpper(c);
  if (c == 0x138 || c == 0x149 || c == 0x17F) return true;
  if (c >= 0x3AC && c <= 0x3CE) return true;
  if (c >= 0x430 && c <= 0x45F) return true;
  if (c >= 0xFF41 && c <= 0xFF5A) return true;
  return false;
}

char32_t ToUpper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0xB5) return 0x39C;
  if (LatinExtAPair(c) && !LatinExtAUpper(c)) return c - 1;
  if (c >= 0x3B1 && c <= 0x3C9) return c == 0x3C2 ? 0x3A3 : c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return c;
}

char32_t ToLower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (LatinExtAPair(c) && LatinExtAUpper(c)) return c + 1;
  if (c == 0x130) return 'i';
  if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

bool IsDigit(char32_t c) { return (c >= '0' && c <= '9') || (c >= 0xFF10 && c <= 0xFF19); }

bool IsAlpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (IsUpper(c) || IsLower(c)) return true;
  // Letters without case: CJK, kana, hangul, and the rest of the letter blocks, roughly.
  return (c >= 0x3040 && c <= 0x30FF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xAC00 && c <= 0xD7A3) ||
         (c >= 0x0600 && c <= 0x06FF && !(c >= 0x0660 && c <= 0x0669)) ||
         (c >= 0x05D0 && c <= 0x05EA) || (c >= 0x0E01 && c <= 0x0E30) ||
         (c >= 0x0900 && c <= 0x0939);
}

namespace {

template <typename F>
std::string MapChars(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t c = DecodeOne(s.substr(i), &len);
    if (len == 1 && static_cast<unsigned char>(s[i]) >= 0x80) {
      out.push_back(s[i]);  // stray byte: keep as is
    } else {
      f(c, out);
    }
    i += len;
  }
  return out;
}

void AppendUpper(char32_t c, std::string& out) {
  if (c == 0xDF) {
    out += "SS";  // Python's full case mapping of ß
  } else {
    AppendCodePoint(ToUpper(c), out);
  }
}

}  // namespace

namespace {

bool Cased(char32_t c) { return IsUpper(c) || IsLower(c); }

// Python lowercases a capital sigma that ends a word (a cased letter before it, none after) to
// the final form.
void AppendLowerAt(const std::u32string& u, size_t i, std::string& out) {
  if (u[i] == 0x3A3) {
    const bool after_cased = i > 0 && Cased(u[i - 1]);
    const bool before_cased = i + 1 < u.size() && Cased(u[i + 1]);
    AppendCodePoint(after_cased && !before_cased ? 0x3C2 : 0x3C3, out);
  } else {
    AppendCodePoint(ToLower(u[i]), out);
  }
}

// Title case: like upper case, except that ß becomes "Ss".
void AppendTitle(char32_t c, std::string& out) {
  if (c == 0xDF) {
    out += "Ss";
  } else {
    AppendCodePoint(ToUpper(c), out);
  }
}

}  // namespace

std::string Upper(std::string_view s) {
  return MapChars(s, [](char32_t c, std::string& out) { AppendUpper(c, out); });
}

std::string Lower(std::string_view s) {
  std::u32string u = Decode(s);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < u.size(); ++i) AppendLowerAt(u, i, out);
  return out;
}

std::string SwapCase(std::string_view s) {
  std::u32string u = Decode(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (IsUpper(u[i])) {
      AppendLowerAt(u, i, out);
    } else if (IsLower(u[i])) {
      AppendUpper(u[i], out);
    } else {
      AppendCodePoint(u[i], out);
    }
  }
  return out;
}

std::string Capitalize(std::string_view s) {
  std::u32string u = Decode(s);
  std::string out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      AppendTitle(u[i], out);
    } else {
      AppendLowerAt(u, i, out);
    }
  }
  return out;
}

std::string Title(std::string_view s) {
  std::u32string u = Decode(s);
  std::string out;
  bool previous_cased = false;
  for (size_t i = 0; i < u.size(); ++i) {
    if (previous_cased) {
      AppendLowerAt(u, i, out);
    } else {
      AppendTitle(u[i], out);
    }
    previous_cased = Cased(u[i]);
  }
  return out;
}

std::string Strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                  bool right) {
  std::u32string set;
  if (chars) set = Decode(*chars);
  auto strip = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : IsSpace(c); };
  std::u32string u = Decode(s);
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip(u[e - 1])) --e;
  }
  return Encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> Split(std::string_view s, const std::optional<std::string>& sep,
                               int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    std::u32string u = Decode(s);
    size_t i = 0;
    while (true) {
      while (i < u.size() && IsSpace(u[i])) ++i;
      if (i == u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Encode(std::u32string_view(u).substr(i)));
        break;
      }
      size_t j = i;
      while (j < u.size() && !IsSpace(u[j])) ++j;
      out.push_back(Encode(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t at = s.find(*sep, pos);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(pos, at - pos));
    pos = at + sep->size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::vector<std::string> RSplit(std::string_view s, const std::optional<std::string>& sep,
                                int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    std::u32string u = Decode(s);
    size_t e = u.size();
    while (true) {
      while (e > 0 && IsSpace(u[e - 1])) --e;
      if (e == 0) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(Encode(std::u32string_view(u).substr(0, e)));
        break;
      }
      size_t b = e;
      while (b > 0 && !IsSpace(u[b - 1])) --b;
      out.push_back(Encode(std::u32string_view(u).substr(b, e - b)));
      e = b;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  size_t end = s.size();
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t at = s.rfind(*sep, end - sep->size());
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
    end = at;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> SplitLines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  std::u32string u = Decode(s);
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    if (!IsLineBreak(u[i])) continue;
    size_t brk = 1;
    if (u[i] == '\r' && i + 1 < u.size() && u[i + 1] == '\n') brk = 2;
    size_t end = keepends ? i + brk : i;
    out.push_back(Encode(std::u32string_view(u).substr(start, end - start)));
    i += brk - 1;
    start = i + 1;
  }
  if (start < u.size()) out.push_back(Encode(std::u32string_view(u).substr(start)));
  return out;
}

std::string Replace(std::string_view s, std::string_view old, std::string_view repl,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    int64_t done = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i == s.size()) break;
      size_t len = CharLen(s.substr(i));
      out += s.substr(i, len);
      i += len;
    }
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t at = s.find(old, pos);
    if (at == std::string_view::npos) break;
    out += s.substr(pos, at - pos);
    out += repl;
    pos = at + old.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

namespace {

// Python slice bounds for s[start:end] over `len` code points.
void SliceBounds(int64_t len, std::optional<int64_t> start, std::optional<int64_t> end, int64_t* b,
                 int64_t* e) {
  *b = start.value_or(0);
  *e = end.value_or(len);
  if (*b < 0) *b = std::max<int64_t>(0, *b + len);
  if (*e < 0) *e = std::max<int64_t>(0, *e + len);
  *e = std::min(*e, len);
}

}  // namespace

int64_t Find(std::string_view s, std::string_view sub, std::optional<int64_t> start,
             std::optional<int64_t> end, bool reverse) {
  std::u32string u = Decode(s), v = Decode(sub);
  int64_t b, e;
  SliceBounds(static_cast<int64_t>(u.size()), start, end, &b, &e);
  if (b > static_cast<int64_t>(u.size()) || e - b < static_cast<int64_t>(v.size())) return -1;
  std::u32string_view hay = std::u32string_view(u).substr(b, e - b);
  size_t at = reverse ? hay.rfind(v) : hay.find(v);
  return at == std::u32string_view::npos ? -1 : b + static_cast<int64_t>(at);
}

int64_t Count(std::string_view s, std::string_view sub, std::optional<int64_t> start,
              std::optional<int64_t> end) {
  std::u32string u = Decode(s), v = Decode(sub);
  int64_t b, e;
  SliceBounds(static_cast<int64_t>(u.size()), start, end, &b, &e);
  if (b > static_cast<int64_t>(u.size()) || e < b) return 0;
  if (v.empty()) return e - b + 1;
  std::u32string_view hay = std::u32string_view(u).substr(b, e - b);
  int64_t n = 0;
  for (size_t pos = hay.find(v); pos != std::u32string_view::npos; pos = hay.find(v, pos)) {
    ++n;
    pos += v.size();
  }
  return n;
}

std::string Pad(std::string_view s, int64_t width, std::string_view fill, int align) {
  int64_t len = static_cast<int64_t>(CodePointCount(s));
  if (width <= len) return std::string(s);
  int64_t total = width - len, left;
  if (align < 0) {
    left = 0;
  } else if (align > 0) {
    left = total;
  } else {
    // Python's center puts the extra space on the right, unless the width is odd.
    left = total / 2 + (total & width & 1);
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

namespace {

// Python's str.isprintable, which repr() follows: a character is printable unless its general
// category is Cc, Cf, Cs, Co, Cn, Zl, Zp, or Zs other than the ASCII space. transformers renders
// templates under CPython 3.11, whose unicodedata is Unicode 14.0, so characters assigned later
// count as unassigned (Cn) there; ICU's newer data is cut back to 14.0 by age.
bool Printable(char32_t c) {
  if (c < 0x7F) return c >= 0x20;
  static const icu::UnicodeSet* const age14 = [] {
    UErrorCode ec = U_ZERO_ERROR;
    auto* set = new icu::UnicodeSet(icu::UnicodeString(u"[:age=14.0:]"), ec);
    if (U_FAILURE(ec)) Fail("chat template: ICU Unicode 14.0 set unavailable: ", u_errorName(ec));
    set->freeze();
    return set;
  }();
  const auto u = static_cast<UChar32>(c);
  if (!age14->contains(u)) return false;
  constexpr uint32_t kNonPrintable = U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CS_MASK | U_GC_CO_MASK |
                                     U_GC_CN_MASK | U_GC_ZL_MASK | U_GC_ZP_MASK | U_GC_ZS_MASK;
  return (U_GET_GC_MASK(u) & kNonPrintable) == 0;
}

}  // namespace

std::string StrRepr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  static const char kHex[] = "0123456789abcdef";
  for (char32_t c : Decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (Printable(c)) {
      AppendCodePoint(c, out);
    } else {
      int digits = c < 0x100 ? 2 : c < 0x10000 ? 4 : 8;
      out += digits == 2 ? "\\x" : digits == 4 ? "\\u" : "\\U";
      for (int i = digits - 1; i >= 0; --i) out.push_back(kHex[(c >> (4 * i)) & 0xF]);
    }
  }
  out.push_back(quote);
  return out;
}

bool ValidUtf8(std::string_view s, size_t* bad_offset) {
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t len = CharLen(s.substr(i));
    bool ok = b < 0x80 || len > 1;
    if (ok && len > 1) {
      size_t l;
      char32_t c = DecodeOne(s.substr(i), &l);
      // Overlong forms, surrogates and values past U+10FFFF.
      const char32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
      ok = c >= min && c <= 0x10FFFF && !(c >= 0xD800 && c <= 0xDFFF);
    }
    if (!ok) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

}  // namespace latent::tokenizer::jinja
