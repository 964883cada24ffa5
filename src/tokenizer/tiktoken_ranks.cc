#include "tokenizer/tiktoken_ranks.h"

#include <array>
#include <unordered_map>

#include "base/error.h"

namespace latent::tokenizer {

namespace {

// Token ids are int32 in latent, and an id -> token table is kept: ranks past 2^24 would only
// make that table huge for no real vocabulary.
constexpr int64_t kMaxRank = (int64_t{1} << 24) - 1;

// Value of each base64 character, -1 for the others.
const std::array<int8_t, 256>& Base64Values() {
  static const std::array<int8_t, 256> values = [] {
    std::array<int8_t, 256> v{};
    v.fill(-1);
    const std::string_view alphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < alphabet.size(); ++i) v[static_cast<uint8_t>(alphabet[i])] = int8_t(i);
    return v;
  }();
  return values;
}

// The printable form of a field for an error message (long fields are cut).
std::string Quote(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 60)) {
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0x20 && b < 0x7f) {
      out += c;
    } else {
      static const char* kHex = "0123456789abcdef";
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
  }
  if (s.size() > 60) out += "...";
  return out + "'";
}

bool IsFieldSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

bool DecodeBase64(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0) return false;
  size_t padding = 0;
  while (padding < 2 && padding < in.size() && in[in.size() - 1 - padding] == '=') ++padding;
  const auto& values = Base64Values();
  // The last bits read; those left over at the end are ignored, as Python's decoder does.
  uint32_t buffer = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size() - padding; ++i) {
    const int8_t v = values[static_cast<uint8_t>(in[i])];
    if (v < 0) return false;
    buffer = (buffer << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buffer >> bits) & 0xff);
    }
  }
  return true;
}

std::vector<TokenRank> ParseTiktokenRanks(std::string_view text, std::string_view name) {
  std::vector<TokenRank> ranks;
  std::unordered_map<int32_t, size_t> line_of_rank;      // rank -> line it was given on
  std::unordered_map<std::string, size_t> line_of_token;  // token bytes -> line
  size_t line_number = 0;
  size_t pos = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    // Fields separated by spaces; blank lines are skipped, as tiktoken's loader does.
    std::vector<std::string_view> fields;
    size_t i = 0;
    while (i < line.size()) {
      while (i < line.size() && IsFieldSpace(line[i])) ++i;
      const size_t start = i;
      while (i < line.size() && !IsFieldSpace(line[i])) ++i;
      if (i > start) fields.push_back(line.substr(start, i - start));
    }
    if (fields.empty()) continue;
    if (fields.size() != 2) {
      Fail(name, ":", line_number, ": expected 'BASE64 RANK', got ", fields.size(), " fields in ",
           Quote(line));
    }
    if (!DecodeBase64(fields[0], bytes)) {
      Fail(name, ":", line_number, ": ", Quote(fields[0]), " is not valid base64");
    }
    if (bytes.empty()) Fail(name, ":", line_number, ": the token is empty");
    int64_t rank = 0;
    for (char c : fields[1]) {
      if (c < '0' || c > '9' || rank > kMaxRank) {
        Fail(name, ":", line_number, ": rank ", Quote(fields[1]),
             " is not a whole number from 0 to ", kMaxRank);
      }
      rank = rank * 10 + (c - '0');
    }
    if (rank > kMaxRank) {
      Fail(name, ":", line_number, ": rank ", rank, " is above the largest supported, ", kMaxRank);
    }
    const auto r = static_cast<int32_t>(rank);
    if (auto [it, fresh] = line_of_rank.emplace(r, line_number); !fresh) {
      Fail(name, ":", line_number, ": rank ", r, " is given twice (first on line ", it->second,
           ")");
    }
    if (auto [it, fresh] = line_of_token.emplace(bytes, line_number); !fresh) {
      Fail(name, ":", line_number, ": token ", Quote(bytes), " is given twice (first on line ",
           it->second, ")");
    }
    ranks.push_back({bytes, r});
  }
  if (ranks.empty()) Fail(name, ": no tokens (expected one 'BASE64 RANK' line per token)");
  return ranks;
}

}  // namespace latent::tokenizer
