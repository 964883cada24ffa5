#include "tokenizer/pre_tokenizers.h"

#include <algorithm>

#include "tokenizer/byte_level.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace latent::tokenizer {

namespace {

struct Segment {
  size_t begin, end;
  bool flag;  // is a match, then (after the behavior) "remove this segment"
};

// HF's NormalizedString::split: the matches and the text between them cover the piece; the
// behavior decides what becomes of the matches; empty results are dropped.
void SplitByMatches(PreToken&& piece, const std::vector<Span>& matches, bool invert,
                    SplitBehavior behavior, std::vector<PreToken>& out) {
  const std::string& text = piece.text;
  std::vector<Segment> segs;
  segs.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != text.size() || text.empty()) segs.push_back({prev, text.size(), invert});

  std::vector<Segment> merged;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      merged = std::move(segs);
      break;
    case SplitBehavior::kIsolated:
      merged = std::move(segs);
      for (Segment& s : merged) s.flag = false;
      break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Segment& s : segs) {
        if (s.flag == previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.flag;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Segment& s : segs) {
        if (s.flag && !previous_match && !merged.empty()) {
          merged.back().end = s.end;
        } else {
          merged.push_back({s.begin, s.end, false});
        }
        previous_match = s.flag;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->flag && !previous_match && !merged.empty()) {
          merged.back().begin = it->begin;
        } else {
          merged.push_back({it->begin, it->end, false});
        }
        previous_match = it->flag;
      }
      std::reverse(merged.begin(), merged.end());
      break;
    }
  }
  if (merged.size() == 1 && !merged[0].flag && merged[0].begin == 0 &&
      merged[0].end == text.size()) {
    if (!text.empty()) out.push_back(std::move(piece));  // unchanged: no copy
    return;
  }
  for (const Segment& s : merged) {
    if (s.flag || s.begin == s.end) continue;
    out.push_back({text.substr(s.begin, s.end - s.begin), piece.at_origin && s.begin == 0});
  }
}

// Each character for which `pred` holds is a match of its own (HF's Fn(char) -> bool pattern).
template <typename Pred>
void FindChars(std::string_view text, Pred pred, std::vector<Span>& out) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t start = pos;
    if (pred(NextCodePoint(text, pos))) out.emplace_back(start, pos);
  }
}

// Runs `split_one` over every piece, collecting the results in place of `pieces`.
template <typename SplitOne>
void SplitEach(std::vector<PreToken>& pieces, SplitOne split_one) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 2);
  for (PreToken& piece : pieces) split_one(std::move(piece), out);
  pieces = std::move(out);
}

template <typename Pred>
void SplitOnChars(std::vector<PreToken>& pieces, Pred pred, SplitBehavior behavior) {
  std::vector<Span> matches;
  SplitEach(pieces, [&](PreToken&& piece, std::vector<PreToken>& out) {
    matches.clear();
    FindChars(piece.text, pred, matches);
    SplitByMatches(std::move(piece), matches, false, behavior, out);
  });
}

SplitBehavior ParseBehavior(const std::string& name, std::string_view what) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  Fail("tokenizer.json: ", what, ": unsupported behavior '", name, "'");
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& step : steps_) step->PreTokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::string_view pattern, bool literal, SplitBehavior behavior, bool invert)
      : regex_(pattern, literal), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    std::vector<Span> matches;
    SplitEach(pieces, [&](PreToken&& piece, std::vector<PreToken>& out) {
      matches.clear();
      regex_.FindAll(piece.text, matches);
      SplitByMatches(std::move(piece), matches, invert_, behavior_, out);
    });
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

// ByteLevel: optional prefix space, optional GPT-2 split, then bytes -> byte-level characters.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_ || use_regex_) {
      std::vector<Span> matches;
      SplitEach(pieces, [&](PreToken&& piece, std::vector<PreToken>& out) {
        if (add_prefix_space_ && piece.text[0] != ' ') piece.text.insert(0, 1, ' ');
        if (!use_regex_) {
          out.push_back(std::move(piece));
          return;
        }
        matches.clear();
        Gpt2Regex().FindAll(piece.text, matches);
        SplitByMatches(std::move(piece), matches, false, SplitBehavior::kIsolated, out);
      });
    }
    std::string mapped;
    for (PreToken& piece : pieces) {
      mapped.clear();
      AppendByteLevel(piece.text, mapped);
      piece.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_, use_regex_;
};

enum class PrependScheme { kFirst, kNever, kAlways };

// Metaspace: spaces become the replacement character ("▁"), which may be prepended, and which
// starts each piece when splitting.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(uint32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    AppendUtf8(replacement, replacement_utf8_);
  }
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    std::vector<Span> matches;
    SplitEach(pieces, [&](PreToken&& piece, std::vector<PreToken>& out) {
      std::string replaced;
      replaced.reserve(piece.text.size() + 8);
      for (char c : piece.text) {
        if (c == ' ') {
          replaced += replacement_utf8_;
        } else {
          replaced += c;
        }
      }
      piece.text = std::move(replaced);
      const bool starts = piece.text.compare(0, replacement_utf8_.size(), replacement_utf8_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways ||
                      (scheme_ == PrependScheme::kFirst && piece.at_origin))) {
        piece.text.insert(0, replacement_utf8_);
      }
      if (!split_) {
        out.push_back(std::move(piece));
        return;
      }
      matches.clear();
      FindChars(
          piece.text, [&](uint32_t cp) { return cp == replacement_; }, matches);
      SplitByMatches(std::move(piece), matches, false, SplitBehavior::kMergedWithNext, out);
    });
  }

 private:
  uint32_t replacement_;
  std::string replacement_utf8_;
  PrependScheme scheme_;
  bool split_;
};

