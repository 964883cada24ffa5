// The tokenizer's parts on hand-made tokenizer.json pieces: each normalizer, pre-tokenizer and
// decoder, the BPE options, added-token behaviours, post-processing, errors naming unsupported
// components, the invalid-UTF-8 policy and the streaming detokenizer on split characters.
// Expected values come from HF tokenizers 0.23.3 run on the same JSON (noted where so); the
// parity suite (tests/tokenizer) checks real tokenizers on a large corpus.
#include "tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/decoders.h"
#include "tokenizer/normalizers.h"
#include "tokenizer/pre_tokenizers.h"
#include "tokenizer/streaming_detokenizer.h"
#include "tokenizer/unicode.h"
#include "error_of.h"

namespace latent::tokenizer {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Normalized(const char* normalizer_json, std::string text) {
  MakeNormalizer(json::parse(normalizer_json))->Normalize(text);
  return text;
}

std::vector<std::string> PreTokenized(const char* pre_tokenizer_json, const std::string& text) {
  std::vector<PreToken> pieces = {{text, true}};
  MakePreTokenizer(json::parse(pre_tokenizer_json))->PreTokenize(pieces);
  std::vector<std::string> out;
  for (const PreToken& p : pieces) out.push_back(p.text);
  return out;
}

std::string Decoded(const char* decoder_json, std::vector<std::string> tokens) {
  MakeDecoder(json::parse(decoder_json))->DecodeChain(tokens);
  std::string out;
  for (const std::string& t : tokens) out += t;
  return out;
}

using test::ErrorOf;

// ---- Normalizers (expected values from HF's normalize_str) ----

TEST(TokenizerNormalizers, UnicodeForms) {
  EXPECT_EQ(Normalized(R"({"type": "NFC"})", "e\u0301"), "é");
  EXPECT_EQ(Normalized(R"({"type": "NFD"})", "é"), "e\u0301");
  EXPECT_EQ(Normalized(R"({"type": "NFKC"})", "ﬁ①"), "fi1");
  EXPECT_EQ(Normalized(R"({"type": "NFKD"})", "éﬁ"), "e\u0301fi");
  EXPECT_EQ(Normalized(R"({"type": "NFC"})", "plain ascii"), "plain ascii");
}

// HF normalizes with Unicode 9.0 data: marks and compositions added since stay as written, while
// 9.0 ones around them still reorder and compose (expected values from HF's normalize_str).
TEST(TokenizerNormalizers, UnicodeFormsUseUnicode9Data) {
  EXPECT_EQ(Normalized(R"({"type": "NFC"})", "\u1df8\u302a"), "\u1df8\u302a");
  EXPECT_EQ(Normalized(R"({"type": "NFD"})", "\u1df8\u302a"), "\u1df8\u302a");
  EXPECT_EQ(Normalized(R"({"type": "NFC"})", "\U00011935\U00011930"), "\U00011935\U00011930");
  EXPECT_EQ(Normalized(R"({"type": "NFKC"})", "a\u1df8\u0301"), "a\u1df8\u0301");
  EXPECT_EQ(Normalized(R"({"type": "NFC"})", "a\u0316\u0301\u0300"), "\u00e1\u0316\u0300");
}

TEST(TokenizerNormalizers, PrependReplaceSequence) {
  const char* llama = R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})";
  EXPECT_EQ(Normalized(llama, "a b"), "▁a▁b");
  EXPECT_EQ(Normalized(llama, ""), "");  // Prepend leaves empty text alone
  EXPECT_EQ(Normalized(R"({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "})",
                       "a \t\n b"),
            "a b");
}

TEST(TokenizerNormalizers, LowercaseAndStrip) {
  EXPECT_EQ(Normalized(R"({"type": "Lowercase"})", "ÀBC İΣ"), "àbc i\u0307σ");
  EXPECT_EQ(
      Normalized(R"({"type": "Strip", "strip_left": true, "strip_right": true})", "  a b \u3000"),
      "a b");
  EXPECT_EQ(Normalized(R"({"type": "Strip", "strip_left": false, "strip_right": true})", "  a "),
            "  a");
}

TEST(TokenizerNormalizers, UnsupportedTypeIsNamed) {
  EXPECT_THAT(ErrorOf([] { MakeNormalizer(json::parse(R"({"type": "Precompiled"})")); }),
              HasSubstr("unsupported normalizer type 'Precompiled'"));
}

// ---- Pre-tokenizers (expected values from HF's pre_tokenize_str) ----

