// Incremental detokenization for streaming generation: text comes out token by token, never ends
// in the middle of a UTF-8 character, and all pieces together equal Tokenizer::Decode of all ids.
//
// Decoding is not per token (byte-level tokens carry parts of characters; Metaspace and Strip
// treat the first token differently; ByteFallback decides a whole run of <0xAB> tokens at once),
// so each step decodes a short window: the tokens of the previous emitted piece (as context, with
// at least a few characters of text) plus the new ones, and emits what the window's text adds
// beyond the context's text. Text is held
// back while it ends in U+FFFD (an incomplete character, as lossy decoding renders it) or while a
// ByteFallback run is open. Finish() releases what is left, exactly as Decode would render it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace latent::tokenizer {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Adds one token; returns the text that became final (often empty).
  std::string Push(int32_t id);
  // Ends the stream: returns the held-back rest and resets for a new stream.
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;  // context tokens, then tokens not yet emitted
  size_t context_size_ = 0;      // window_[0, context_size_) was emitted already
  std::string context_text_;     // Decode(window_[0, context_size_))
};

}  // namespace latent::tokenizer
