// Decoders: turn the token strings of a sequence of ids back into text. Like HF tokenizers, each
// decoder maps the list of token strings to a new list (decode_chain) and the final list is
// concatenated, so decoders compose in a Sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_fields.h"

namespace latent::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void DecodeChain(std::vector<std::string>& tokens) const = 0;
  // The same, but the bytes the tokens stand for are kept as they are: no U+FFFD for an
  // incomplete or invalid UTF-8 sequence (byte-level and ByteFallback tokens may carry part of a
  // character). For a grammar's view of the vocabulary (structured output).
  virtual void DecodeChainBytes(std::vector<std::string>& tokens) const { DecodeChain(tokens); }
  // Whether a ByteFallback step is part of this decoder: it decides a whole run of <0xAB> tokens
  // at once, which the streaming detokenizer must wait for.
  virtual bool HasByteFallback() const { return false; }
};

// Builds the decoder a tokenizer.json "decoder" value describes; null gives nullptr.
// Supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder, Sequence.
// Anything else fails naming the type.
std::unique_ptr<Decoder> MakeDecoder(const Json& j);

// The byte a ByteFallback token such as "<0x0A>" stands for.
std::optional<uint8_t> ParseByteFallbackToken(std::string_view token);

}  // namespace latent::tokenizer
