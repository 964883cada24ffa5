#include "tokenizer/decoders.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace latent::tokenizer {

namespace {

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Rust's String::from_utf8_lossy, the last step of byte-level decoding.
std::string Lossy(std::string bytes) {
  std::string fixed;
  if (SanitizeUtf8(bytes, fixed)) return bytes;
  return fixed;
}

// Rust's str::replace, including its behaviour for an empty pattern (insert everywhere).
std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  if (from.empty()) {
    size_t pos = 0;
    out += to;
    while (pos < s.size()) {
      const size_t start = pos;
      pos += Utf8Length(static_cast<uint8_t>(s[pos]));
      out.append(s.substr(start, pos - start));
      out += to;
    }
    return out;
  }
  size_t last = 0, pos;
  while ((pos = s.find(from, last)) != std::string_view::npos) {
    out.append(s.substr(last, pos - last));
    out += to;
    last = pos + from.size();
  }
  out.append(s.substr(last));
  return out;
}

class ByteLevelDecoder : public Decoder {
 public:
  // All tokens' bytes go into one string; a token with a character outside the byte-level
  // alphabet (an added token such as "<｜begin▁of▁sentence｜>") contributes its UTF-8 as is.
  void DecodeChain(std::vector<std::string>& tokens) const override {
    DecodeChainBytes(tokens);
    tokens[0] = Lossy(std::move(tokens[0]));
  }
  void DecodeChainBytes(std::vector<std::string>& tokens) const override {
    std::string bytes;
    std::string token_bytes;
    for (const std::string& token : tokens) {
      token_bytes.clear();
      bool all = true;
      size_t pos = 0;
      while (pos < token.size()) {
        const int b = ByteOfByteLevelChar(NextCodePoint(token, pos));
        if (b < 0) {
          all = false;
          break;
        }
        token_bytes += static_cast<char>(b);
      }
      bytes += all ? token_bytes : token;
    }
    tokens.assign(1, std::move(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(uint32_t replacement, bool strip_first)
      : replacement_(replacement), strip_first_(strip_first) {}
  // Every replacement character becomes a space, except in the first token, where (unless the
  // prepend scheme is "never") they are all dropped: that is HF's rule, not only the first one.
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::string& token = tokens[i];
      std::string out;
      out.reserve(token.size());
      size_t pos = 0;
      while (pos < token.size()) {
        const size_t start = pos;
        if (NextCodePoint(token, pos) == replacement_) {
          if (!(i == 0 && strip_first_)) out += ' ';
        } else {
          out.append(token, start, pos - start);
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  uint32_t replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string_view pattern, bool literal, std::string content)
      : regex_(pattern, literal), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::vector<Span> matches;
    for (std::string& token : tokens) {
      matches.clear();
      regex_.FindAll(token, matches);
      if (matches.empty()) continue;
      std::string out;
      size_t last = 0;
      for (const auto& [begin, end] : matches) {
        out.append(token, last, begin - last);
        out += content_;
        last = end;
      }
      out.append(token, last, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  Regex regex_;
  std::string content_;
};

// Runs of <0xAB> tokens become the text their bytes spell; a run that is not valid UTF-8 becomes
// one U+FFFD per byte (HF's rule, not the usual per-invalid-sequence one).
class ByteFallbackDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override { Decode(tokens, false); }
  void DecodeChainBytes(std::vector<std::string>& tokens) const override { Decode(tokens, true); }
  bool HasByteFallback() const override { return true; }

 private:
  static void Decode(std::vector<std::string>& tokens, bool keep_bytes) {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    const auto flush = [&] {
      if (run.empty()) return;
      if (keep_bytes || IsValidUtf8(run)) {
        out.push_back(run);
      } else {
        std::string replacement;
        AppendUtf8(kReplacementChar, replacement);
        for (size_t i = 0; i < run.size(); ++i) out.push_back(replacement);
      }
      run.clear();
    };
    for (std::string& token : tokens) {
      if (auto byte = ParseByteFallbackToken(token)) {
        run += static_cast<char>(*byte);
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

// Strip: up to `start` leading and `stop` trailing `content` characters of each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(uint32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    std::vector<size_t> starts;  // byte offset of each character
    for (std::string& token : tokens) {
      starts.clear();
      std::vector<uint32_t> chars;
      size_t pos = 0;
      while (pos < token.size()) {
        starts.push_back(pos);
        chars.push_back(NextCodePoint(token, pos));
      }
      starts.push_back(token.size());
      size_t begin = 0;
      while (begin < start_ && begin < chars.size() && chars[begin] == content_) ++begin;
      size_t end = chars.size();
      // HF indexes past the front when stop exceeds the length (a panic); stop at `begin`.
      for (size_t i = 0; i < stop_ && end > begin && chars[end - 1] == content_; ++i) --end;
      token = token.substr(starts[begin], starts[end] - starts[begin]);
    }
  }

 private:
  uint32_t content_;
  size_t start_, stop_;
};

// BPEDecoder: the end-of-word suffix becomes a space, except in the last token.
class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = ReplaceAll(tokens[i], suffix_, i + 1 == tokens.size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps)
      : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }
  void DecodeChainBytes(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->DecodeChainBytes(tokens);
  }
  bool HasByteFallback() const override {
    for (const auto& step : steps_) {
      if (step->HasByteFallback()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::optional<uint8_t> ParseByteFallbackToken(std::string_view token) {
  // HF: six bytes, "<0x" ... ">", and u8::from_str_radix on the two in between (which also
  // accepts a '+' sign before a single digit).
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  const int hi = HexDigit(token[3]), lo = HexDigit(token[4]);
  if (lo < 0) return std::nullopt;
  if (hi >= 0) return static_cast<uint8_t>(hi * 16 + lo);
  if (token[3] == '+') return static_cast<uint8_t>(lo);
  return std::nullopt;
}

std::unique_ptr<Decoder> MakeDecoder(const Json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = TypeOf(j, "decoder");
  const std::string what = type + " decoder";
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    const std::string scheme = FieldOr<std::string>(j, "prepend_scheme", "always", what);
    const bool add_prefix_space = FieldOr<bool>(j, "add_prefix_space", true, what);
    return std::make_unique<MetaspaceDecoder>(SingleCharField(j, "replacement", what),
                                              scheme != "never" && add_prefix_space);
  }
  if (type == "Replace") {
    bool literal = false;
    const std::string pattern = PatternField(j, "pattern", what, literal);
    return std::make_unique<ReplaceDecoder>(pattern, literal,
                                            Field<std::string>(j, "content", what));
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    const int64_t start = FieldOr<int64_t>(j, "start", 0, what);
    const int64_t stop = FieldOr<int64_t>(j, "stop", 0, what);
    if (start < 0 || stop < 0) Fail("tokenizer.json: ", what, ": start and stop must be >= 0");
    return std::make_unique<StripDecoder>(SingleCharField(j, "content", what),
                                          static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "BPEDecoder") {
    return std::make_unique<BpeDecoder>(FieldOr<std::string>(j, "suffix", "</w>", what));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const Json& step : ArrayField(j, "decoders", what)) {
      if (auto d = MakeDecoder(step)) steps.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  Fail("tokenizer.json: unsupported decoder type '", type,
       "' (supported: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPEDecoder, "
       "Sequence)");
}

}  // namespace latent::tokenizer