class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual) : individual_(individual) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    SplitOnChars(pieces, IsNumeric,
                 individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }

 private:
  bool individual_;
};

class PunctuationPreTokenizer : public PreTokenizer {
 public:
  explicit PunctuationPreTokenizer(SplitBehavior behavior) : behavior_(behavior) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    SplitOnChars(pieces, IsPunctuation, behavior_);
  }

 private:
  SplitBehavior behavior_;
};

// Whitespace: HF's \w+|[^\w\s]+ kept, whitespace removed, i.e. maximal runs of word characters
// and maximal runs of other non-space characters.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    std::vector<Span> matches;
    SplitEach(pieces, [&](PreToken&& piece, std::vector<PreToken>& out) {
      matches.clear();
      const std::string& text = piece.text;
      size_t pos = 0;
      int run_kind = -1;  // 0: word, 1: other
      size_t run_start = 0;
      while (pos < text.size()) {
        const size_t start = pos;
        const uint32_t cp = NextCodePoint(text, pos);
        const int kind = IsWordChar(cp) ? 0 : IsWhitespace(cp) ? -1 : 1;
        if (kind != run_kind) {
          if (run_kind >= 0) matches.emplace_back(run_start, start);
          run_kind = kind;
          run_start = start;
        }
      }
      if (run_kind >= 0) matches.emplace_back(run_start, text.size());
      SplitByMatches(std::move(piece), matches, true, SplitBehavior::kRemoved, out);
    });
  }
};

class WhitespaceSplitPreTokenizer : public PreTokenizer {
 public:
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    SplitOnChars(pieces, IsWhitespace, SplitBehavior::kRemoved);
  }
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    SplitOnChars(pieces, IsWhitespace, SplitBehavior::kRemoved);
    SplitOnChars(pieces, IsPunctuation, SplitBehavior::kIsolated);
  }
};

class CharDelimiterPreTokenizer : public PreTokenizer {
 public:
  explicit CharDelimiterPreTokenizer(uint32_t delimiter) : delimiter_(delimiter) {}
  void PreTokenize(std::vector<PreToken>& pieces) const override {
    SplitOnChars(
        pieces, [this](uint32_t cp) { return cp == delimiter_; }, SplitBehavior::kRemoved);
  }

 private:
  uint32_t delimiter_;
};

}  // namespace

std::unique_ptr<PreTokenizer> MakePreTokenizer(const Json& j) {
  if (j.is_null()) return nullptr;
  const std::string type = TypeOf(j, "pre-tokenizer");
  const std::string what = type + " pre-tokenizer";
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const Json& step : ArrayField(j, "pretokenizers", what)) {
      if (auto p = MakePreTokenizer(step)) steps.push_back(std::move(p));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") {
    bool literal = false;
    const std::string pattern = PatternField(j, "pattern", what, literal);
    return std::make_unique<SplitPreTokenizer>(
        pattern, literal, ParseBehavior(Field<std::string>(j, "behavior", what), what),
        FieldOr<bool>(j, "invert", false, what));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(FieldOr<bool>(j, "add_prefix_space", true, what),
                                                   FieldOr<bool>(j, "use_regex", true, what));
  }
  if (type == "Metaspace") {
    PrependScheme scheme = PrependScheme::kAlways;
    const std::string name = FieldOr<std::string>(j, "prepend_scheme", "", what);
    if (name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (name == "never") {
      scheme = PrependScheme::kNever;
    } else if (name == "always" || name.empty()) {
      scheme = PrependScheme::kAlways;
    } else {
      Fail("tokenizer.json: ", what, ": unsupported prepend_scheme '", name, "'");
    }
    // Older files say add_prefix_space: false instead of prepend_scheme: "never".
    if (!FieldOr<bool>(j, "add_prefix_space", true, what)) {
      if (!name.empty() && scheme != PrependScheme::kNever) {
        Fail("tokenizer.json: ", what, ": add_prefix_space does not match prepend_scheme");
      }
      scheme = PrependScheme::kNever;
    }
    return std::make_unique<MetaspacePreTokenizer>(SingleCharField(j, "replacement", what), scheme,
                                                   FieldOr<bool>(j, "split", true, what));
  }
  if (type == "Digits") {
    return std::make_unique<DigitsPreTokenizer>(FieldOr<bool>(j, "individual_digits", false, what));
  }
  if (type == "Punctuation") {
    return std::make_unique<PunctuationPreTokenizer>(
        ParseBehavior(FieldOr<std::string>(j, "behavior", "Isolated", what), what));
  }
  if (type == "Whitespace") return std::make_unique<WhitespacePreTokenizer>();
  if (type == "WhitespaceSplit") return std::make_unique<WhitespaceSplitPreTokenizer>();
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "CharDelimiterSplit") {
    return std::make_unique<CharDelimiterPreTokenizer>(SingleCharField(j, "delimiter", what));
  }
  Fail("tokenizer.json: unsupported pre-tokenizer type '", type,
       "' (supported: Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, "
       "WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit)");
}

}  // namespace latent::tokenizer
