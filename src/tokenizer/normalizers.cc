#include "tokenizer/normalizers.h"

#include <vector>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace latent::tokenizer {

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void Normalize(std::string& text) const override { text = tokenizer::Normalize(text, form_); }

 private:
  NormalForm form_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps)
      : steps_(std::move(steps)) {}
  void Normalize(std::string& text) const override {
    for (const auto& step : steps_) step->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Prepend (Llama's "▁" dummy prefix): only non-empty text gets the prefix.
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

// Replace: every match (a literal string or a regex) becomes `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string_view pattern, bool literal, std::string content)
      : regex_(pattern, literal), content_(std::move(content)) {}
  void Normalize(std::string& text) const override {
    std::vector<Span> matches;
    regex_.FindAll(text, matches);
    if (matches.empty()) return;
    std::string out;
    out.reserve(text.size() + matches.size() * content_.size());
    size_t last = 0;
    for (const auto& [begin, end] : matches) {
      out.append(text, last, begin - last);
      out += content_;
      last = end;
    }
    out.append(text, last, std::string::npos);
    text = std::move(out);
  }

 private:
  Regex regex_;
  std::string content_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override { text = Lowercase(text); }
};

// Strip: leading and/or trailing Unicode whitespace.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      size_t pos = 0;
      while (pos < end) {
        size_t next = pos;
        if (!IsWhitespace(NextCodePoint(text, next))) break;
        pos = next;
      }
      begin = pos;
    }
    if (right_) {
      while (end > begin) {
        size_t start = end - 1;
        while (start > begin && (static_cast<uint8_t>(text[start]) & 0xc0) == 0x80) --start;
        size_t next = start;
        if (!IsWhitespace(NextCodePoint(text, next))) break;
        end = start;
      }
    }
    text = text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

// Applies a per-character rewrite: `map` returns false to drop the character or sets `out_cp`.
template <typename Map>
void MapChars(std::string& text, Map map) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    uint32_t cp = NextCodePoint(text, pos);
    if (map(cp)) AppendUtf8(cp, out);
  }
  text = std::move(out);
}

class StripAccentsNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    MapChars(text, [](uint32_t& cp) { return !IsCombiningMark(cp); });
  }
};

// Nmt: drops control characters and turns the other "spaces" sentencepiece's nmt_nfkc knows
// into ' ' (the table is HF's do_nmt).
class NmtNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    MapChars(text, [](uint32_t& cp) {
      if ((cp >= 0x01 && cp <= 0x08) || cp == 0x0b || (cp >= 0x0e && cp <= 0x1f) || cp == 0x7f ||
          cp == 0x8f || cp == 0x9f) {
        return false;
      }
      if (cp == 0x09 || cp == 0x0a || cp == 0x0c || cp == 0x0d || cp == 0x1680 ||
          (cp >= 0x200b && cp <= 0x200f) || cp == 0x2028 || cp == 0x2029 || cp == 0x2581 ||
          cp == 0xfeff || cp == 0xfffd) {
        cp = ' ';
      }
      return true;
    });
  }
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void Normalize(std::string& text) const override {
    std::string out;
    AppendByteLevel(text, out);
    text = std::move(out);
  }
};

}  // namespace

std::unique_ptr<Normalizer> MakeNormalizer(const Json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = TypeOf(j, "normalizer");
  const std::string what = type + " normalizer";
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (const Json& step : ArrayField(j, "normalizers", what)) {
      if (auto n = MakeNormalizer(step)) steps.push_back(std::move(n));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Prepend") {
    return std::make_unique<PrependNormalizer>(Field<std::string>(j, "prepend", what));
  }
  if (type == "Replace") {
    bool literal = false;
    const std::string pattern = PatternField(j, "pattern", what, literal);
    return std::make_unique<ReplaceNormalizer>(pattern, literal,
                                               Field<std::string>(j, "content", what));
  }
  if (type == "Lowercase") return std::make_unique<LowercaseNormalizer>();
  if (type == "Strip") {
    return std::make_unique<StripNormalizer>(FieldOr<bool>(j, "strip_left", true, what),
                                             FieldOr<bool>(j, "strip_right", true, what));
  }
  if (type == "StripAccents") return std::make_unique<StripAccentsNormalizer>();
  if (type == "Nmt") return std::make_unique<NmtNormalizer>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  Fail("tokenizer.json: unsupported normalizer type '", type,
       "' (supported: NFC, NFD, NFKC, NFKD, Sequence, Prepend, Replace, Lowercase, Strip, "
       "StripAccents, Nmt, ByteLevel)");
}

}  // namespace latent::tokenizer