std::string SplitJson(const char* behavior, bool invert) {
  return json{
      {"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}}
      .dump();
}

TEST(TokenizerPreTokenizers, SplitBehaviors) {
  const std::string text = "a-b--c-";
  EXPECT_THAT(PreTokenized(SplitJson("Removed", false).c_str(), text), ElementsAre("a", "b", "c"));
  EXPECT_THAT(PreTokenized(SplitJson("Removed", true).c_str(), text),
              ElementsAre("-", "-", "-", "-"));
  EXPECT_THAT(PreTokenized(SplitJson("Isolated", false).c_str(), text),
              ElementsAre("a", "-", "b", "-", "-", "c", "-"));
  EXPECT_THAT(PreTokenized(SplitJson("MergedWithPrevious", false).c_str(), text),
              ElementsAre("a-", "b-", "-", "c-"));
  EXPECT_THAT(PreTokenized(SplitJson("MergedWithPrevious", true).c_str(), text),
              ElementsAre("a", "-b", "-", "-c", "-"));
  EXPECT_THAT(PreTokenized(SplitJson("MergedWithNext", false).c_str(), text),
              ElementsAre("a", "-b", "-", "-c", "-"));
  EXPECT_THAT(PreTokenized(SplitJson("MergedWithNext", true).c_str(), text),
              ElementsAre("a-", "b-", "-", "c-"));
  EXPECT_THAT(PreTokenized(SplitJson("Contiguous", false).c_str(), text),
              ElementsAre("a", "-", "b", "--", "c", "-"));
}

TEST(TokenizerPreTokenizers, SplitRegexWithLookahead) {
  EXPECT_THAT(PreTokenized(R"({"type": "Split", "pattern": {"Regex": "\\s+(?!\\S)|\\s+"},
                               "behavior": "Isolated", "invert": false})",
                           "a   b  "),
              ElementsAre("a", "  ", " ", "b", "  "));
  // Oniguruma's \s (what HF uses) is Unicode White_Space, which U+180E is not.
  EXPECT_THAT(PreTokenized(R"({"type": "Split", "pattern": {"Regex": "\\s+"},
                               "behavior": "Removed", "invert": false})",
                           "a\u180eb\u3000c"),
              ElementsAre("a\u180eb", "c"));
}

TEST(TokenizerPreTokenizers, ByteLevel) {
  EXPECT_THAT(PreTokenized(R"({"type": "ByteLevel", "add_prefix_space": true, "use_regex": true})",
                           "Hello world!  x"),
              ElementsAre("ĠHello", "Ġworld", "!", "Ġ", "Ġx"));
  EXPECT_THAT(
      PreTokenized(R"({"type": "ByteLevel", "add_prefix_space": false, "use_regex": false})",
                   "Hi there"),
      ElementsAre("HiĠthere"));
}

TEST(TokenizerPreTokenizers, Metaspace) {
  EXPECT_THAT(PreTokenized(R"({"type": "Metaspace", "replacement": "▁",
                               "prepend_scheme": "always", "split": true})",
                           "Hey  friend"),
              ElementsAre("▁Hey", "▁", "▁friend"));
  EXPECT_THAT(PreTokenized(R"({"type": "Metaspace", "replacement": "▁",
                               "prepend_scheme": "always", "split": false})",
                           "Hey friend"),
              ElementsAre("▁Hey▁friend"));
  EXPECT_THAT(PreTokenized(R"({"type": "Metaspace", "replacement": "▁",
                               "prepend_scheme": "never", "split": true})",
                           "Hey friend"),
              ElementsAre("Hey", "▁friend"));
  // "first" prepends only to the piece where the input starts.
  std::vector<PreToken> pieces = {{"a b", true}, {"c", false}};
  MakePreTokenizer(json::parse(R"({"type": "Metaspace", "replacement": "▁",
                                   "prepend_scheme": "first", "split": false})"))
      ->PreTokenize(pieces);
  EXPECT_EQ(pieces[0].text, "▁a▁b");
  EXPECT_EQ(pieces[1].text, "c");
}

TEST(TokenizerPreTokenizers, DigitsPunctuationWhitespace) {
  EXPECT_THAT(PreTokenized(R"({"type": "Digits", "individual_digits": true})", "a123b٣"),
              ElementsAre("a", "1", "2", "3", "b", "٣"));
  EXPECT_THAT(PreTokenized(R"({"type": "Digits", "individual_digits": false})", "a123b٣4"),
              ElementsAre("a", "123", "b", "٣4"));
  EXPECT_THAT(PreTokenized(R"({"type": "Punctuation", "behavior": "Isolated"})", "Hey, you!? x"),
              ElementsAre("Hey", ",", " you", "!", "?", " x"));
  EXPECT_THAT(PreTokenized(R"({"type": "Punctuation", "behavior": "Removed"})", "Hey, you!"),
              ElementsAre("Hey", " you"));
  EXPECT_THAT(PreTokenized(R"({"type": "Whitespace"})", "Hey, you!  é\u0301x_1"),
              ElementsAre("Hey", ",", "you", "!", "é\u0301x_1"));
  EXPECT_THAT(PreTokenized(R"({"type": "WhitespaceSplit"})", "Hey,  you!\t\nx"),
              ElementsAre("Hey,", "you!", "x"));
  EXPECT_THAT(PreTokenized(R"({"type": "Sequence", "pretokenizers": [
                               {"type": "WhitespaceSplit"},
                               {"type": "Digits", "individual_digits": true}]})",
                           "ab12 c3"),
              ElementsAre("ab", "1", "2", "c", "3"));
}

