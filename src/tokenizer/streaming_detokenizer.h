// Incremental detokenization for streaming generation: text comes out token by token, never ends
// in the middle of a UTF-8 character, and all pieces together equal Tokenizer::Decode of all ids.
//
// Decoding is not per token (byte-level tokens carry parts of characters; Metaspace and Strip
// treat the first token differently; ByteFallback decides a whole run of <0xAB> tokens at once),
// so each step decodes a short window: context tokens whose text came out already (at least a
// few characters, so that rules for the start of a text apply inside it) plus the new ones, and
// emits what the window's text adds beyond the context's.
//
// What is held back is decided from the tokens' raw bytes (Tokenizer::TokenBytes), not from the
// decoded text: only a character the bytes end in the middle of (at most 3 bytes, rendered as
// one U+FFFD until more bytes come) and an open ByteFallback run wait. Text that really holds
// U+FFFD, or bytes that can never become a character, come out at once. So the window stays a
// few tokens long and a step costs the same however long the stream is (window_size(),
// last_decoded_tokens()), a ByteFallback run aside: its text waits for its end. Finish()
// releases what is left, exactly as Decode would render it.
//
// Prime() starts a stream after a prompt, as vLLM's detokenizer does: the output's text is what
// decoding the prompt's last tokens and the output together adds to their own text, so a
// SentencePiece token's leading space stays (HF decodes "Hello" + "▁provin" as "Hello provin")
// and a character the prompt's last bytes began comes out with the output bytes that end it.
// The whole characters of a ByteFallback run the prompt ends with are closed: the output's
// bytes start a new run (else bytes that are no UTF-8 would turn the prompt's characters into
// U+FFFDs too). What the prompt's text shows as U+FFFD at its end (an incomplete character, an
// open run) is held, and comes out with the output's first text, completed or still U+FFFD, as
// in vLLM; an output with no tokens has no text. Should the window's text ever stop extending
// the text already out, the tokens not yet out start afresh (vLLM resets its decode stream).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace latent::tokenizer {

class StreamingDetokenizer {
 public:
  // `tokenizer` must outlive this object.
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Makes the last tokens of `prompt` the context of the first Push; their own text is not
  // returned. Call before any Push. The caller leaves out prompt tokens it would not Push.
  void Prime(std::span<const int32_t> prompt);
  // Adds one token; returns the text that became final (often empty).
  std::string Push(int32_t id);
  // Ends the stream: returns the held-back rest and resets for a new stream (unprimed).
  std::string Finish();

  // The bound on a step's cost, for tests: tokens in the window now, and tokens the last Push
  // passed to Decode (all calls together).
  size_t window_size() const { return window_.size(); }
  size_t last_decoded_tokens() const { return last_decoded_tokens_; }

 private:
  // Emits the window's text beyond the context's that is final, and trims the window.
  std::string Emit();
  // Makes the tokens not yet out the whole window, with no context.
  void DropContext();
  // Decodes window_[start, end) and counts the tokens into last_decoded_tokens_.
  std::string DecodeFrom(size_t start);
  // Bytes at the end of the window that begin a character still incomplete (0 to 3).
  size_t HeldBytes() const;
  // Keeps the window's last tokens as the next context: those holding `held` bytes, and before
  // them enough for kMinContextChars characters. `text` decodes the whole window; `final_size`
  // of it is final.
  void Trim(size_t held, const std::string& text, size_t final_size);

  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> window_;     // context tokens, then tokens not yet emitted
  std::vector<std::string> bytes_;  // each window token's raw bytes (TokenBytes)
  // The final part of Decode(window_'s context tokens), all emitted already: a U+FFFD that
  // renders held bytes is not in it.
  std::string context_text_;
  size_t pending_ = 0;  // window_[pending_, end) holds text not yet out (held bytes' tokens)
  size_t pushed_ = 0;   // tokens kept since the stream started or was primed
  size_t last_decoded_tokens_ = 0;
};

// The text `ids` add after `prompt`: what a StreamingDetokenizer primed with `prompt` streams
// in all. The one-shot form, so that a non-streamed output's text equals the streamed one.
std::string DecodeAfter(const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                        std::span<const int32_t> ids, bool skip_special_tokens);

}  // namespace latent::tokenizer
