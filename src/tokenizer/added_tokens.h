// Added tokens (tokenizer.json "added_tokens"): strings matched in the text before the model sees
// it, special or not. Tokens with normalized=false are matched in the raw text; those with
// normalized=true in the normalized text, against their normalized content. Matching is
// leftmost-longest, and lstrip/rstrip/single_word adjust or reject matches, as in HF's
// AddedVocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe_model.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizers.h"

namespace latent::tokenizer {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  bool operator==(const AddedToken&) const = default;
};

// A run of text [begin, end) that is either an added token (id >= 0) or text to tokenize (-1).
struct TextSegment {
  size_t begin, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  // Reads tokenizer.json's "added_tokens". Ids are assigned as HF does: a token already known
  // (added earlier or in the model's vocabulary) keeps that id, a new one gets the next id after
  // the model's vocabulary; the "id" fields only matter when they agree, as they do in files HF
  // wrote.
  void Build(const Json& list, const BpeModel& model, const Normalizer* normalizer);
  // The same from tokens with their ids given (a tiktoken tokenizer's special tokens); contents
  // and ids must be distinct, and tokens with normalized=true are matched like the others.
  void BuildWithIds(std::vector<std::pair<int32_t, AddedToken>> tokens);

  // Splits `text` at the added tokens of one kind (normalized or not).
  void Split(std::string_view text, bool normalized, std::vector<TextSegment>& out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The string an added token decodes to (its normalized content where normalization changed
  // it), or nullptr when `id` is not an added token.
  const std::string* IdToToken(int32_t id) const;
  // Whether `token` is the content of a special added token (HF tests the string, not the id).
  bool IsSpecialContent(std::string_view token) const;
  bool empty() const { return by_id_.empty(); }
  size_t size() const { return by_content_.size(); }
  // Ids that are not in the model's vocabulary (for VocabSize).
  const std::unordered_map<int32_t, AddedToken>& by_id() const { return by_id_; }

 private:
  // A byte trie of one kind's patterns, scanned for the longest match at each position.
  void BuildTries();

  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t id = -1;                                    // token ending here
    };
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
    void Insert(std::string_view pattern, int32_t id);
    // Longest pattern starting at text[pos]: sets `id`, returns its length (0: none).
    size_t LongestAt(std::string_view text, size_t pos, int32_t& id) const;
  };

  StringMap by_content_;
  std::unordered_map<int32_t, AddedToken> by_id_;
  std::unordered_map<int32_t, std::string> normalized_content_;
  std::unordered_set<std::string, StringHash, std::equal_to<>> special_;
  Trie raw_trie_, normalized_trie_;
};

}  // namespace latent::tokenizer
