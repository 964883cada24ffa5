// Kimi's tokenizer, as Moonshot's tokenization_kimi.py builds it for Kimi K2 and Kimi Linear:
// tiktoken BPE ranks from tiktoken.model, Kimi's split pattern (kimi_split_pattern.h), and the
// special tokens right after the ranks, named by tokenizer_config.json's added_tokens_decoder.
// Its ids are those of a tiktoken.Encoding built from the same ranks, pattern and special tokens,
// encoding with allowed_special="all" (what tokenization_kimi.py's encode does).
//
// Special tokens: the ids from N (the number of ranks) to N + 257, as tokenization_kimi.py makes
// them (256 reserved plus 2); an id that added_tokens_decoder names gets its content, the others
// "<|reserved_token_ID|>". They are matched anywhere in the text, leftmost and longest first; their
// lstrip/rstrip/normalized flags are ignored, as tiktoken ignores them. BOS/EOS are
// tokenizer_config's bos_token/eos_token, "[BOS]"/"[EOS]" when it names none; encoding adds
// neither (tokenization_kimi.py adds none).
//
// Not done: tokenization_kimi.py cuts text into pieces of at most 400,000 characters and runs of
// at most 25,000 whitespace or non-whitespace characters before encoding (to keep tiktoken fast);
// latent encodes such text whole, like tiktoken itself, so its ids can differ at those cuts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoders.h"
#include "tokenizer/pre_tokenizers.h"

namespace latent::tokenizer {

struct TiktokenParts {
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<Decoder> decoder;
  std::vector<std::pair<int32_t, AddedToken>> special_tokens;  // by id
  std::string bos_token, eos_token;
};

// Parts of the tokenizer from the contents of tiktoken.model and tokenizer_config.json; errors
// name the file (`model_name`, "tokenizer_config.json") and what is wrong.
TiktokenParts LoadTiktokenParts(std::string_view tiktoken_model, std::string_view config_json,
                                std::string_view model_name);

// How many special ids follow the ranks (tokenization_kimi.py: num_reserved_special_tokens + 2).
inline constexpr int32_t kKimiSpecialTokenCount = 256 + 2;

}  // namespace latent::tokenizer
