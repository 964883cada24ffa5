// Stop strings on streamed text. The engine stops on token ids only; a stop string can span
// tokens and ends the output where it starts, so the server matches it on the detokenized text.
// While streaming, text that could be the beginning of a stop string is held back until the
// next piece shows whether it is one.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace latent::server {

class StopStringMatcher {
 public:
  // `stops` must not contain empty strings. `include_stop` (vLLM's include_stop_str_in_output):
  // the output ends after the stop string that matched, not before it.
  explicit StopStringMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Appends `text` and returns what is now safe to emit. Once a stop string appears, returns
  // the text before its first occurrence and stopped() turns true; later calls return "".
  std::string Push(std::string_view text);
  // Appends `text` that no stop string may match in (the text of the first min_tokens tokens,
  // whose stop-string checks vLLM skips): returns what is safe to emit, holding back as Push does.
  // A stop string later must end in text pushed by Push, but may start in this text (as vLLM
  // searches the new text and the stop string's length less one before it).
  std::string PushUnmatched(std::string_view text);
  // The text a sample's `tokens`-th token added: PushUnmatched while tokens <= min_tokens (their
  // stop-string checks skipped, as vLLM's detokenizer skips them), else Push.
  std::string PushTokenText(std::string_view text, int64_t tokens, int64_t min_tokens) {
    return tokens <= min_tokens ? PushUnmatched(text) : Push(text);
  }
  // The end of the output: releases the held-back text (no stop string completed).
  std::string Finish();
  bool stopped() const { return stopped_; }
  // The stop string that ended the output (empty until stopped()).
  const std::string& matched() const { return matched_; }

 private:
  // Emits `buffer` but its longest suffix that some stop string starts with, which it holds.
  std::string HoldBack(std::string buffer);

  std::vector<std::string> stops_;
  bool include_stop_ = false;
  std::string held_;  // A suffix that is a proper prefix of some stop string.
  size_t held_unmatched_ = 0;  // Bytes of held_ pushed by PushUnmatched: no match ends in them.
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace latent::server