TEST(TokenizerPreTokenizers, UnsupportedTypeIsNamed) {
  EXPECT_THAT(ErrorOf([] { MakePreTokenizer(json::parse(R"({"type": "UnicodeScripts"})")); }),
              HasSubstr("unsupported pre-tokenizer type 'UnicodeScripts'"));
  EXPECT_THAT(ErrorOf([] {
                MakePreTokenizer(json::parse(R"({"type": "Split", "pattern": {"Regex": "("},
                                                 "behavior": "Isolated", "invert": false})"));
              }),
              HasSubstr("regex '(' does not compile"));
}

// ---- Decoders (expected values from HF's decoder.decode) ----

TEST(TokenizerDecoders, ByteLevelAndMetaspace) {
  EXPECT_EQ(Decoded(R"({"type": "ByteLevel"})", {"Ġhello", "Ġw", "orld"}), " hello world");
  EXPECT_EQ(Decoded(R"({"type": "ByteLevel"})", {"ä¸", "Ġx"}), "\ufffd x");  // cut character
  EXPECT_EQ(Decoded(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"})",
                    {"▁Hey", "▁friend", "▁▁x"}),
            "Hey friend  x");
  EXPECT_EQ(Decoded(R"({"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never"})",
                    {"▁Hey", "▁x"}),
            " Hey x");
}

TEST(TokenizerDecoders, LlamaChainWithByteFallback) {
  const char* llama = R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})";
  EXPECT_EQ(Decoded(llama, {"▁Hey", "<0xE4>", "<0xB8>", "<0xAD>", "▁x"}), "Hey中 x");
  // An invalid run becomes one U+FFFD per byte, valid bytes included.
  EXPECT_EQ(Decoded(llama, {"<0x41>", "<0xE4>", "<0x41>", "b"}), "\ufffd\ufffd\ufffdb");
  EXPECT_EQ(Decoded(R"({"type": "Strip", "content": " ", "start": 1, "stop": 1})", {"  a  "}),
            " a ");
  EXPECT_EQ(
      Decoded(R"({"type": "BPEDecoder", "suffix": "</w>"})", {"hel", "lo</w>", "wor", "ld</w>"}),
      "hello world");
}

TEST(TokenizerDecoders, UnsupportedTypeIsNamed) {
  EXPECT_THAT(ErrorOf([] { MakeDecoder(json::parse(R"({"type": "CTC"})")); }),
              HasSubstr("unsupported decoder type 'CTC'"));
}

// ---- Whole tokenizers: BPE options, added tokens, post-processing ----

json Bpe(json vocab, json merges) {
  return {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
}

json AddedToken(int id, const std::string& content, json flags) {
  json t = {{"id", id},        {"content", content}, {"single_word", false}, {"lstrip", false},
            {"rstrip", false}, {"normalized", true}, {"special", false}};
  t.update(flags);
  return t;
}

// Printable ASCII characters as tokens 0..94, "ab", "abc", "bc", and added tokens exercising
// special, lstrip, rstrip, single_word and normalized; Lowercase normalizer; <s> template.
json CharsTokenizer() {
  json vocab = json::object();
  for (int c = 0x20; c < 0x7f; ++c) vocab[std::string(1, static_cast<char>(c))] = c - 0x20;
  vocab["ab"] = 95;
  vocab["abc"] = 96;
  vocab["bc"] = 97;
  json j;
  j["added_tokens"] = {
      AddedToken(98, "<s>", {{"special", true}, {"normalized", false}}),
      AddedToken(99, "[L]", {{"special", true}, {"normalized", false}, {"lstrip", true}}),
      AddedToken(100, "[R]", {{"normalized", false}, {"rstrip", true}}),
      AddedToken(101, "word", {{"normalized", false}, {"single_word", true}}),
      AddedToken(102, "HI", {{"normalized", true}})};
  j["normalizer"] = {{"type", "Lowercase"}};
  j["pre_tokenizer"] = nullptr;
  j["post_processor"] = json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [98], "tokens": ["<s>"]}}})");
  j["decoder"] = {{"type", "Fuse"}};
  j["model"] = Bpe(vocab, json::array({"a b", "b c", "ab c"}));
  return j;
}

// Sentencepiece-style (Llama): Prepend/Replace normalizers, byte fallback or a fused unk token.
json SpTokenizer(bool byte_fallback) {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  char name[8];
  for (int b = 0; byte_fallback && b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = vocab.size();
  }
  for (const char* t : {"▁", "a", "b", "c", "▁a", "ab", "▁ab", "é"}) vocab[t] = vocab.size();
  json j;
  j["added_tokens"] = {AddedToken(0, "<unk>", {{"special", true}, {"normalized", false}}),
                       AddedToken(1, "<s>", {{"special", true}, {"normalized", false}}),
                       AddedToken(2, "</s>", {{"special", true}, {"normalized", false}})};
  j["normalizer"] = json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})");
  j["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  j["model"] = Bpe(vocab, json::parse(R"([["▁", "a"], ["a", "b"], ["▁a", "b"]])"));
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = true;
  j["model"]["byte_fallback"] = byte_fallback;
  return j;
}

// continuing_subword_prefix "##" and end_of_word_suffix "</w>", with an unk token.
json AffixTokenizer() {
  json j;
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  j["model"] = Bpe({{"[UNK]", 0},
                    {"h", 1},
                    {"##e", 2},
                    {"##l", 3},
                    {"##o</w>", 4},
                    {"he", 5},
                    {"hel", 6},
                    {"hell", 7},
                    {"hello</w>", 8},
                    {"##l</w>", 9},
                    {"o", 10},
                    {"##o", 11}},
                   json::array({"h ##e", "he ##l", "hel ##l", "hell ##o</w>"}));
  j["model"]["unk_token"] = "[UNK]";
  j["model"]["continuing_subword_prefix"] = "##";
  j["model"]["end_of_word_suffix"] = "</w>";
  return j;
}

