// Pre-tokenizers: split normalized text into the pieces BPE encodes one at a time (and, for
// ByteLevel/Metaspace, rewrite them). Each works on every piece independently, as in HF
// tokenizers, and empty pieces are dropped after every step.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/json_fields.h"

namespace latent::tokenizer {

struct PreToken {
  std::string text;
  // The piece starts where the input text starts (Metaspace's prepend_scheme "first").
  bool at_origin = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenized pieces, in order.
  virtual void PreTokenize(std::vector<PreToken>& pieces) const = 0;
};

// How a Split keeps the delimiters it finds (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Builds the pre-tokenizer a tokenizer.json "pre_tokenizer" value describes; null gives nullptr.
// Supported: Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace,
// WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit. Anything else fails naming the type.
std::unique_ptr<PreTokenizer> MakePreTokenizer(const Json& j);

}  // namespace latent::tokenizer
