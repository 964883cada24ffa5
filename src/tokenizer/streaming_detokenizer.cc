#include "tokenizer/streaming_detokenizer.h"

#include <optional>
#include <span>

#include "tokenizer/utf8.h"

namespace latent::tokenizer {

namespace {

constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

bool EndsWithReplacementChar(const std::string& s) {
  return s.size() >= kReplacement.size() &&
         s.compare(s.size() - kReplacement.size(), kReplacement.size(), kReplacement) == 0;
}

size_t CharCount(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (static_cast<uint8_t>(c) & 0xc0) != 0x80;
  return n;
}

// Enough characters that no start-of-text rule reaches past the context (Strip's start is 1 in
// practice, Metaspace's is the first token).
constexpr size_t kMinContextChars = 8;

// Prompt tokens that Prime decodes: enough for kMinContextChars in any real text.
constexpr size_t kPrimeTokens = 8;

}  // namespace

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

void StreamingDetokenizer::Prime(std::span<const int32_t> prompt) {
  const auto kept = [&](int32_t id) {
    return tokenizer_.IdToToken(id) && !(skip_special_tokens_ && tokenizer_.IsSpecial(id));
  };
  // The ByteFallback run the prompt ends with (tokens Push drops do not end it: Decode drops
  // them before the decoder joins the run's bytes): prompt[run_start, size).
  size_t run_start = prompt.size();
  std::string run;
  for (size_t i = prompt.size(); i > 0; --i) {
    const int32_t id = prompt[i - 1];
    if (!kept(id)) continue;
    if (!tokenizer_.IsByteFallbackToken(id)) break;
    run_start = i - 1;
    run.insert(0, tokenizer_.TokenBytes(id).value_or(""));
  }
  // The run's whole characters are closed: the prompt's text shows them, and the output's bytes
  // start a new run rather than join them (joined, bytes that are no valid UTF-8 turn the whole
  // run, prompt part included, into U+FFFDs, and the text no longer extends the prompt's). Like
  // vLLM, which streams the prompt's characters as they complete. What follows them (an
  // incomplete character, bytes that are no UTF-8) stays open: it is not the prompt's text yet
  // (it shows as U+FFFD) and decodes with the output's first bytes.
  const size_t closed = CompleteUtf8Prefix(run);
  std::vector<int32_t> context(prompt.begin(), prompt.begin() + run_start);
  // Only the last tokens decode: enough for kMinContextChars in any real text.
  size_t start = context.size();
  for (size_t n = 0; start > 0 && n < kPrimeTokens; --start) n += kept(context[start - 1]);
  context.erase(context.begin(), context.begin() + static_cast<std::ptrdiff_t>(start));
  for (size_t i = run_start, byte = 0; i < prompt.size(); ++i) {
    if (!kept(prompt[i])) continue;
    if (byte++ >= closed) context.push_back(prompt[i]);
  }
  for (int32_t id : context) Push(id);
  pushed_ = 0;
}

std::string StreamingDetokenizer::DecodeFrom(size_t start) {
  last_decoded_tokens_ += window_.size() - start;
  return tokenizer_.Decode(std::span(window_).subspan(start), false);
}

size_t StreamingDetokenizer::HeldBytes() const {
  // The last 3 bytes decide; a token may hold none (an empty token string).
  std::string tail;
  for (size_t i = bytes_.size(); i > 0 && tail.size() < 3; --i) tail.insert(0, bytes_[i - 1]);
  return IncompleteUtf8Suffix(tail);
}

std::string StreamingDetokenizer::Push(int32_t id) {
  last_decoded_tokens_ = 0;
  // Decode drops these before any decoder sees them, so they must not serve as context either.
  std::optional<std::string> token = tokenizer_.IdToToken(id);
  if (!token) return {};
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return {};
  ++pushed_;
  window_.push_back(id);
  // A special token's text goes into the decoded text as it is.
  bytes_.push_back(tokenizer_.TokenBytes(id).value_or(*token));
  if (tokenizer_.IsByteFallbackToken(id)) return {};  // the run's text depends on its end
  return Emit();
}

std::string StreamingDetokenizer::Emit() {
  const std::string text = DecodeFrom(0);
  const size_t held = HeldBytes();
  size_t final_size = text.size();
  if (held > 0) {
    // Held bytes decode as one U+FFFD at the end; a decoder that renders them otherwise makes
    // the step wait for more tokens, which is always safe.
    if (!EndsWithReplacementChar(text)) return {};
    final_size -= kReplacement.size();
  }
  // The window's text extends the context's text for every decoder latent supports. Should some
  // decoder ever break that, the tokens not yet out start afresh (vLLM resets its decode
  // stream): their text comes out, decoded without the context, rather than never.
  if (text.compare(0, context_text_.size(), context_text_) != 0) {
    DropContext();
    return Emit();
  }
  if (final_size <= context_text_.size()) return {};
  std::string piece = text.substr(context_text_.size(), final_size - context_text_.size());
  Trim(held, text, final_size);
  return piece;
}

void StreamingDetokenizer::DropContext() {
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(pending_));
  bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(pending_));
  pending_ = 0;
  context_text_.clear();
}

void StreamingDetokenizer::Trim(size_t held, const std::string& text, size_t final_size) {
  // The held bytes' tokens stay: the bytes that complete their character decode with them.
  size_t first_held = window_.size();
  for (size_t covered = 0; covered < held && first_held > 0;) {
    covered += bytes_[--first_held].size();
  }
  // Back from there, doubling, until the context's final text has enough characters. Context
  // decoding starts at any token: a decoder's output for the tokens before the window's end
  // does not depend on what follows, but the start of a text may (Metaspace, Strip).
  std::string context;
  size_t start = first_held;
  for (size_t extra = 1;; extra *= 2) {
    start = first_held > extra ? first_held - extra : 0;
    if (start == 0) break;
    context = DecodeFrom(start);
    if (held > 0) {
      if (!EndsWithReplacementChar(context)) {
        start = 0;  // rendered otherwise: keep the whole window, whose final part is known
        break;
      }
      context.resize(context.size() - kReplacement.size());
    }
    if (CharCount(context) >= kMinContextChars) break;
  }
  pending_ = first_held - start;
  if (start == 0) {
    context_text_ = text.substr(0, final_size);
    return;
  }
  window_.erase(window_.begin(), window_.begin() + static_cast<std::ptrdiff_t>(start));
  bytes_.erase(bytes_.begin(), bytes_.begin() + static_cast<std::ptrdiff_t>(start));
  context_text_ = std::move(context);
}

std::string StreamingDetokenizer::Finish() {
  std::string piece;
  // An output of no tokens has no text, though the prompt may end in held bytes (as vLLM).
  if (pushed_ > 0) {
    std::string text = DecodeFrom(0);
    if (text.compare(0, context_text_.size(), context_text_) != 0) {  // as in Emit()
      DropContext();
      text = DecodeFrom(0);
    }
    piece = text.substr(context_text_.size());
  }
  window_.clear();
  bytes_.clear();
  context_text_.clear();
  pending_ = 0;
  pushed_ = 0;
  return piece;
}

std::string DecodeAfter(const Tokenizer& tokenizer, std::span<const int32_t> prompt,
                        std::span<const int32_t> ids, bool skip_special_tokens) {
  StreamingDetokenizer stream(tokenizer, skip_special_tokens);
  stream.Prime(prompt);
  std::string text;
  for (int32_t id : ids) text += stream.Push(id);
  return text + stream.Finish();
}

}  // namespace latent::tokenizer