// "abc" is in the vocabulary but no merge makes it: only ignore_merges finds it.
json IgnoreMergesTokenizer(bool ignore) {
  json j;
  j["pre_tokenizer"] = {{"type", "WhitespaceSplit"}};
  j["model"] = Bpe({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"abc", 4}}, json::array({"a b"}));
  j["model"]["ignore_merges"] = ignore;
  return j;
}

Tokenizer Load(const json& j, const std::string& config = "") {
  return Tokenizer::FromJson(j.dump(), config);
}

struct HfCase {
  const char* tokenizer;
  const char* text;
  std::vector<int32_t> ids, ids_plain;
  const char* decoded;
  const char* decoded_skip;
};

// Generated with HF tokenizers 0.23.3 (Tokenizer.from_str on the JSON above): encode with and
// without special tokens, decode with and without skip_special_tokens.
const std::vector<HfCase>& HfCases() {
  static const std::vector<HfCase> cases = {
      {"chars", "abc", {98, 96}, {96}, "<s>abc", "abc"},
      {"chars", "abcab", {98, 96, 95}, {96, 95}, "<s>abcab", "abcab"},
      {"chars", "x<s>y", {98, 88, 98, 89}, {88, 98, 89}, "<s>x<s>y", "xy"},
      {"chars", "a [L] b", {98, 65, 99, 0, 66}, {65, 99, 0, 66}, "<s>a[L] b", "a b"},
      {"chars", "a [R]  b", {98, 65, 0, 100, 66}, {65, 0, 100, 66}, "<s>a [R]b", "a [R]b"},
      {"chars",
       "word words aword word.",
       {98, 101, 0, 87, 79, 82, 68, 83, 0, 65, 87, 79, 82, 68, 0, 101, 14},
       {101, 0, 87, 79, 82, 68, 83, 0, 65, 87, 79, 82, 68, 0, 101, 14},
       "<s>word words aword word.",
       "word words aword word."},
      {"chars",
       "HI hi Hi",
       {98, 102, 0, 102, 0, 102},
       {102, 0, 102, 0, 102},
       "<s>hi hi hi",
       "hi hi hi"},
      {"chars", "<S>", {98, 28, 83, 30}, {28, 83, 30}, "<s><s>", "<s>"},
      {"chars", "", {98}, {}, "<s>", ""},
      {"sp", "ab", {265}, {265}, "ab", "ab"},
      {"sp", " ab", {259, 265}, {259, 265}, " ab", " ab"},
      {"sp", "ab c", {265, 259, 262}, {265, 259, 262}, "ab c", "ab c"},
      {"sp", "中é", {259, 231, 187, 176, 266}, {259, 231, 187, 176, 266}, "中é", "中é"},
      {"sp",
       "x<s>ab</s> a",
       {259, 123, 1, 265, 2, 259, 263},
       {259, 123, 1, 265, 2, 259, 263},
       "x<s> ab</s>  a",
       "x ab  a"},
      {"sp", "", {}, {}, "", ""},
      {"sp_unk", "ab 中文x", {9, 3, 0}, {9, 3, 0}, "ab <unk>", "ab "},
      {"sp_unk", "中", {3, 0}, {3, 0}, "<unk>", ""},
      {"sp_unk", "a中b", {7, 0, 5}, {7, 0, 5}, "a<unk>b", "ab"},
      {"affix", "hello", {8}, {8}, "hello</w>", "hello</w>"},
      {"affix", "hel", {5, 9}, {5, 9}, "he ##l</w>", "he ##l</w>"},
      {"affix",
       "helo hello",
       {6, 4, 8},
       {6, 4, 8},
       "hel ##o</w> hello</w>",
       "hel ##o</w> hello</w>"},
      {"affix", "ho", {1, 4}, {1, 4}, "h ##o</w>", "h ##o</w>"},
      {"ignore_on", "abc", {4}, {4}, "abc", "abc"},
      {"ignore_on", "abcc", {3, 2, 2}, {3, 2, 2}, "ab c c", "ab c c"},
      {"ignore_off", "abc", {3, 2}, {3, 2}, "ab c", "ab c"},
      {"ignore_off", "abcc", {3, 2, 2}, {3, 2, 2}, "ab c c", "ab c c"},
  };
  return cases;
}

const Tokenizer& Named(const std::string& name) {
  static const auto* tokenizers = new std::map<std::string, Tokenizer>([] {
    std::map<std::string, Tokenizer> m;
    m.emplace("chars", Load(CharsTokenizer()));
    m.emplace("sp", Load(SpTokenizer(true)));
    m.emplace("sp_unk", Load(SpTokenizer(false)));
    m.emplace("affix", Load(AffixTokenizer()));
    m.emplace("ignore_on", Load(IgnoreMergesTokenizer(true)));
    m.emplace("ignore_off", Load(IgnoreMergesTokenizer(false)));
    return m;
  }());
  return tokenizers->at(name);
}

