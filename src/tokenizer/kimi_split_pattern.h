// The split pattern of Kimi's tokenizer (Kimi K2, Kimi Linear, Moonlight: `pat_str` of Moonshot's
// tokenization_kimi.py), in a form PCRE2 compiles. Published, it reads
//
// clang-format off
//   [\p{Han}]+
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// clang-format on
//
// (one line; broken here to be read). Han characters are pieces of their own, and the two
// letter classes leave Han out by class intersection, `[X&&[^\p{Han}]]`, which tiktoken's Rust
// regex understands and PCRE2 (10.42) does not. Each intersection is a single character, so
// `(?:(?!\p{Han})[X])` matches exactly the same characters, and as one atom it takes the same
// quantifiers. Also, where tiktoken's Rust regex reads \p{Han} as the Script property, PCRE2
// reads it as Script_Extensions, which also holds CJK punctuation such as 。 and 「; \p{sc=Han}
// is the Script property in both. tests/tokenizer/test_kimi_tokenizer.py checks this rewrite
// (read from this file) against the published pattern with Python's `regex` module (whose
// \p{Han} is the Script property too) on thousands of strings.
#pragma once

#include <string_view>

namespace latent::tokenizer {

// clang-format off
inline constexpr std::string_view kKimiSplitPattern =
    R"([\p{sc=Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc=Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])*(?:(?!\p{sc=Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?(?:(?!\p{sc=Han})[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}])+(?:(?!\p{sc=Han})[\p{Ll}\p{Lm}\p{Lo}\p{M}])*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";
// clang-format on

}  // namespace latent::tokenizer
