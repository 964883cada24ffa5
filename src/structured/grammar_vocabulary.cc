#include "structured/grammar_vocabulary.h"

#include <algorithm>

#include "base/error.h"

namespace latent::structured {

GrammarVocabulary BuildGrammarVocabulary(const tokenizer::Tokenizer& tokenizer, int64_t vocab_size,
                                         std::vector<int32_t> stop_token_ids) {
  if (vocab_size <= 0) Fail("structured output: the vocabulary size must be positive, got ", vocab_size);
  if (stop_token_ids.empty()) {
    Fail("structured output: the model has no EOS token id (generation_config.json / tokenizer_config.json), "
         "so a constrained generation could never end");
  }
  GrammarVocabulary v;
  v.token_bytes.resize(vocab_size);
  for (int32_t id = 0; id < vocab_size; ++id) v.token_bytes[id] = tokenizer.TokenBytes(id);
  std::sort(stop_token_ids.begin(), stop_token_ids.end());
  stop_token_ids.erase(std::unique(stop_token_ids.begin(), stop_token_ids.end()), stop_token_ids.end());
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      Fail("structured output: EOS token id ", id, " is outside the vocabulary (size ", vocab_size, ")");
    }
  }
  v.stop_token_ids = std::move(stop_token_ids);
  return v;
}

}  // namespace latent::structured