TEST(TokenizerEncode, MatchesHfOnHandMadeTokenizers) {
  for (const HfCase& c : HfCases()) {
    SCOPED_TRACE(std::string(c.tokenizer) + ": '" + c.text + "'");
    const Tokenizer& tok = Named(c.tokenizer);
    EXPECT_EQ(tok.Encode(c.text, true), c.ids);
    EXPECT_EQ(tok.Encode(c.text, false), c.ids_plain);
    EXPECT_EQ(tok.Decode(c.ids, false), c.decoded);
    EXPECT_EQ(tok.Decode(c.ids, true), c.decoded_skip);
  }
}

TEST(TokenizerEncode, LookupsAndSpecialTokens) {
  const Tokenizer& tok = Named("chars");
  EXPECT_EQ(tok.TokenToId("<s>"), 98);
  EXPECT_EQ(tok.TokenToId("abc"), 96);
  EXPECT_EQ(tok.TokenToId("nope"), std::nullopt);
  EXPECT_EQ(tok.IdToToken(99), "[L]");
  EXPECT_EQ(tok.IdToToken(102), "hi");  // a normalized added token decodes to its normalized form
  EXPECT_EQ(tok.IdToToken(5000), std::nullopt);
  EXPECT_TRUE(tok.IsSpecial(98));
  EXPECT_FALSE(tok.IsSpecial(100));
  EXPECT_EQ(tok.VocabSize(), 103u);
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{65, 5000, 66}, false), "ab");  // unknown ids skipped
}

TEST(TokenizerEncode, BosEosFromTokenizerConfig) {
  // With a post_processor in tokenizer.json, it decides (as in HF and transformers 5): like
  // DeepSeek V3's, this one adds nothing although the config says add_bos_token.
  json byte_level_processor = SpTokenizer(true);
  byte_level_processor["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}};
  const Tokenizer with_template = Load(
      byte_level_processor, R"({"add_bos_token": true, "bos_token": "<s>", "eos_token": "</s>"})");
  EXPECT_EQ(with_template.bos_id(), 1);
  EXPECT_EQ(with_template.eos_id(), 2);
  EXPECT_EQ(with_template.Encode("ab", true), (std::vector<int32_t>{265}));
  // Without one, tokenizer_config's add_bos_token/add_eos_token do; tokens may be AddedToken
  // objects.
  json j = SpTokenizer(true);
  j["post_processor"] = nullptr;
  const Tokenizer from_config = Load(j, R"({"add_bos_token": true, "add_eos_token": true,
      "bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>"})");
  EXPECT_EQ(from_config.Encode("ab", true), (std::vector<int32_t>{1, 265, 2}));
  EXPECT_EQ(from_config.Encode("ab", false), (std::vector<int32_t>{265}));
}

TEST(TokenizerEncode, UnsupportedComponentsAreNamed) {
  json wordpiece = CharsTokenizer();
  wordpiece["model"] = {{"type", "WordPiece"}, {"vocab", json::object()}};
  EXPECT_THAT(ErrorOf([&] { Load(wordpiece); }), HasSubstr("unsupported model type 'WordPiece'"));
  json processor = CharsTokenizer();
  processor["post_processor"] = {{"type", "Frobnicate"}};
  EXPECT_THAT(ErrorOf([&] { Load(processor); }),
              HasSubstr("unsupported post-processor type 'Frobnicate'"));
  json bad_merge = IgnoreMergesTokenizer(false);
  bad_merge["model"]["merges"] = json::array({"a x"});
  EXPECT_THAT(ErrorOf([&] { Load(bad_merge); }), HasSubstr("'x', which is not in the vocabulary"));
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromJson("{not json"); }), HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf([] { Tokenizer::FromDir("/nonexistent"); }), HasSubstr("tokenizer.json"));
}

TEST(TokenizerEncode, ConcurrentEncodesAgree) {
  // The word cache and the regex match state are shared or per thread; results must not mix.
  const Tokenizer tok = Load(SpTokenizer(true));
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i)
    texts.push_back("ab c " + std::to_string(i * 7919) + " 中é" + std::string(i % 7, 'a'));
  std::vector<std::vector<int32_t>> want;
  for (const std::string& t : texts) want.push_back(tok.Encode(t, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * (t + 1) + round) % texts.size();
          if (tok.Encode(texts[k], true) != want[k]) ++mismatches;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// ---- Invalid UTF-8 ----

TEST(TokenizerUtf8, InvalidBytesBecomeReplacementCharacters) {
  std::string fixed;
  EXPECT_FALSE(
      SanitizeUtf8("a\xff"
                   "b\xe4\xb8"
                   "c\xed\xa0\x80",
                   fixed));
  // As Python's bytes.decode("utf-8", "replace"): one U+FFFD per maximal invalid subsequence.
  EXPECT_EQ(fixed,
            "a\ufffd"
            "b\ufffd"
            "c\ufffd\ufffd\ufffd");
  EXPECT_TRUE(SanitizeUtf8("valid é 中 😀", fixed));
  const Tokenizer& tok = Named("sp");
  EXPECT_EQ(tok.Encode("x\xffy", false), tok.Encode("x\ufffdy", false));
}

TEST(TokenizerUtf8, RandomBytesNeverCrash) {
  std::mt19937 rng(1);
  const Tokenizer& byte_fallback = Named("sp");
  const Tokenizer& chars = Named("chars");
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(rng() % 40, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() % 256);
    for (const Tokenizer* tok : {&byte_fallback, &chars}) {
      const std::vector<int32_t> ids = tok->Encode(bytes, true);
      EXPECT_TRUE(IsValidUtf8(tok->Decode(ids, false)));
    }
  }
}

