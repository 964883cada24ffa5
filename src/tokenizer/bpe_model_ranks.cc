// BpeModel::FromTokenRanks: tiktoken's byte-level BPE in BpeModel's terms.
//
// tiktoken splits a piece into bytes and repeatedly joins the adjacent pair whose concatenation
// has the lowest rank, the leftmost of equal ranks; a piece that is itself a token is not merged
// at all. BpeModel merges the adjacent pair with the lowest merge rank, leftmost first, so giving
// every pair (a, b) with a + b a token the rank of a + b makes the two the same. (Listing the
// splits as tokenizer.json merges would not: each would get a rank of its own, and where two
// different splits of one token are both possible, HF would not take the leftmost.)
#include <algorithm>
#include <array>
#include <unordered_map>

#include "base/error.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tiktoken_ranks.h"
#include "tokenizer/unicode.h"

namespace latent::tokenizer {

namespace {

uint64_t RankPairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// The byte-level character that stands for byte b.
uint32_t ByteLevelChar(uint8_t b) {
  std::string s;
  AppendByteLevel(std::string_view(reinterpret_cast<const char*>(&b), 1), s);
  size_t pos = 0;
  return NextCodePoint(s, pos);
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::FromTokenRanks(const std::vector<TokenRank>& ranks) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->ignore_merges_ = true;  // tiktoken looks a whole piece up before merging
  m->byte_fallback_ids_.fill(-1);

  std::array<uint32_t, 256> char_of_byte{};
  for (int b = 0; b < 256; ++b) char_of_byte[b] = ByteLevelChar(static_cast<uint8_t>(b));

  int32_t max_id = -1;
  std::unordered_map<std::string_view, int32_t> by_bytes;  // views into `ranks`
  by_bytes.reserve(ranks.size());
  m->vocab_.reserve(ranks.size());
  std::string mapped;
  for (const TokenRank& r : ranks) {
    mapped.clear();
    AppendByteLevel(r.bytes, mapped);
    if (!m->vocab_.emplace(mapped, r.rank).second || !by_bytes.emplace(r.bytes, r.rank).second) {
      Fail("tiktoken BPE: token '", mapped, "' is given twice");
    }
    max_id = std::max(max_id, r.rank);
    if (r.bytes.size() == 1) {
      m->char_ids_.Set(char_of_byte[static_cast<uint8_t>(r.bytes[0])], r.rank);
    }
  }
  m->id_to_token_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : m->vocab_) m->id_to_token_[id] = &token;

  // Every byte valid UTF-8 can hold must be a token: BPE starts from single bytes, and the text
  // it encodes is valid UTF-8 (invalid input is replaced first).
  for (int b = 0; b < 256; ++b) {
    const bool in_utf8 = b < 0xc0 || (b >= 0xc2 && b <= 0xf4);
    if (in_utf8 && m->char_ids_.Find(char_of_byte[b]) == nullptr) {
      Fail("tiktoken BPE: byte 0x", "0123456789abcdef"[b >> 4], "0123456789abcdef"[b & 15],
           " has no token of its own (every single byte must be a token)");
    }
  }

  size_t splits = 0;
  for (const TokenRank& r : ranks) splits += r.bytes.size() - 1;
  m->merges_.Reserve(splits);
  for (const TokenRank& r : ranks) {
    const std::string_view bytes = r.bytes;
    for (size_t k = 1; k < bytes.size(); ++k) {
      const auto a = by_bytes.find(bytes.substr(0, k));
      if (a == by_bytes.end()) continue;
      const auto b = by_bytes.find(bytes.substr(k));
      if (b == by_bytes.end()) continue;
      m->merges_.Set(RankPairKey(a->second, b->second),
                     MergeValue{static_cast<uint32_t>(r.rank), r.rank});
    }
  }
  // Long pieces are merged whole, as tiktoken does (merge_seams_ stays empty).
  m->can_segment_ = false;
  return m;
}

}  // namespace latent::tokenizer
