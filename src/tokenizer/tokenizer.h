// A Hugging Face tokenizer (tokenizer.json + tokenizer_config.json) that gives the ids and text HF
// `tokenizers` gives, or Kimi's tiktoken tokenizer (tiktoken.model + tokenizer_config.json) that
// gives tiktoken's (tiktoken_tokenizer.h). Encoding runs: added tokens matched in the raw text ->
// normalizer -> added tokens matched in the normalized text -> pre-tokenizer -> BPE ->
// post-processor.
//
// Special tokens (add_special_tokens=true) are what tokenizer.json's post_processor adds, as in
// HF tokenizers and transformers 5 (which ignores tokenizer_config's add_bos_token when a
// tokenizer.json exists). Only a tokenizer.json without a post_processor takes BOS/EOS from
// tokenizer_config's add_bos_token/add_eos_token.
//
// Invalid UTF-8 input: each maximal invalid subsequence is replaced with U+FFFD before encoding
// (the usual "replace" decoding, so the ids equal HF's on the text Python would decode).
//
// Thread-safe: all methods are const; the BPE word cache locks internally.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace latent::tokenizer {

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json; without a
  // tokenizer.json, DIR/tiktoken.model and DIR/tokenizer_config.json (Kimi's tokenizer).
  static Tokenizer FromDir(const std::string& dir);
  // Whether DIR holds a tokenizer FromDir reads (tokenizer.json or tiktoken.model).
  static bool DirHasTokenizer(const std::string& dir);
  // A tokenizer directory the user named (--tokenizer, LLM(tokenizer=...)): throws, naming it,
  // unless it holds a tokenizer. A wrong path there would otherwise go unnoticed until a text
  // prompt failed with "this model has no tokenizer".
  static void CheckNamedDir(const std::string& dir);
  // The same from the files' contents; `config_json` may be empty.
  static Tokenizer FromJson(std::string_view tokenizer_json, std::string_view config_json = "");
  // Kimi's tokenizer (tiktoken_tokenizer.h) from the contents of tiktoken.model and
  // tokenizer_config.json; `model_name` names the first in errors.
  static Tokenizer FromTiktoken(std::string_view tiktoken_model, std::string_view config_json,
                                std::string_view model_name = "tiktoken.model");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens) const;
  // Ids outside the vocabulary are skipped, as HF does.
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  std::optional<int32_t> TokenToId(std::string_view token) const;
  std::optional<std::string> IdToToken(int32_t id) const;
  // Whether `id` decodes to the content of a special added token (skip_special_tokens drops it).
  bool IsSpecial(int32_t id) const;
  // Distinct ids of the model vocabulary and the added tokens.
  size_t VocabSize() const;

  // From tokenizer_config.json's bos_token / eos_token; nullopt when unset or unknown.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

  // The bytes token `id` adds to a text in the middle of a sequence (a byte-level token's bytes,
  // a Metaspace token's leading space, a <0xAB> token's byte), possibly part of a UTF-8
  // character; nullopt for a special added token or an id outside the vocabulary. What a grammar
  // matches tokens against (structured output).
  std::optional<std::string> TokenBytes(int32_t id) const;

  // Whether `id` is a <0xAB> token that the decoder's ByteFallback step turns into a byte.
  bool IsByteFallbackToken(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace latent::tokenizer