// ---- Streaming detokenizer ----

// Pushes `ids` one at a time; returns the pieces, Finish()'s included.
std::vector<std::string> Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
  StreamingDetokenizer stream(tok, skip);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(stream.Push(id));
  pieces.push_back(stream.Finish());
  return pieces;
}

// A byte-level tokenizer whose vocabulary is the 256 byte characters plus "Ġx".
json ByteLevelTokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    AppendByteLevel(std::string(1, static_cast<char>(b)), c);
    vocab[c] = b;
  }
  vocab["Ġx"] = 256;
  json j;
  j["added_tokens"] = {AddedToken(257, "<|end|>", {{"special", true}, {"normalized", false}})};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = Bpe(vocab, json::array({"Ġ x"}));
  return j;
}

// The byte-level tokenizer plus multi-byte tokens: 258 is U+FFFD itself (real text, as in
// Qwen's and DeepSeek's vocabularies), 259 the end of 你 then the start of another character.
json ByteLevelWithMultiByteTokens() {
  json j = ByteLevelTokenizer();
  std::string fffd, straddle;
  AppendByteLevel("\xef\xbf\xbd", fffd);
  AppendByteLevel("\xbd\xa0\xe4", straddle);
  j["model"]["vocab"][fffd] = 258;
  j["model"]["vocab"][straddle] = 259;
  return j;
}

TEST(TokenizerStreaming, NeverSplitsAByteLevelCharacter) {
  const Tokenizer tok = Load(ByteLevelTokenizer());
  const std::vector<int32_t> ids = tok.Encode("中 x😀<|end|>", false);
  // 中 is three byte tokens, 😀 four: nothing comes out until each character is complete.
  EXPECT_THAT(Stream(tok, ids, false),
              ElementsAre("", "", "中", " x", "", "", "", "😀", "<|end|>", ""));
  EXPECT_THAT(Stream(tok, ids, true), ElementsAre("", "", "中", " x", "", "", "", "😀", "", ""));
  // A character cut at the end of the stream comes out as U+FFFD, as Decode renders it.
  const std::vector<int32_t> cut(ids.begin(), ids.begin() + 2);
  EXPECT_THAT(Stream(tok, cut, false), ElementsAre("", "", "\ufffd"));
  EXPECT_EQ(tok.Decode(cut, false), "\ufffd");
}

TEST(TokenizerStreaming, WaitsForTheEndOfAByteFallbackRun) {
  const Tokenizer& tok = Named("sp");
  // ▁ 中(3 byte tokens) é, then an invalid run that ByteFallback renders as one U+FFFD per byte.
  const std::vector<int32_t> ids = {259, 231, 187, 176, 266, 3 + 0x41, 3 + 0xe4, 3 + 0x41, 260};
  const std::vector<std::string> pieces = Stream(tok, ids, false);
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_TRUE(IsValidUtf8(p));
    joined += p;
  }
  EXPECT_EQ(joined, tok.Decode(ids, false));
  EXPECT_EQ(joined, "中é\ufffd\ufffd\ufffda");
}

TEST(TokenizerStreaming, EqualsOneShotDecodingOnRandomIds) {
  std::mt19937 rng(3);
  const Tokenizer byte_level = Load(ByteLevelTokenizer());
  const Tokenizer multi_byte = Load(ByteLevelWithMultiByteTokens());
  for (const Tokenizer* tok : {&Named("sp"), &Named("chars"), &byte_level, &multi_byte}) {
    for (int i = 0; i < 300; ++i) {
      std::vector<int32_t> ids(1 + rng() % 30);
      for (int32_t& id : ids) id = static_cast<int32_t>(rng() % 270);
      for (bool skip : {false, true}) {
        std::string joined;
        for (const std::string& p : Stream(*tok, ids, skip)) {
          EXPECT_TRUE(IsValidUtf8(p));
          joined += p;
        }
        EXPECT_EQ(joined, tok->Decode(ids, skip));
      }
    }
  }
}

TEST(TokenizerStreaming, TextThatHoldsTheReplacementCharacterComesOutAtOnce) {
  const Tokenizer tok = Load(ByteLevelWithMultiByteTokens());
  StreamingDetokenizer stream(tok, false);
  for (int i = 0; i < 300; ++i) ASSERT_EQ(stream.Push(258), "\ufffd") << "token " << i;
  EXPECT_EQ(stream.Push('a'), "a");
  EXPECT_EQ(stream.Finish(), "");
}

