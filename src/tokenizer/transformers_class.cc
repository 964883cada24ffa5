#include "tokenizer/transformers_class.h"

#include <string>

namespace latent::tokenizer {
namespace {

std::string DeclaredClass(const Json& config) {
  auto it = config.find("tokenizer_class");
  if (it == config.end() || !it->is_string()) return {};
  std::string name = it->get<std::string>();
  constexpr std::string_view kFast = "Fast";
  if (name.size() > kFast.size() && name.ends_with(kFast)) name.resize(name.size() - kFast.size());
  return name;
}

bool BoolOr(const Json& config, const char* key, bool fallback) {
  auto it = config.find(key);
  return it != config.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

// transformers 5's LlamaTokenizer (models/llama/tokenization_llama.py) keeps the file's BPE
// vocabulary, merges and added tokens but replaces the rest: no normalizer, a Metaspace
// pre-tokenizer (which prepends "▁" only where the text does not already start with one, unlike
// the file's Prepend normalizer) and its own decoder. The prepend scheme comes from
// add_prefix_space (default true) and legacy (default false): "always" for legacy files, "first"
// otherwise, "never" without the prefix space.
void RebuildAsLlama(Json& tokenizer, const Json& config) {
  const bool add_prefix_space = BoolOr(config, "add_prefix_space", true);
  const bool legacy = BoolOr(config, "legacy", false);
  const char* scheme = !add_prefix_space ? "never" : legacy ? "always" : "first";
  tokenizer["normalizer"] = nullptr;
  tokenizer["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", false}};
  Json decoders = Json::array({
      {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
      {{"type", "ByteFallback"}},
      {{"type", "Fuse"}},
  });
  if (add_prefix_space) {
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  tokenizer["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
}

}  // namespace

void ApplyTransformersClass(Json& tokenizer, const Json& config, std::string_view raw_tokenizer_json) {
  // A file declaring LlamaTokenizer but holding a byte-level (Llama 3 style) tokenizer is loaded
  // as written (transformers' AutoTokenizer checks for the substring "ByteLevel" in the file).
  if (DeclaredClass(config) == "LlamaTokenizer" &&
      raw_tokenizer_json.find("\"ByteLevel\"") == std::string_view::npos) {
    RebuildAsLlama(tokenizer, config);
  }
}

}  // namespace latent::tokenizer
