// The ranks of a tiktoken BPE file (Kimi K2 and Kimi Linear ship one as tiktoken.model): one
// "BASE64 RANK" line per token, the token's bytes in standard base64 and its rank, which is also
// its id. tiktoken merges the adjacent pair whose concatenation has the lowest rank.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace latent::tokenizer {

struct TokenRank {
  std::string bytes;
  int32_t rank;
};

// Parses the contents of a tiktoken file; `name` (its path) starts every error, which names the
// line and what is wrong: not two fields, bad base64, an empty token, a bad rank, a rank or a
// token given twice.
std::vector<TokenRank> ParseTiktokenRanks(std::string_view text, std::string_view name);

// Standard base64 with padding (A-Z a-z 0-9 + /, length a multiple of 4, at most two '=' at the
// end); false for anything else.
bool DecodeBase64(std::string_view in, std::string& out);

}  // namespace latent::tokenizer