TEST(TokenizerStreaming, BytesThatCanNeverEndACharacterComeOutAtOnce) {
  const Tokenizer tok = Load(ByteLevelTokenizer());
  // A lone 0xF0 waits for its next byte; another 0xF0 makes it U+FFFD for good.
  StreamingDetokenizer stream(tok, false);
  EXPECT_EQ(stream.Push(0xf0), "");
  for (int i = 0; i < 100; ++i) ASSERT_EQ(stream.Push(0xf0), "\ufffd") << "token " << i;
  EXPECT_EQ(stream.Finish(), "\ufffd");
  // A stray continuation byte never starts a character.
  EXPECT_EQ(stream.Push(0x80), "\ufffd");
  EXPECT_EQ(stream.Push(0xe4), "");
  EXPECT_EQ(stream.Push(0xbd), "");
  EXPECT_EQ(stream.Push('a'), "\ufffda");  // E4 BD is one maximal subpart: one U+FFFD
}

TEST(TokenizerStreaming, TheWindowStaysShortHoweverLongTheStream) {
  // Each step decodes a few tokens, whatever the stream's length: text that really holds
  // U+FFFD, lone lead bytes, stray continuation bytes, and tokens that each end one character
  // and start the next (no token boundary falls between characters).
  const Tokenizer tok = Load(ByteLevelWithMultiByteTokens());
  const std::vector<std::vector<int32_t>> streams = {
      std::vector<int32_t>(2000, 258), std::vector<int32_t>(2000, 0xf0),
      std::vector<int32_t>(2000, 0x80), [] {
        std::vector<int32_t> ids(2000, 259);
        ids[0] = 0xe4;
        return ids;
      }()};
  for (const std::vector<int32_t>& ids : streams) {
    StreamingDetokenizer stream(tok, false);
    std::string joined;
    size_t most_window = 0, most_decoded = 0;
    for (int32_t id : ids) {
      joined += stream.Push(id);
      most_window = std::max(most_window, stream.window_size());
      most_decoded = std::max(most_decoded, stream.last_decoded_tokens());
    }
    joined += stream.Finish();
    EXPECT_EQ(joined, tok.Decode(ids, false)) << ids[1];
    EXPECT_LE(most_window, 20u) << ids[1];
    EXPECT_LE(most_decoded, 60u) << ids[1];
  }
}

TEST(TokenizerStreaming, AfterAPromptTheOutputIsWhatItAddsToThePromptsText) {
  const Tokenizer& tok = Named("sp");
  const int32_t bos = 1, space_a = 263, ab = 264, space_ab = 265;
  const auto byte = [](int b) { return 3 + b; };  // <0xAB> tokens
  // Alone, the output's first space goes (Strip at the start of a text); after the prompt it
  // stays, as decoding both together gives it (vLLM primes its detokenizer with the prompt).
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{space_a, ab}, true), "aab");
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{bos, space_ab, space_a, ab}, true), "ab aab");
  const std::vector<int32_t> prompt = {bos, space_ab};
  StreamingDetokenizer stream(tok, true);
  stream.Prime(prompt);
  EXPECT_EQ(stream.Push(space_a), " a");
  EXPECT_EQ(stream.Push(ab), "ab");
  EXPECT_EQ(stream.Finish(), "");
  EXPECT_EQ(DecodeAfter(tok, prompt, std::vector<int32_t>{space_a, ab}, true), " aab");
  // A ByteFallback run ending the prompt: bytes that begin a character come out with the
  // output's bytes that end it; whole characters are the prompt's text.
  EXPECT_EQ(DecodeAfter(tok, std::vector<int32_t>{bos, space_a, byte(0xc3)},
                        std::vector<int32_t>{byte(0xa9), space_a}, true),
            "\u00e9 a");
  EXPECT_EQ(DecodeAfter(tok, std::vector<int32_t>{bos, space_a, byte(0xc3), byte(0xa9)},
                        std::vector<int32_t>{space_a}, true),
            " a");
  // Byte-level: the same for a character the prompt's last bytes began.
  const Tokenizer byte_level = Load(ByteLevelTokenizer());
  EXPECT_EQ(DecodeAfter(byte_level, std::vector<int32_t>{'x', 0xe4, 0xbd},
                        std::vector<int32_t>{0xa0, 'a'}, false),
            "\u4f60a");
}

TEST(TokenizerStreaming, APromptsWholeByteRunCharactersAreClosed) {
  const Tokenizer& tok = Named("sp");
  const int32_t bos = 1, space_a = 263;
  const auto byte = [](int b) { return 3 + b; };  // <0xAB> tokens
  // "ꙮ" as Llama encodes it, then an output whose first byte 0xE4 joined to the run would make
  // it no valid UTF-8: all U+FFFD, prompt part included, and no text extending the prompt's.
  const std::vector<int32_t> prompt = {bos, space_a, byte(0xea), byte(0x99), byte(0xae)};
  const std::vector<int32_t> output = {byte(0xe4), space_a, space_a};
  ASSERT_EQ(tok.Decode(prompt, true), "a\ua66e");
  ASSERT_EQ(tok.Decode(std::vector<int32_t>{bos, space_a, byte(0xea), byte(0x99), byte(0xae),
                                            byte(0xe4), space_a},
                       true),
            "a\ufffd\ufffd\ufffd\ufffd a");
  // The output's text is its own decoding after the prompt's last non-byte token.
  EXPECT_EQ(DecodeAfter(tok, prompt, output, true), "\ufffd a a");
  StreamingDetokenizer stream(tok, true);
  stream.Prime(prompt);
  EXPECT_EQ(stream.Push(output[0]), "");
  EXPECT_EQ(stream.Push(output[1]), "\ufffd a");
  EXPECT_EQ(stream.Push(output[2]), " a");
  EXPECT_EQ(stream.Finish(), "");
  // Output bytes that go on with valid characters come out as themselves.
  EXPECT_EQ(DecodeAfter(tok, prompt, std::vector<int32_t>{byte(0xc3), byte(0xa9)}, true),
            "\u00e9");
  // After the whole characters, an incomplete one stays open: the output's bytes end it.
  EXPECT_EQ(DecodeAfter(tok, std::vector<int32_t>{bos, space_a, byte(0xea), byte(0x99),
                                                  byte(0xae), byte(0xc3)},
                        std::vector<int32_t>{byte(0xa9), space_a}, true),
            "\u00e9 a");
}

