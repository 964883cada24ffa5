// Post-processors: what add_special_tokens adds around an encoded sequence (BOS/EOS, [CLS]/[SEP]).
// latent encodes single sequences, so only the "single" side of a template matters.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tokenizer/json_fields.h"

namespace latent::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Returns the ids with the special tokens added; nothing changes when !add_special_tokens.
  virtual std::vector<int32_t> Process(std::vector<int32_t> ids, bool add_special_tokens) const = 0;
};

// Builds the post-processor a tokenizer.json "post_processor" value describes; null gives
// nullptr. Supported: TemplateProcessing, ByteLevel (ids unchanged), BertProcessing,
// RobertaProcessing, Sequence. Anything else fails naming the type.
std::unique_ptr<PostProcessor> MakePostProcessor(const Json& j);

// A processor that puts `prefix` before and `suffix` after the sequence (the template
// tokenizer_config.json's add_bos_token/add_eos_token describe).
std::unique_ptr<PostProcessor> MakeAffixProcessor(std::vector<int32_t> prefix,
                                                  std::vector<int32_t> suffix);

}  // namespace latent::tokenizer
