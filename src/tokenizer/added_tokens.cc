#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <limits>

#include "tokenizer/unicode.h"

namespace latent::tokenizer {

namespace {

constexpr const char* kAddedToken = "added token";

// The character that ends text[0..end) (end > 0), decoded.
uint32_t LastChar(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xc0) == 0x80) --start;
  return NextCodePoint(text, start);
}

// HF's ^\w and \w$ tests (Rust regex, Unicode \w).
bool EndsWithWord(std::string_view text, size_t end) {
  return end > 0 && IsWordChar(LastChar(text, end));
}
bool StartsWithWord(std::string_view text, size_t begin) {
  if (begin >= text.size()) return false;
  size_t pos = begin;
  return IsWordChar(NextCodePoint(text, pos));
}

// Start of the whitespace run that ends at `end` (HF: \s*$ on text[..end]).
size_t WhitespaceRunBefore(std::string_view text, size_t end) {
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xc0) == 0x80) --start;
    size_t pos = start;
    if (!IsWhitespace(NextCodePoint(text, pos))) break;
    end = start;
  }
  return end;
}

// End of the whitespace run that starts at `begin` (HF: ^\s* on text[begin..]).
size_t WhitespaceRunAfter(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    size_t pos = begin;
    if (!IsWhitespace(NextCodePoint(text, pos))) break;
    begin = pos;
  }
  return begin;
}

}  // namespace

void AddedVocabulary::Trie::Insert(std::string_view pattern, int32_t id) {
  if (pattern.empty()) return;
  first_byte[static_cast<uint8_t>(pattern[0])] = true;
  int32_t node = 0;
  for (char c : pattern) {
    const uint8_t b = static_cast<uint8_t>(c);
    auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{-1}));
    if (it != children.end() && it->first == b) {
      node = it->second;
    } else {
      const int32_t child = static_cast<int32_t>(nodes.size());
      children.insert(it, {b, child});
      nodes.emplace_back();
      node = child;
    }
  }
  if (nodes[node].id < 0) nodes[node].id = id;  // a duplicate pattern keeps the lower id
}

size_t AddedVocabulary::Trie::LongestAt(std::string_view text, size_t pos, int32_t& id) const {
  size_t best = 0;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const uint8_t b = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, int32_t{-1}));
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes[node].id >= 0) {
      best = i + 1 - pos;
      id = nodes[node].id;
    }
  }
  return best;
}

void AddedVocabulary::Build(const Json& list, const BpeModel& model, const Normalizer* normalizer) {
  int64_t next_id = static_cast<int64_t>(model.vocab_size());
  if (!list.is_null() && !list.is_array()) Fail("tokenizer.json: \"added_tokens\" must be a list");
  for (const Json& entry : list) {
    if (!entry.is_object()) Fail("tokenizer.json: an added token must be an object");
    AddedToken token;
    token.content = Field<std::string>(entry, "content", kAddedToken);
    token.single_word = FieldOr<bool>(entry, "single_word", false, kAddedToken);
    token.lstrip = FieldOr<bool>(entry, "lstrip", false, kAddedToken);
    token.rstrip = FieldOr<bool>(entry, "rstrip", false, kAddedToken);
    token.normalized = FieldOr<bool>(entry, "normalized", true, kAddedToken);
    token.special = FieldOr<bool>(entry, "special", false, kAddedToken);
    if (token.content.empty()) continue;
    auto known = by_content_.find(token.content);
    if (known != by_content_.end()) {
      auto it = by_id_.find(known->second);
      if (it != by_id_.end() && it->second == token) continue;
    }
    int32_t id;
    if (known != by_content_.end()) {
      id = known->second;
    } else if (auto model_id = model.TokenToId(token.content)) {
      id = *model_id;
    } else {
      if (next_id > std::numeric_limits<int32_t>::max()) Fail("tokenizer.json: too many tokens");
      id = static_cast<int32_t>(next_id++);
    }
    if (token.normalized && normalizer != nullptr) {
      std::string normalized = token.content;
      normalizer->Normalize(normalized);
      if (normalized != token.content) normalized_content_[id] = std::move(normalized);
    }
    by_content_[token.content] = id;
    if (token.special) special_.insert(token.content);
    by_id_[id] = std::move(token);
  }
  BuildTries();
}

void AddedVocabulary::BuildWithIds(std::vector<std::pair<int32_t, AddedToken>> tokens) {
  for (auto& [id, token] : tokens) {
    if (token.content.empty()) continue;
    token.normalized = false;
    by_content_[token.content] = id;
    if (token.special) special_.insert(token.content);
    by_id_[id] = std::move(token);
  }
  BuildTries();
}

void AddedVocabulary::BuildTries() {
  std::vector<int32_t> ids;
  for (const auto& [id, token] : by_id_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (int32_t id : ids) {
    const AddedToken& token = by_id_.at(id);
    if (token.normalized) {
      auto it = normalized_content_.find(id);
      normalized_trie_.Insert(it != normalized_content_.end() ? it->second : token.content, id);
    } else {
      raw_trie_.Insert(token.content, id);
    }
  }
}

void AddedVocabulary::Split(std::string_view text, bool normalized,
                            std::vector<TextSegment>& out) const {
  if (text.empty()) return;
  const Trie& trie = normalized ? normalized_trie_ : raw_trie_;
  if (trie.nodes.size() == 1) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    int32_t id = -1;
    const size_t len =
        trie.first_byte[static_cast<uint8_t>(text[pos])] ? trie.LongestAt(text, pos, id) : 0;
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;  // the automaton resumes after the match, whatever lstrip/rstrip do with it
    const AddedToken& token = by_id_.at(id);
    if (token.single_word) {
      const bool start_space = start == 0 || !EndsWithWord(text, start);
      const bool stop_space = stop == text.size() || !StartsWithWord(text, stop);
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) start = std::max(WhitespaceRunBefore(text, start), start_offset);
    if (token.rstrip) stop = WhitespaceRunAfter(text, stop);
    // Only reachable with whitespace-only tokens inside a previous token's rstrip (HF panics).
    start = std::min(start, stop);
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

std::optional<int32_t> AddedVocabulary::TokenToId(std::string_view token) const {
  auto it = by_content_.find(token);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedVocabulary::IdToToken(int32_t id) const {
  auto norm = normalized_content_.find(id);
  if (norm != normalized_content_.end() && by_id_.count(id)) return &norm->second;
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second.content;
}

bool AddedVocabulary::IsSpecialContent(std::string_view token) const {
  return !special_.empty() && special_.find(token) != special_.end();
}

}  // namespace latent::tokenizer
