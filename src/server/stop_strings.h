// Stop strings on streamed text. The engine stops on token ids only; a stop string can span
// tokens and ends the output where it starts, so the server matches it on the detokenized text.
// While streaming, text that could be the beginning of a stop string is held back until the
// next piece shows whether it is one.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace latent::server {

class StopStringMatcher {
 public:
  // `stops` must not contain empty strings.
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Appends `text` and returns what is now safe to emit. Once a stop string appears, returns
  // the text before its first occurrence and stopped() turns true; later calls return "".
  std::string Push(std::string_view text);
  // Appends `text` that no stop string may match in (the text of the tokens before min_tokens,
  // as vLLM skips their stop-string checks): returns it with any held-back text. A stop string
  // later matches only in text pushed after it.
  std::string PushUnmatched(std::string_view text);
  // The end of the output: releases the held-back text (no stop string completed).
  std::string Finish();
  bool stopped() const { return stopped_; }
  // The stop string that ended the output (empty until stopped()).
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;  // A suffix that is a proper prefix of some stop string.
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace latent::server
