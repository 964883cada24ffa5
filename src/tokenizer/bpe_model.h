// The BPE model of tokenizer.json: byte-level (GPT-2, Qwen, DeepSeek) and sentencepiece-style
// (Llama: byte_fallback, unk_token, fuse_unk), with continuing_subword_prefix,
// end_of_word_suffix and ignore_merges. Merging follows HF tokenizers exactly: the lowest-ranked
// adjacent pair first, the leftmost among equal ranks, in a priority queue over a linked list of
// symbols. Results of short words are cached, since text repeats words.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/flat_map.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/word_cache.h"

namespace latent::tokenizer {

// std::hash over string_view, usable for heterogeneous lookup by string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct TokenRank;  // tiktoken_ranks.h

class BpeModel {
 public:
  // Builds the model from tokenizer.json's "model" object (type "BPE"); other model types fail
  // naming the type.
  static std::unique_ptr<BpeModel> FromJson(const Json& j);
  // Builds tiktoken's BPE from token ranks (bpe_model_ranks.cc): tokens are the ranks' bytes in
  // GPT-2's byte-level alphabet, a token's id is its rank, every split of a token into two tokens
  // is a merge ranked by the merged token's rank, and a piece that is a token is taken whole.
  static std::unique_ptr<BpeModel> FromTokenRanks(const std::vector<TokenRank>& ranks);

  // Appends the ids of one pre-tokenized piece.
  void Tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  // nullptr for an id outside the vocabulary.
  const std::string* IdToToken(int32_t id) const;
  // Number of vocabulary entries (HF's get_vocab_size: the map's size, not max id + 1).
  size_t vocab_size() const { return vocab_.size(); }

 private:
  struct MergeValue {
    uint32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // indices into the symbol array, -1 at the ends
    bool alive;
  };

  BpeModel() = default;
  void TokenizeCached(std::string_view word, std::vector<int32_t>& out) const;
  void TokenizeLong(std::string_view word, std::vector<int32_t>& out) const;
  void MergeWord(std::string_view word, std::vector<int32_t>& out) const;
  void MergeAll(std::vector<Symbol>& symbols) const;
  const MergeValue* FindMerge(int32_t a, int32_t b) const;

  StringMap vocab_;
  std::vector<const std::string*> id_to_token_;  // index: id; nullptr where no token has it
  FlatU64Map<MergeValue> merges_;                // key: left id << 32 | right id
  FlatU64Map<int32_t> char_ids_;                 // id of each single-character token, by code point
  // (last character of a, first character of b) of every merge (a, b): two adjacent characters
  // not in this set are never joined, so a long word can be encoded piece by piece there.
  FlatU64Map<bool> merge_seams_;
  bool can_segment_ = false;
  std::optional<std::string> unk_token_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::array<int32_t, 256> byte_fallback_ids_{};  // id of "<0xAB>", -1 when missing

  WordCache cache_;
};

}  // namespace latent::tokenizer
