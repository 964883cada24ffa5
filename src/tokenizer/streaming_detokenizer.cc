#include "tokenizer/streaming_detokenizer.h"

#include <span>

namespace latent::tokenizer {

namespace {

bool EndsWithReplacementChar(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xef\xbf\xbd") == 0;
}

size_t CharCount(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
  return n;
}

// Enough characters that no start-of-text rule reaches past the context (Strip's start is 1 in
// practice).
constexpr size_t kMinContextChars = 8;

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamingDetokenizer::Push(int32_t id) {
  // Decode drops these before any decoder sees them, so they must not serve as context either.
  if (!tokenizer_.IdToToken(id)) return {};
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return {};
  window_.push_back(id);
  if (tokenizer_.IsByteFallbackToken(id)) return {};  // the run's text depends on its end

  std::string text = tokenizer_.Decode(window_, false);
  if (text.size() <= context_text_.size() || EndsWithReplacementChar(text)) return {};
  // The window's text extends the context's text for every decoder latent supports; if some
  // decoder ever broke that, holding back until Finish() is the safe answer.
  if (text.compare(0, context_text_.size(), context_text_) != 0) return {};
  std::string piece = text.substr(context_text_.size());
  // The tokens just emitted become the next context, reaching further back while their text is
  // short: rules for the start of the text (Metaspace's first token, Strip's start) then apply
  // inside the context, in the window's decoding and the context's alike.
  size_t start = context_size_;
  std::string context = tokenizer_.Decode(std::span(window_).subspan(start), false);
  while (start > 0 && CharCount(context) < kMinContextChars) {
    --start;
    context = tokenizer_.Decode(std::span(window_).subspan(start), false);
  }
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(start));
  context_size_ = window_.size();
  context_text_ = std::move(context);
  return piece;
}

std::string StreamingDetokenizer::Finish() {
  std::string piece;
  const std::string text = tokenizer_.Decode(window_, false);
  if (text.size() > context_text_.size() &&
      text.compare(0, context_text_.size(), context_text_) == 0) {
    piece = text.substr(context_text_.size());
  }
  window_.clear();
  context_size_ = 0;
  context_text_.clear();
  return piece;
}

}  // namespace latent::tokenizer
