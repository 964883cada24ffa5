// RequestOutput::stop_token, vLLM's int stop_reason: the stop_token_ids entry or extra EOS id
// (GenerationConfig::IsExtraEos) that ended a sample, on its last event only; -1 when the primary
// EOS (the tokenizer's, whether or not generation_config lists it) ended it (checked first, as in
// vLLM, unless ignore_eos), at max_tokens, and on every event
// before the last. stop_terminated marks that last event when EOS or a stop id ended the sample.
// A token drawn from a draft's verification row (speculative decoding) reports it as the
// sample's own step would.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "engine/engine.h"
#include "favoured_token_model.h"

namespace latent::engine {
namespace {

// The model's output is scripted by position (StopScriptModel): the logits after the token at
// position p favour kStopScript[p + 1] (the last entry after the script's end). The prompt is the
// first kStopPrompt tokens; the tokens it goes on with repeat the prompt's own n-grams, so
// prompt-lookup drafts of them prove right.
const std::vector<int32_t> kStopScript = {10, 11, 12, 10, 11, 12, 10, 11,
                                          12, 10, 11, 12, 10, 11, 12};
constexpr size_t kStopPrompt = 7;  // then 11, 12, 10, 11, ...

std::unique_ptr<model::Model> StopScriptModel() {
  return std::make_unique<testing::FavouredTokenModel>(64, [](int32_t, int64_t position) {
    const size_t next = static_cast<size_t>(position) + 1;
    return kStopScript[std::min(next, kStopScript.size() - 1)];
  });
}

struct StopOutcome {
  std::vector<int32_t> tokens;
  std::vector<int32_t> stop_tokens;  // each event's
  std::vector<bool> stop_terminated;  // each event's
  FinishReason finish = FinishReason::kNone;
};

struct StopRun {
  StopOutcome outcome;
  EngineMetrics metrics;
};

// `eos`: the checkpoint's EOS ids; the first is the primary one (the tokenizer's) unless
// `primary_eos` names another (or none, with an empty optional inside).
StopRun GenerateScripted(std::vector<int32_t> stop_token_ids, std::vector<int64_t> eos,
                         bool ignore_eos, int32_t speculative_tokens = 0,
                         std::optional<std::optional<int64_t>> primary_eos = std::nullopt,
                         int64_t min_tokens = 0) {
  EngineOptions options;
  options.block_tokens = 4;
  options.num_blocks = 64;
  options.max_batch_tokens = 64;
  options.max_seqs = 4;
  options.check_invariants = true;
  options.speculative_tokens = speculative_tokens;
  model::GenerationConfig generation;
  if (primary_eos) {
    generation.primary_eos_id = *primary_eos;
  } else if (!eos.empty()) {
    generation.primary_eos_id = eos.front();
  }
  generation.eos_token_ids = std::move(eos);
  Engine engine(StopScriptModel(), generation, options);
  Request request;
  request.prompt.assign(kStopScript.begin(), kStopScript.begin() + kStopPrompt);
  request.max_tokens = 6;
  request.stop_token_ids = std::move(stop_token_ids);
  request.ignore_eos = ignore_eos;
  request.min_tokens = min_tokens;
  StopRun run;
  engine.Submit(std::move(request), [&run](const RequestOutput& out) {
    if (out.has_token) run.outcome.tokens.push_back(out.token);
    run.outcome.stop_tokens.push_back(out.stop_token);
    run.outcome.stop_terminated.push_back(out.stop_terminated);
    if (out.finish != FinishReason::kNone) run.outcome.finish = out.finish;
  });
  for (int steps = 0; engine.Step(); ++steps) EXPECT_LT(steps, 100);
  run.metrics = engine.Metrics();
  return run;
}

TEST(EngineStopToken, AStopTokenIdEndsWithItsId) {
  const StopOutcome o = GenerateScripted({12, 40}, {}, /*ignore_eos=*/false).outcome;
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, 12}));  // on the last event only
  EXPECT_EQ(o.stop_terminated, (std::vector<bool>{false, true}));
}

TEST(EngineStopToken, EosIsCheckedFirst) {
  // 12 is both EOS and a stop id: EOS ended it, no stop token (vLLM's stop_reason None).
  StopOutcome o = GenerateScripted({12}, {12}, /*ignore_eos=*/false).outcome;
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, -1}));
  // EOS alone: stop-terminated all the same (vLLM leaves its text out too).
  o = GenerateScripted({}, {12}, /*ignore_eos=*/false).outcome;
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, -1}));
  EXPECT_EQ(o.stop_terminated, (std::vector<bool>{false, true}));
  // Under ignore_eos the same token ends it as a stop id.
  o = GenerateScripted({12}, {12}, /*ignore_eos=*/true).outcome;
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, 12}));
}

