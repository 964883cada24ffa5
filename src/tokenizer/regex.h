// Regular expressions for Split, Replace and the GPT-2 byte-level pattern, on PCRE2 (8-bit, UTF,
// Unicode classes, JIT). HF tokenizers compiles these patterns with Oniguruma; the syntax the
// tokenizer.json files use (\p{..} classes, lookahead, (?i:..)) means the same in both, except
// \s, \w and \h, which are rewritten to Oniguruma's meaning. Also copied on purpose is
// Oniguruma's find-all iteration, including how it steps over an empty match, because Split turns
// every match into a piece.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latent::tokenizer {

// [begin, end) byte offsets of a match.
using Span = std::pair<size_t, size_t>;

class Regex {
 public:
  // Compiles `pattern`; with `literal`, the pattern is the plain string to find (Split/Replace
  // with {"String": ...}). Throws latent::Error quoting the pattern when it does not compile.
  Regex(std::string_view pattern, bool literal);

  // Appends the successive non-overlapping matches in `text`, which must be valid UTF-8 (it is
  // not re-validated: checking on every call would make splitting quadratic).
  void FindAll(std::string_view text, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  bool literal_fast_path_ = false;  // a non-empty literal: std::string_view::find is enough
  std::shared_ptr<Code> code_;
};

// The pattern the GPT-2 ByteLevel pre-tokenizer splits with (use_regex: true).
const Regex& Gpt2Regex();

}  // namespace latent::tokenizer
