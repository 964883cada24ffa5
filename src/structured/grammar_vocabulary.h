// The model's vocabulary as a grammar sees it: each token id's bytes in running text
// (Tokenizer::TokenBytes: byte-level BPE, Metaspace, ByteFallback and tiktoken vocabularies all
// reduce to bytes), special added tokens marked as never produced by a grammar, and the ids that
// end a generation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace latent::structured {

struct GrammarVocabulary {
  // [vocab_size]: the bytes of each id; nullopt for a special token, or an id the tokenizer lacks
  // (the model's embedding may be larger than the tokenizer).
  std::vector<std::optional<std::string>> token_bytes;
  std::vector<int32_t> stop_token_ids;  // Allowed only where the constrained text may end.
};

// `vocab_size`: the model's (config.json), at least the tokenizer's. `stop_token_ids`: the
// generation's EOS ids; none is an error (a constrained sample could never end).
GrammarVocabulary BuildGrammarVocabulary(const tokenizer::Tokenizer& tokenizer, int64_t vocab_size,
                                         std::vector<int32_t> stop_token_ids);

}  // namespace latent::structured
