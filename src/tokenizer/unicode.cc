#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/uniset.h>

#include <cstring>
#include <memory>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace latent::tokenizer {

uint32_t NextCodePoint(std::string_view s, size_t& pos) {
  const auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<uint8_t>(s[pos + i])); };
  const uint32_t c = b(0);
  uint32_t cp;
  if (c < 0x80) {
    cp = c;
    pos += 1;
  } else if (c < 0xe0) {
    cp = ((c & 0x1f) << 6) | (b(1) & 0x3f);
    pos += 2;
  } else if (c < 0xf0) {
    cp = ((c & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f);
    pos += 3;
  } else {
    cp = ((c & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f);
    pos += 4;
  }
  return cp;
}

namespace {

// Length of the maximal prefix of s[pos..] that could start a valid character (at least 1): the
// unit the Unicode "maximal subpart" practice replaces with one U+FFFD.
size_t MaximalSubpart(std::string_view s, size_t pos) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[pos + i]); };
  const uint8_t lead = b(0);
  size_t need;
  uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (lead >= 0xc2 && lead <= 0xdf) {
    need = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    need = 3;
    if (lead == 0xe0) lo = 0xa0;  // no overlong forms
    if (lead == 0xed) hi = 0x9f;  // no surrogates
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    need = 4;
    if (lead == 0xf0) lo = 0x90;
    if (lead == 0xf4) hi = 0x8f;  // nothing above U+10FFFF
  } else {
    return 1;
  }
  size_t len = 1;
  for (; len < need && pos + len < s.size(); ++len) {
    const uint8_t c = b(len);
    const bool ok = len == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xbf);
    if (!ok) break;
  }
  return len;
}

}  // namespace

namespace {

// Length of the ASCII prefix of s, eight bytes at a time: most text is mostly ASCII, and only
// the rest needs the character-by-character check.
size_t AsciiPrefix(std::string_view s) {
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, s.data() + i, 8);
    if (word & 0x8080808080808080ull) break;
  }
  while (i < s.size() && static_cast<uint8_t>(s[i]) < 0x80) ++i;
  return i;
}

// CompleteUtf8Prefix with the ASCII fast path.
size_t ValidPrefix(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    pos += AsciiPrefix(s.substr(pos));
    if (pos == s.size()) break;
    const size_t len = ValidUtf8CharLength(s.substr(pos));
    if (len == 0) break;
    pos += len;
  }
  return pos;
}

}  // namespace

bool IsValidUtf8(std::string_view s) { return ValidPrefix(s) == s.size(); }

bool SanitizeUtf8(std::string_view s, std::string& out) {
  size_t valid = ValidPrefix(s);
  if (valid == s.size()) return true;
  out.assign(s.substr(0, valid));
  size_t pos = valid;
  while (pos < s.size()) {
    const size_t len = ValidUtf8CharLength(s.substr(pos));
    if (len > 0) {
      out.append(s.substr(pos, len));
      pos += len;
    } else {
      AppendUtf8(kReplacementChar, out);
      pos += MaximalSubpart(s, pos);
    }
  }
  return false;
}

bool IsWhitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0d);
  return u_isUWhiteSpace(static_cast<UChar32>(cp));
}

bool IsNumeric(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  const int8_t t = u_charType(static_cast<UChar32>(cp));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool IsPunctuation(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2f) || (cp >= 0x3a && cp <= 0x40) || (cp >= 0x5b && cp <= 0x60) ||
           (cp >= 0x7b && cp <= 0x7e);
  }
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_P_MASK) != 0;
}

bool IsCombiningMark(uint32_t cp) {
  return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_M_MASK) != 0;
}

bool IsWordChar(uint32_t cp) {
  if (cp < 0x80) {
    return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || (cp >= '0' && cp <= '9') ||
           cp == '_';
  }
  const UChar32 c = static_cast<UChar32>(cp);
  return u_hasBinaryProperty(c, UCHAR_ALPHABETIC) ||
         (U_GET_GC_MASK(c) & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0 ||
         u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL);
}

namespace {

// HF tokenizers normalizes with Unicode 9.0 data (the unicode-normalization-alignments crate),
// while ICU carries a newer Unicode: characters assigned since 9.0 (combining marks such as
// U+1DF8, compositions such as U+11935 U+11930) would otherwise be reordered or composed where HF
// leaves them alone. A FilteredNormalizer2 over [:age=9.0:] passes those characters through
// untouched, as 9.0 data does. Built once per form; ICU's frozen sets and normalizers are
// thread-safe for reading.
const icu::Normalizer2& Unicode9Normalizer(NormalForm form) {
  struct Filtered {
    icu::UnicodeSet age9;
    std::unique_ptr<icu::FilteredNormalizer2> forms[4];
  };
  static const Filtered* const filtered = [] {
    UErrorCode ec = U_ZERO_ERROR;
    auto* f = new Filtered{icu::UnicodeSet(icu::UnicodeString(u"[:age=9.0:]"), ec), {}};
    if (U_FAILURE(ec)) Fail("tokenizer: ICU Unicode 9.0 set unavailable: ", u_errorName(ec));
    f->age9.freeze();
    const icu::Normalizer2* base[4] = {
        icu::Normalizer2::getNFCInstance(ec), icu::Normalizer2::getNFDInstance(ec),
        icu::Normalizer2::getNFKCInstance(ec), icu::Normalizer2::getNFKDInstance(ec)};
    if (U_FAILURE(ec)) Fail("tokenizer: ICU normalizer unavailable: ", u_errorName(ec));
    for (int i = 0; i < 4; ++i) {
      f->forms[i] = std::make_unique<icu::FilteredNormalizer2>(*base[i], f->age9);
    }
    return f;
  }();
  switch (form) {
    case NormalForm::kNfc:
      return *filtered->forms[0];
    case NormalForm::kNfd:
      return *filtered->forms[1];
    case NormalForm::kNfkc:
      return *filtered->forms[2];
    case NormalForm::kNfkd:
      return *filtered->forms[3];
  }
  Fail("tokenizer: unknown normal form");
}

}  // namespace

std::string Normalize(std::string_view s, NormalForm form) {
  bool ascii = true;
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(s);  // ASCII is invariant under all four forms
  const icu::Normalizer2& norm = Unicode9Normalizer(form);
  UErrorCode ec = U_ZERO_ERROR;
  const icu::StringPiece piece(s.data(), static_cast<int32_t>(s.size()));
  if (norm.isNormalizedUTF8(piece, ec) && U_SUCCESS(ec)) return std::string(s);
  ec = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(s.size()));
  norm.normalizeUTF8(0, piece, sink, nullptr, ec);
  if (U_FAILURE(ec)) Fail("tokenizer: Unicode normalization failed: ", u_errorName(ec));
  return out;
}

std::string Lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) {
    const uint32_t cp = NextCodePoint(s, pos);
    if (cp < 0x80) {
      out += static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp);
    } else if (cp == 0x130) {
      AppendUtf8('i', out);
      AppendUtf8(0x307, out);
    } else {
      AppendUtf8(static_cast<uint32_t>(u_tolower(static_cast<UChar32>(cp))), out);
    }
  }
  return out;
}

}  // namespace latent::tokenizer