TEST(TokenizerStreaming, AnOutputWithoutTokensHasNoText) {
  // The prompt's held bytes (shown as U+FFFD in its text) do not come out on their own.
  const Tokenizer& tok = Named("sp");
  const int32_t bos = 1, eos = 2, space_a = 263;
  const std::vector<int32_t> prompt = {bos, space_a, 3 + 0xc3};
  EXPECT_EQ(DecodeAfter(tok, prompt, std::vector<int32_t>{}, true), "");
  EXPECT_EQ(DecodeAfter(tok, prompt, std::vector<int32_t>{eos}, true), "");  // skipped EOS
  // An open invalid run too; with an output, its U+FFFDs come out with the output's text.
  const std::vector<int32_t> invalid = {bos, space_a, 3 + 0xff};
  EXPECT_EQ(DecodeAfter(tok, invalid, std::vector<int32_t>{eos}, true), "");
  EXPECT_EQ(DecodeAfter(tok, invalid, std::vector<int32_t>{space_a}, true), "\ufffd a");
  const Tokenizer byte_level = Load(ByteLevelTokenizer());
  const std::vector<int32_t> cut = {'x', 0xe4, 0xbd};
  EXPECT_EQ(DecodeAfter(byte_level, cut, std::vector<int32_t>{}, false), "");
  EXPECT_EQ(DecodeAfter(byte_level, cut, std::vector<int32_t>{257}, true), "");
  EXPECT_EQ(DecodeAfter(byte_level, cut, std::vector<int32_t>{'a'}, true), "\ufffda");
}

TEST(TokenizerStreaming, TextThatStopsExtendingTheContextStillComesOut) {
  // Replace after Fuse rewrites across tokens: "a" then "ab" decodes as "X", which does not
  // extend the "a" already out. The tokens not yet out start afresh, rather than never coming
  // out (vLLM resets its decode stream).
  json j = SpTokenizer(true);
  j["decoder"] = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Replace", "pattern": {"String": "ab"}, "content": "X"}]})");
  const Tokenizer tok = Load(j);
  const int32_t a = 260, b = 261, c = 262, byte_b = 3 + 'b';
  ASSERT_EQ(tok.Decode(std::vector<int32_t>{a, b, c}, true), "Xc");
  EXPECT_THAT(Stream(tok, {a, b, c}, true), ElementsAre("a", "b", "c", ""));
  // At Finish() too: the <0x62> token waits for the run's end.
  EXPECT_THAT(Stream(tok, {a, byte_b}, true), ElementsAre("a", "", "b"));
}

// ---- TokenBytes: each token's bytes in running text, for structured-output grammars ----

TEST(TokenizerTokenBytes, ByteLevelTokensGiveTheirRawBytes) {
  const Tokenizer tok = Load(ByteLevelTokenizer());
  // Byte 0xE4 alone is not UTF-8: Decode would render U+FFFD, TokenBytes keeps the byte.
  EXPECT_EQ(tok.TokenBytes(0xE4), std::string("\xE4"));
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{0xE4}, false), "\ufffd");
  EXPECT_EQ(tok.TokenBytes('a'), "a");
  EXPECT_EQ(tok.TokenBytes(256), " x");
  EXPECT_EQ(tok.TokenBytes(257), std::nullopt);  // special
  EXPECT_EQ(tok.TokenBytes(9999), std::nullopt);  // outside the vocabulary
}

TEST(TokenizerTokenBytes, MetaspaceAndByteFallbackTokensGiveTheirMidTextBytes) {
  const Tokenizer tok = Load(SpTokenizer(true));
  const int32_t a = *tok.TokenToId("▁a");
  // Decode drops the first token's leading space (Strip); in running text it is there.
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{a}, false), "a");
  EXPECT_EQ(tok.TokenBytes(a), " a");
  EXPECT_EQ(tok.TokenBytes(*tok.TokenToId("ab")), "ab");
  EXPECT_EQ(tok.TokenBytes(*tok.TokenToId("<0x0A>")), "\n");
  EXPECT_EQ(tok.TokenBytes(*tok.TokenToId("<0xE4>")), std::string("\xE4"));
  EXPECT_EQ(tok.TokenBytes(1), std::nullopt);  // <s>, special
}

}  // namespace
}  // namespace latent::tokenizer
