#include "tokenizer/tiktoken_tokenizer.h"

#include <charconv>
#include <map>
#include <unordered_map>

#include "base/error.h"
#include "base/error_context.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/kimi_split_pattern.h"
#include "tokenizer/tiktoken_ranks.h"

namespace latent::tokenizer {

namespace {

constexpr const char* kConfig = "tokenizer_config.json";

// bos_token/eos_token: a string or an AddedToken object; `fallback` when absent or null.
std::string ConfigTokenOr(const Json& config, const char* key, const char* fallback) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  Fail(kConfig, ": \"", key, "\" must be a string or an object with a \"content\" string");
}

// added_tokens_decoder: {"ID": {"content": ..., "special": ...}, ...} -> id -> token.
std::map<int32_t, AddedToken> NamedSpecialTokens(const Json& config) {
  std::map<int32_t, AddedToken> named;
  auto it = config.find("added_tokens_decoder");
  if (it == config.end() || it->is_null()) return named;
  if (!it->is_object()) {
    Fail(kConfig, ": \"added_tokens_decoder\" must be an object of id -> token");
  }
  for (auto entry = it->begin(); entry != it->end(); ++entry) {
    const std::string& key = entry.key();
    int32_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
      Fail(kConfig, ": added_tokens_decoder key '", key, "' is not a token id");
    }
    const Json& value = entry.value();
    if (!value.is_object() || !value.contains("content") || !value["content"].is_string()) {
      Fail(kConfig, ": added_tokens_decoder[", key, "] has no \"content\" string");
    }
    AddedToken token;
    token.content = value["content"].get<std::string>();
    if (token.content.empty()) Fail(kConfig, ": added_tokens_decoder[", key, "] is empty");
    token.special = !value.contains("special") || !value["special"].is_boolean() ||
                    value["special"].get<bool>();
    token.normalized = false;  // matched in the raw text, as tiktoken matches special tokens
    named[id] = std::move(token);
  }
  return named;
}

// The pre-tokenizer and decoder of a byte-level BPE, as tokenizer.json would describe them.
Json PreTokenizerJson() {
  return Json{{"type", "Sequence"},
              {"pretokenizers",
               Json::array({Json{{"type", "Split"},
                                 {"pattern", Json{{"Regex", std::string(kKimiSplitPattern)}}},
                                 {"behavior", "Isolated"},
                                 {"invert", false}},
                            Json{{"type", "ByteLevel"},
                                 {"add_prefix_space", false},
                                 {"trim_offsets", false},
                                 {"use_regex", false}}})}};
}

}  // namespace

TiktokenParts LoadTiktokenParts(std::string_view tiktoken_model, std::string_view config_json,
                                std::string_view model_name) {
  Json config;
  try {
    config = Json::parse(config_json.begin(), config_json.end());
  } catch (const Json::exception& e) {
    Fail(kConfig, " is not valid JSON: ", e.what());
  }
  if (!config.is_object()) Fail(kConfig, " must hold an object");

  TiktokenParts parts;
  const std::vector<TokenRank> ranks = ParseTiktokenRanks(tiktoken_model, model_name);
  // Special ids start at the number of ranks: a rank there or above would share an id with one.
  const auto num_ranks = static_cast<int32_t>(ranks.size());
  for (const TokenRank& r : ranks) {
    if (r.rank >= num_ranks) {
      Fail(model_name, ": rank ", r.rank, " is not below the number of tokens, ", num_ranks,
           " (ranks must be 0 to ", num_ranks - 1, "; the special tokens follow them)");
    }
  }
  try {
    parts.model = BpeModel::FromTokenRanks(ranks);
  } catch (const Error& e) {
    FailLike(e, model_name, ": ", e.what());
  }
  parts.pre_tokenizer = MakePreTokenizer(PreTokenizerJson());
  parts.decoder = MakeDecoder(Json{{"type", "ByteLevel"}});

  std::map<int32_t, AddedToken> named = NamedSpecialTokens(config);
  std::unordered_map<std::string, int32_t> id_of_content;
  for (int32_t id = num_ranks; id < num_ranks + kKimiSpecialTokenCount; ++id) {
    AddedToken token;
    if (auto it = named.find(id); it != named.end()) {
      token = it->second;
    } else {
      token.content = StrCat("<|reserved_token_", id, "|>");
      token.special = true;
      token.normalized = false;
    }
    if (auto [it, fresh] = id_of_content.emplace(token.content, id); !fresh) {
      Fail(kConfig, ": special token '", token.content, "' has two ids, ", it->second, " and ",
           id);
    }
    parts.special_tokens.emplace_back(id, std::move(token));
  }
  parts.bos_token = ConfigTokenOr(config, "bos_token", "[BOS]");
  parts.eos_token = ConfigTokenOr(config, "eos_token", "[EOS]");
  return parts;
}

}  // namespace latent::tokenizer
