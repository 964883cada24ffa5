// UTF-8 helpers shared by the tokenizer and the chat template renderer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace latent::tokenizer {

// Length in bytes of the valid UTF-8 character starting at s[0], or 0 when s does not start
// with one (a stray continuation byte, an overlong form, a surrogate, a truncated sequence).
size_t ValidUtf8CharLength(std::string_view s);

// Number of bytes at the start of `s` that form complete, valid characters: what can be emitted
// now without splitting a character.
size_t CompleteUtf8Prefix(std::string_view s);

// Length (0 to 3) of the character `s` ends in the middle of: its last bytes start a valid
// character that more bytes could still complete. Lossy decoding renders those bytes as one
// U+FFFD at the end, but as the character, or as U+FFFD and what follows, once more bytes come;
// everything before them decodes the same whatever follows.
size_t IncompleteUtf8Suffix(std::string_view s);

// Number of characters (code points) in valid UTF-8 text: a Python str's len().
size_t Utf8CharCount(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (must be a valid scalar value).
void AppendUtf8(uint32_t cp, std::string& out);

}  // namespace latent::tokenizer
