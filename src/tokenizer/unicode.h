// Unicode helpers for the tokenizer: code point iteration, the invalid-UTF-8 policy, the character
// classes HF `tokenizers` uses (Rust's char methods and regex classes), normalization forms and
// lowercasing. Classes and normalization come from ICU so that they follow the Unicode standard
// rather than a hand-made table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace latent::tokenizer {

inline constexpr uint32_t kReplacementChar = 0xfffd;

// Decodes the character at s[pos] and moves pos past it. `s` must be valid UTF-8.
uint32_t NextCodePoint(std::string_view s, size_t& pos);

// Number of bytes of the UTF-8 character that starts with byte `lead` (valid UTF-8 assumed).
inline size_t Utf8Length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
}

// The invalid-UTF-8 policy of the tokenizer: each maximal invalid subsequence becomes one U+FFFD,
// exactly what Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do, so
// a client that decodes bytes the usual way before calling HF tokenizers gets the same ids.
// Returns true and leaves `out` untouched when `s` is already valid (the common case, no copy).
bool SanitizeUtf8(std::string_view s, std::string& out);
bool IsValidUtf8(std::string_view s);

// Character classes, each named after what it reproduces in HF tokenizers.
bool IsWhitespace(uint32_t cp);     // Rust char::is_whitespace (Unicode White_Space)
bool IsNumeric(uint32_t cp);        // Rust char::is_numeric (Nd, Nl, No)
bool IsPunctuation(uint32_t cp);    // ASCII punctuation or a P* category (Punctuation, Bert)
bool IsWordChar(uint32_t cp);       // Rust regex \w (Alphabetic, M*, Nd, Pc, Join_Control)
bool IsCombiningMark(uint32_t cp);  // M* categories (StripAccents)

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Unicode normalization of valid UTF-8 text.
std::string Normalize(std::string_view s, NormalForm form);

// Rust's per-character char::to_lowercase: the simple lowercase mapping, plus the one
// unconditional multi-character mapping (U+0130 -> "i̇").
std::string Lowercase(std::string_view s);

}  // namespace latent::tokenizer
