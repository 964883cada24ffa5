#include "engine/ngram_draft.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace latent::engine {
namespace {

using Tokens = std::vector<int32_t>;

// The draft for `tokens`, written over a vector that already holds stale tokens (it is replaced).
Tokens Draft(const Tokens& tokens, int32_t ngram_min, int32_t ngram_max, int32_t max_tokens) {
  Tokens draft = {-1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12};
  ProposeNgramDraft(tokens, ngram_min, ngram_max, max_tokens, draft);
  return draft;
}

TEST(NgramDraftTest, TheLongestRecurringSuffixWinsOverALaterShorterMatch) {
  // Suffix "2 3": "2 3" recurs at positions 0..1 (then 7 4 5); only "3" recurs at position 5
  // (then 8 6 2), which is later but shorter.
  const Tokens tokens = {2, 3, 7, 4, 5, 3, 8, 6, 2, 3};
  EXPECT_EQ(Draft(tokens, 1, 3, 3), (Tokens{7, 4, 5}));
  // With ngram_max 1 both are matches of one token, and the later one wins.
  EXPECT_EQ(Draft(tokens, 1, 1, 3), (Tokens{8, 6, 2}));
}

TEST(NgramDraftTest, OfEqualLengthMatchesTheLatestWins) {
  // "1 2" recurs twice, followed by 10 11 and (later) by 20 21.
  const Tokens tokens = {1, 2, 10, 11, 1, 2, 20, 21, 1, 2};
  EXPECT_EQ(Draft(tokens, 1, 4, 3), (Tokens{20, 21, 1}));
  EXPECT_EQ(Draft(tokens, 2, 2, 2), (Tokens{20, 21}));
}

TEST(NgramDraftTest, NgramMaxCapsTheLengthThatIsCompared) {
  // "1 2 3" recurs early (then 40); only "2 3" recurs later (then 50).
  const Tokens tokens = {1, 2, 3, 40, 9, 2, 3, 50, 1, 2, 3};
  EXPECT_EQ(Draft(tokens, 1, 3, 2), (Tokens{40, 9}));
  // Capped at 2 tokens, both matches are as long, and the later one wins.
  EXPECT_EQ(Draft(tokens, 1, 2, 2), (Tokens{50, 1}));
}

TEST(NgramDraftTest, NgramMinIsRespected) {
  // Only the last token (3) recurs: a 1-gram match, no 2-gram one.
  const Tokens tokens = {5, 3, 8, 1, 3};
  EXPECT_EQ(Draft(tokens, 2, 3, 4), Tokens{});
  EXPECT_EQ(Draft(tokens, 1, 3, 3), (Tokens{8, 1, 3}));
  // A 2-gram recurs here: ngram_min 2 takes it.
  EXPECT_EQ(Draft({7, 1, 3, 6, 1, 3}, 2, 3, 2), (Tokens{6, 1}));
}

TEST(NgramDraftTest, MaxTokensCapsTheDraft) {
  const Tokens tokens = {1, 2, 3, 4, 5, 6, 7, 1};
  EXPECT_EQ(Draft(tokens, 1, 3, 1), (Tokens{2}));
  EXPECT_EQ(Draft(tokens, 1, 3, 2), (Tokens{2, 3}));
  EXPECT_EQ(Draft(tokens, 1, 3, 6), (Tokens{2, 3, 4, 5, 6, 7}));
}

TEST(NgramDraftTest, AMatchNearTheEndContinuesFromTheDraftItself) {
  // a b a b a: the loop of period 2 goes on for the whole draft.
  EXPECT_EQ(Draft({7, 8, 7, 8, 7}, 1, 3, 5), (Tokens{8, 7, 8, 7, 8}));
  // Period 1.
  EXPECT_EQ(Draft({4, 4}, 1, 3, 4), (Tokens{4, 4, 4, 4}));
  // Period 3, with the match overlapping the suffix.
  EXPECT_EQ(Draft({1, 2, 3, 1, 2, 3, 1}, 1, 2, 5), (Tokens{2, 3, 1, 2, 3}));
  // Period 7: past the end of the tokens the draft repeats its own start.
  EXPECT_EQ(Draft({1, 2, 3, 4, 5, 6, 7, 1}, 1, 3, 9), (Tokens{2, 3, 4, 5, 6, 7, 1, 2, 3}));
}

TEST(NgramDraftTest, EmptyWithoutARecurrenceOrWithBadArguments) {
  EXPECT_EQ(Draft({1, 2, 3, 4}, 1, 3, 4), Tokens{});      // nothing recurs
  EXPECT_EQ(Draft({}, 1, 3, 4), Tokens{});                // no tokens
  EXPECT_EQ(Draft({5}, 1, 3, 4), Tokens{});               // one token
  const Tokens loop = {7, 8, 7};
  ASSERT_EQ(Draft(loop, 1, 3, 2), (Tokens{8, 7}));        // these arguments draft...
  EXPECT_EQ(Draft(loop, 1, 3, 0), Tokens{});              // ...but not for 0 tokens
  EXPECT_EQ(Draft(loop, 1, 3, -1), Tokens{});
  EXPECT_EQ(Draft(loop, 3, 2, 2), Tokens{});              // min > max
  EXPECT_EQ(Draft(loop, 0, 3, 2), Tokens{});              // min < 1
}

TEST(NgramDraftTest, TheLastTokenIsNotAMatchOfItself) {
  // The suffix always "occurs" where it ends; only earlier occurrences count.
  EXPECT_EQ(Draft({1, 2, 3}, 1, 3, 4), Tokens{});
  EXPECT_EQ(Draft({9, 1, 2, 3}, 1, 1, 4), Tokens{});
  // The latest earlier occurrence may end right before the last token.
  EXPECT_EQ(Draft({9, 5, 5}, 1, 3, 3), (Tokens{5, 5, 5}));
}

TEST(DraftPaceTest, AFullyAcceptedDraftLetsTheNextBeTwiceAsLong) {
  DraftPace pace;
  EXPECT_EQ(pace.Next(8), 8);  // no history: the maximum
  pace.Record(3, 1);
  EXPECT_EQ(pace.Next(8), 2);
  pace.Record(2, 2);
  EXPECT_EQ(pace.Next(8), 4);
  pace.Record(4, 4);
  EXPECT_EQ(pace.Next(8), 8);
  EXPECT_EQ(pace.Next(5), 5);  // never past the maximum of the step
  // A draft the scheduler cut short (budget, blocks) and that proved right keeps the limit.
  pace.Record(1, 1);
  EXPECT_EQ(pace.Next(8), 8);
}

TEST(DraftPaceTest, APartlyRejectedDraftIsCutToOnePastWhatProvedRight) {
  DraftPace pace;
  pace.Record(8, 3);
  EXPECT_EQ(pace.Next(8), 4);
  pace.Record(4, 1);
  EXPECT_EQ(pace.Next(8), 2);
}

TEST(DraftPaceTest, DraftsWrongAtOnceBackOffThenProbeWithOneToken) {
  DraftPace pace;
  std::vector<int64_t> next;  // what each decode step may draft
  for (int step = 0; step < 12; ++step) {
    const int64_t n = pace.Next(8);
    next.push_back(n);
    if (n > 0) pace.Record(n, 0);  // every draft wrong at its first token
  }
  // Pauses of 1, 2 and 4 steps between one-token probes.
  EXPECT_EQ(next, (std::vector<int64_t>{8, 0, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0}));
  // The pause grows to at most kLongestPause steps.
  for (int i = 0; i < 400; ++i) {
    const int64_t n = pace.Next(8);
    if (n > 0) pace.Record(n, 0);
  }
  EXPECT_EQ(pace.backoff, DraftPace::kLongestPause);
  // One right token ends the back-off.
  while (pace.Next(8) == 0) {
  }
  pace.Record(1, 1);
  EXPECT_EQ(pace.Next(8), 2);
  pace.Record(2, 0);
  EXPECT_EQ(pace.pause, 1);
}

}  // namespace
}  // namespace latent::engine