TEST(EngineStopToken, AnExtraEosIdEndsWithItsId) {
  // vLLM moves generation_config's EOS ids other than the tokenizer's into stop_token_ids: 12,
  // an EOS id beside the primary 40, ends the sample as a stop id would.
  StopOutcome o = GenerateScripted({}, {40, 12}, /*ignore_eos=*/false).outcome;
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, 12}));
  EXPECT_EQ(o.stop_terminated, (std::vector<bool>{false, true}));
  // The primary EOS, wherever it stands in the list, gives none.
  o = GenerateScripted({}, {40, 12}, /*ignore_eos=*/false, 0, std::optional<int64_t>(12)).outcome;
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, -1}));
  // Without a primary EOS every EOS id is a stop id (vLLM without a tokenizer's eos).
  o = GenerateScripted({}, {12}, /*ignore_eos=*/false, 0, std::optional<int64_t>()).outcome;
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, 12}));
  // Under ignore_eos an extra EOS id ends nothing, as vLLM then leaves it out of stop_token_ids.
  o = GenerateScripted({}, {40, 12}, /*ignore_eos=*/true).outcome;
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_EQ(o.tokens.size(), 6u);
  // From a draft's verification row too.
  const StopRun run = GenerateScripted({}, {40, 10}, /*ignore_eos=*/false, 4);
  EXPECT_EQ(run.outcome.tokens, (std::vector<int32_t>{11, 12, 10}));
  EXPECT_EQ(run.outcome.stop_tokens, (std::vector<int32_t>{-1, -1, 10}));
}

TEST(EngineStopToken, TheTokenizersEosEndsThoughGenerationConfigLeavesItOut) {
  // vLLM checks request.eos_token_id (the tokenizer's) whatever generation_config lists: Kimi
  // K2's tokenizer ends on [EOS], its generation_config.json lists another id. 12 is the
  // primary EOS, the list holds only 40.
  const std::optional<int64_t> primary(12);
  StopOutcome o = GenerateScripted({}, {40}, /*ignore_eos=*/false, 0, primary).outcome;
  EXPECT_EQ(o.tokens, (std::vector<int32_t>{11, 12}));
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_tokens, (std::vector<int32_t>{-1, -1}));  // stop_reason None
  EXPECT_EQ(o.stop_terminated, (std::vector<bool>{false, true}));
  // ignore_eos: it ends nothing.
  o = GenerateScripted({}, {40}, /*ignore_eos=*/true, 0, primary).outcome;
  EXPECT_EQ(o.finish, FinishReason::kLength);
  EXPECT_EQ(o.tokens.size(), 6u);
  // min_tokens holds it off as the listed ids: not drawn as the 2nd token (the script's 11, 12,
  // 10, 11, 12), it ends the sample as the 5th.
  o = GenerateScripted({}, {40}, /*ignore_eos=*/false, 0, primary, /*min_tokens=*/3).outcome;
  ASSERT_EQ(o.tokens.size(), 5u);
  EXPECT_NE(o.tokens[1], 12);
  EXPECT_EQ(o.tokens[4], 12);
  EXPECT_EQ(o.finish, FinishReason::kStop);
  EXPECT_EQ(o.stop_tokens.back(), -1);
  // From a draft's verification row too (primary 10: the script's 11, 12, then 10 drafted).
  const StopRun run =
      GenerateScripted({}, {40}, /*ignore_eos=*/false, 4, std::optional<int64_t>(10));
  EXPECT_EQ(run.outcome.tokens, (std::vector<int32_t>{11, 12, 10}));
  EXPECT_EQ(run.outcome.stop_tokens, (std::vector<int32_t>{-1, -1, -1}));
  EXPECT_GE(run.metrics.accepted_draft_tokens, 1);
}

TEST(EngineStopToken, NoneAtMaxTokens) {
  const StopOutcome o = GenerateScripted({40}, {41}, /*ignore_eos=*/false).outcome;
  EXPECT_EQ(o.tokens.size(), 6u);
  EXPECT_EQ(o.finish, FinishReason::kLength);
  for (int32_t stop : o.stop_tokens) EXPECT_EQ(stop, -1);
  for (bool terminated : o.stop_terminated) EXPECT_FALSE(terminated);
}

TEST(EngineStopToken, FromADraftsVerificationRow) {
  // The first decode step drafts 12, 10, ... (the prompt's n-grams): 12 is drawn from the
  // pending token's row, 10 from the row of draft token 12, and ends the sample there.
  const StopRun run = GenerateScripted({10}, {}, /*ignore_eos=*/false, /*speculative_tokens=*/4);
  EXPECT_EQ(run.outcome.tokens, (std::vector<int32_t>{11, 12, 10}));
  EXPECT_EQ(run.outcome.finish, FinishReason::kStop);
  EXPECT_EQ(run.outcome.stop_tokens, (std::vector<int32_t>{-1, -1, 10}));
  EXPECT_EQ(run.outcome.stop_terminated, (std::vector<bool>{false, false, true}));
  EXPECT_GE(run.metrics.accepted_draft_tokens, 1);  // 10 came from a draft's row
}

TEST(EngineStopToken, ADraftTokenThatEndsTheSampleCountsAsAccepted) {
  // The decode step drafts 12, 10, ...: 12 is drawn from the pending token's row and matches
  // draft token 0; 10 is drawn from draft token 0's row, matches draft token 1 and ends the
  // sample. Both drafts proved right (vLLM counts every matched draft token before its stop
  // check); the stop used to leave the second out of accepted_draft_tokens.
  const StopRun run = GenerateScripted({10}, {}, /*ignore_eos=*/false, /*speculative_tokens=*/4);
  ASSERT_EQ(run.outcome.tokens, (std::vector<int32_t>{11, 12, 10}));
  EXPECT_GE(run.metrics.draft_tokens, 2);
  EXPECT_EQ(run.metrics.accepted_draft_tokens, 2);
  // The same where EOS ends it.
  const StopRun eos = GenerateScripted({}, {10}, /*ignore_eos=*/false, 4);
  ASSERT_EQ(eos.outcome.tokens, (std::vector<int32_t>{11, 12, 10}));
  EXPECT_EQ(eos.metrics.accepted_draft_tokens, 2);
}

}  // namespace
}  // namespace latent::engine
