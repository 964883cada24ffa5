// GPT-2's byte-level alphabet: every byte maps to one printable character, so that BPE can work on
// arbitrary bytes with a vocabulary of printable strings. Shared by the ByteLevel pre-tokenizer,
// normalizer and decoder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace latent::tokenizer {

// Appends the byte-level characters of each byte of `bytes`.
void AppendByteLevel(std::string_view bytes, std::string& out);

// The byte a byte-level character stands for, or -1 when `cp` is not in the alphabet.
int ByteOfByteLevelChar(uint32_t cp);

}  // namespace latent::tokenizer
