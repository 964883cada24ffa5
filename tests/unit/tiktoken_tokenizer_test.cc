// Kimi's tiktoken tokenizer on hand-made files: base64 and rank-file parsing with their errors,
// tiktoken's merge order (expected ids from PyPI tiktoken 0.14.0 on the same ranks and Kimi's
// pattern), the special tokens after the ranks, BOS/EOS and decoding. The parity suite
// (tests/tokenizer/test_kimi_tokenizer.py) checks a full vocabulary on a large corpus.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "tokenizer/tiktoken_ranks.h"
#include "tokenizer/tiktoken_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace latent::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = static_cast<uint8_t>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 1]) << 8;
    if (i + 2 < bytes.size()) n |= static_cast<uint8_t>(bytes[i + 2]);
    out += kAlphabet[(n >> 18) & 63];
    out += kAlphabet[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[n & 63] : '=';
  }
  return out;
}

// All 256 bytes at ranks 0-255, then `extra` tokens from 256 on.
std::string RankFile(const std::vector<std::string>& extra) {
  std::string file;
  for (int b = 0; b < 256; ++b) {
    file += Base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  for (size_t i = 0; i < extra.size(); ++i) {
    file += Base64(extra[i]) + " " + std::to_string(256 + i) + "\n";
  }
  return file;
}

std::string ParseError(const std::string& text) {
  try {
    ParseTiktokenRanks(text, "t.model");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TiktokenRanksTest, DecodesStandardBase64) {
  std::string out;
  EXPECT_TRUE(DecodeBase64("QQ==", out));
  EXPECT_EQ(out, "A");
  EXPECT_TRUE(DecodeBase64("QUI=", out));
  EXPECT_EQ(out, "AB");
  EXPECT_TRUE(DecodeBase64("QUJD", out));
  EXPECT_EQ(out, "ABC");
  EXPECT_TRUE(DecodeBase64("/+8=", out));
  EXPECT_EQ(out, "\xff\xef");
  for (const char* bad : {"QQ=", "Q===", "QQ=A", "a$c=", "QUJD====", "QUJ", "-_8="}) {
    EXPECT_FALSE(DecodeBase64(bad, out)) << bad;
  }
}

TEST(TiktokenRanksTest, ParsesLinesAndNamesTheBadOne) {
  const auto ranks = ParseTiktokenRanks("QQ== 0\r\n\nQUI= 1\n", "t.model");
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].bytes, "AB");
  EXPECT_EQ(ranks[1].rank, 1);
  EXPECT_THAT(ParseError("QQ== 0\nQUI= 0\n"),
              HasSubstr("t.model:2: rank 0 is given twice (first on line 1)"));
  EXPECT_THAT(ParseError("QQ== 0\nQQ== 1\n"),
              HasSubstr("t.model:2: token 'A' is given twice (first on line 1)"));
  EXPECT_THAT(ParseError("QQ== 0\nQ$== 1\n"), HasSubstr("t.model:2: 'Q$==' is not valid base64"));
  EXPECT_THAT(ParseError("QQ== x\n"), HasSubstr("t.model:1: rank 'x' is not a whole number"));
  EXPECT_THAT(ParseError("QQ== 99999999999\n"), HasSubstr("is not a whole number"));
  EXPECT_THAT(ParseError("QQ== 0 1\n"), HasSubstr("t.model:1: expected 'BASE64 RANK'"));
  EXPECT_THAT(ParseError("\n\n"), HasSubstr("t.model: no tokens"));
}

TEST(TiktokenTokenizerTest, MergesAsTiktokenDoes) {
  // "ab" 256, "ba" 257, "aba" 258; [BOS] names the first special id, 259.
  const Tokenizer tok = Tokenizer::FromTiktoken(
      RankFile({"ab", "ba", "aba"}), R"({"added_tokens_decoder": {"259": {"content": "[BOS]"}}})");
  EXPECT_THAT(tok.Encode("ababa", true), ElementsAre(256, 258));
  EXPECT_THAT(tok.Encode("abab", true), ElementsAre(256, 256));
  EXPECT_THAT(tok.Encode("aba", true), ElementsAre(258));
  EXPECT_THAT(tok.Encode("[BOS]ab", true), ElementsAre(259, 256));
  EXPECT_THAT(tok.Encode("中文ab <|reserved_token_260|>", false),
              ElementsAre(228, 184, 173, 230, 150, 135, 256, 32, 260));
  EXPECT_EQ(tok.bos_id(), 259);
  EXPECT_EQ(tok.eos_id(), std::nullopt);  // no [EOS] among the special tokens
  EXPECT_EQ(tok.VocabSize(), 259u + kKimiSpecialTokenCount);
  EXPECT_TRUE(tok.IsSpecial(259));
  EXPECT_FALSE(tok.IsSpecial(256));
  const std::vector<int32_t> ids = {259, 228, 184, 173, 256, 260};
  EXPECT_EQ(tok.Decode(ids, false), "[BOS]中ab<|reserved_token_260|>");
  EXPECT_EQ(tok.Decode(ids, true), "中ab");
  const std::vector<int32_t> partial = {228, 184};  // the first two bytes of 中
  EXPECT_EQ(tok.Decode(partial, false), "\xef\xbf\xbd");
}

TEST(TiktokenTokenizerTest, RejectsRanksThatOverlapTheSpecialIds) {
  std::string file = RankFile({"ab"});
  file += Base64("xyz") + " 400\n";
  try {
    Tokenizer::FromTiktoken(file, "{}", "t.model");
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()),
                HasSubstr("t.model: rank 400 is not below the number of tokens, 258"));
  }
}

}  // namespace
}  // namespace latent::tokenizer
