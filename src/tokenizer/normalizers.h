// Normalizers: the text rewrites tokenizer.json applies before pre-tokenization (and to added
// tokens marked "normalized"). Only the resulting text matters to latent: HF's alignment
// bookkeeping exists for offsets, which latent does not report.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/json_fields.h"

namespace latent::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void Normalize(std::string& text) const = 0;
};

// Builds the normalizer a tokenizer.json "normalizer" value describes; null gives nullptr.
// Supported: NFC, NFD, NFKC, NFKD, Sequence, Prepend, Replace, Lowercase, Strip, StripAccents,
// Nmt, ByteLevel. Anything else fails naming the type.
std::unique_ptr<Normalizer> MakeNormalizer(const Json& j);

}  // namespace latent::tokenizer
