#include "engine/ngram_draft.h"

#include <algorithm>

namespace latent::engine {

void ProposeNgramDraft(std::span<const int32_t> tokens, int32_t ngram_min, int32_t ngram_max,
                       int32_t max_tokens, std::vector<int32_t>& draft) {
  draft.clear();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (max_tokens <= 0 || ngram_min < 1 || ngram_max < ngram_min || n < 2) return;
  const int32_t last = tokens[n - 1];
  // The match ending at `at` (at < n - 1) is tokens[at - len + 1 .. at] == the suffix of len.
  int64_t best_len = 0, best_at = -1;
  for (int64_t at = n - 2; at >= 0; --at) {
    if (tokens[at] != last) continue;
    int64_t len = 1;
    while (len < ngram_max && at - len >= 0 && tokens[at - len] == tokens[n - 1 - len]) ++len;
    if (len > best_len) {  // strictly longer: of equal matches the latest stays
      best_len = len;
      best_at = at;
      if (len == ngram_max) break;
    }
  }
  if (best_len < ngram_min) return;
  // What followed the match, then (past the end of `tokens`) what the draft itself predicts: the
  // continuation of position at is assumed to repeat, so source index s >= n is draft[s - n],
  // which is already written because s - n < the draft's length.
  for (int64_t j = 0; j < max_tokens; ++j) {
    const int64_t source = best_at + 1 + j;
    draft.push_back(source < n ? tokens[source] : draft[source - n]);
  }
}

int64_t DraftPace::Next(int64_t max_tokens) {
  if (pause > 0) {
    --pause;
    return 0;
  }
  return std::min(limit, max_tokens);
}

void DraftPace::Record(int64_t drafted, int64_t accepted) {
  if (drafted <= 0) return;
  if (accepted == drafted) {
    // (The scheduler may have cut the draft short of the limit: never below it then.)
    limit = std::max(limit, 2 * drafted);
    backoff = 1;
  } else if (accepted > 0) {
    limit = accepted + 1;
    backoff = 1;
  } else {
    limit = 1;
    pause = backoff;
    backoff = std::min(2 * backoff, kLongestPause);
  }
}

}  // namespace latent::engine
