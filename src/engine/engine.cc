#include "engine/engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "base/error.h"
#include "base/profile.h"
#include "base/saturating.h"
#include "engine/logprobs.h"
#include "engine/debug_replay.h"
#include "engine/ngram_draft.h"
#include "engine/sampler.h"
#include "kernels/kernel_table.h"
#include "threads/thread_pool.h"

namespace latent::engine {

Engine::Engine(std::unique_ptr<model::Model> model, model::GenerationConfig generation,
               EngineOptions options)
    : model_(std::move(model)), generation_(std::move(generation)), options_(options) {
  const model::ModelConfig& config = model_->config();
  eos_ids_ = generation_.EndIds(config.vocab_size);
  CacheOptions cache_options;
  cache_options.block_tokens = options_.block_tokens;
  cache_options.num_blocks = options_.num_blocks;
  cache_options.memory_gib = options_.cache_memory_gib;
  cache_options.prefix_caching = options_.prefix_caching;
  cache_options.dtype = model::ParseCacheDType(options_.cache_dtype, config);
  cache_options.state_slots = options_.max_seqs;
  cache_ = std::make_unique<CacheManager>(config, cache_options);
  if (options_.speculative_tokens < 0) Fail("speculative tokens must be at least 0");
  const int32_t ngram_min = options_.speculative_ngram_min;
  const int32_t ngram_max = options_.speculative_ngram_max;
  if (ngram_min < 1 || ngram_max < ngram_min) {
    Fail("speculative n-gram sizes must satisfy 1 <= min <= max, got min ", ngram_min, " and max ",
         ngram_max);
  }
  if (options_.speculative_tokens > 0 && cache_->slot_pool() != nullptr) {
    Fail("speculative decoding is not supported for ", config.model_type,
         ": its linear-attention layers keep a per-sequence state, which cannot drop a rejected "
         "draft token");
  }
  if (options_.speculative_tokens > 0 &&
      std::string_view(kernels::BestKernelsName()).find("onednn") != std::string_view::npos) {
    // The promise of identical output rests on batch-invariant kernels; oneDNN's GEMM picks its
    // summation order by the rows it gets (docs/architecture.md), and a draft adds rows.
    std::cerr << "latent: warning: LATENT_GEMM=onednn is not batch invariant: with "
                 "--speculative-tokens, logprobs may differ from a run without drafts in their "
                 "last bits (and, rarely, a token where two are close)\n";
  }
  pool_ = &cache_->pool();
  batch_.forward.rows = &cache_->rows();
  SchedulerOptions scheduling{options_.max_batch_tokens, options_.max_seqs,
                              options_.max_prompt_logits_rows};
  scheduler_ = std::make_unique<Scheduler>(scheduling, *pool_, cache_->slot_pool());
  // A logits row per sequence, and one per draft token when speculating.
  const int64_t draft_rows = std::min<int64_t>(
      scheduling.max_draft_tokens, int64_t{options_.max_seqs} * options_.speculative_tokens);
  activations_.Reserve(std::min<int64_t>(options_.max_seqs + draft_rows, options_.max_batch_tokens),
                       config.vocab_size);
  // The model's working memory for the largest step, once (a step holds at most
  // max_batch_tokens tokens, so no step allocates it again).
  model_->Reserve(options_.max_batch_tokens);
  model_->AttachCache(cache_->rows());
  seed_base_ = std::random_device{}();
  metrics_.cache_bytes_per_token = cache_->bytes_per_token();
  metrics_.cache_layer_bytes_per_token = cache_->layer_bytes_per_token();
  metrics_.cache_dtype = model::CacheDTypeName(cache_->dtype());
  metrics_.total_blocks = cache_->num_blocks();
  metrics_.block_tokens = cache_->block_tokens();
  metrics_.window_block_tokens = cache_->window_block_tokens();
}

Engine::~Engine() { Stop(); }

int64_t Engine::Submit(Request request, OutputCallback on_output) {
  const model::ModelConfig& c = model_->config();
  const int64_t prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt == 0) Fail("the prompt is empty");
  for (int32_t id : request.prompt) {
    if (id < 0 || id >= c.vocab_size) Fail("prompt token id ", id, " is outside the vocabulary (size ", c.vocab_size, ")");
  }
  ValidatePromptLogprobs(request.prompt_logprobs);
  ValidateTokenCounts(request.max_tokens, request.min_tokens);
  // As logit_bias and allowed_token_ids: an id no token has would never end a sample.
  for (int32_t id : request.stop_token_ids) {
    if (id < 0 || id >= c.vocab_size) {
      Fail("stop_token_ids token id ", id, " is outside the vocabulary (size ", c.vocab_size, ")");
    }
  }
  request.sampling.Validate();  // negative ids too: only the upper bound is left to check
  SamplingParams& sampling = request.sampling;
  if (!sampling.logit_bias.empty() && sampling.logit_bias.rbegin()->first >= c.vocab_size) {
    Fail("logit_bias token id ", sampling.logit_bias.rbegin()->first,
         " is outside the vocabulary (size ", c.vocab_size, ")");
  }
  // EOS (unless ignore_eos) and stop_token_ids: what min_tokens holds off.
  std::vector<int32_t> held;
  if (!request.ignore_eos) held = eos_ids_;
  held.insert(held.end(), request.stop_token_ids.begin(), request.stop_token_ids.end());
  std::vector<int32_t> grammar_end;  // the ids a grammar ends on: the EOS ids
  if (sampling.allowed_token_ids) {
    // Sorted and de-duplicated once, here on the caller's thread: a list of any length (one id
    // repeated millions of times) then costs the engine nothing per step.
    std::vector<int32_t>& ids = *sampling.allowed_token_ids;
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.back() >= c.vocab_size) {
      Fail("allowed_token_ids token id ", ids.back(), " is outside the vocabulary (size ",
           c.vocab_size, ")");
    }
    // min_tokens holds off every id the list allows: the sample could draw nothing before
    // min_tokens, or would have to end early. Refused rather than quietly ending it early.
    if (request.min_tokens > 0 && std::all_of(ids.begin(), ids.end(), [&](int32_t t) {
          return std::find(held.begin(), held.end(), t) != held.end();
        })) {
      Fail("allowed_token_ids holds only EOS and stop_token_ids ids, which min_tokens (",
           request.min_tokens, ") keeps from being drawn: allow another token or drop min_tokens");
    }
    // A grammar ends on EOS, which it allows only where its text may end: kept drawable whatever
    // the list says, or a list without EOS would fail every such request once the text is
    // complete (nothing left to draw), where the user expects it to end there.
    if (request.constraint) grammar_end = eos_ids_;
  }
  const int64_t total = SaturatingAdd(prompt, request.max_tokens);  // any client max_tokens
  if (total > c.max_position_embeddings) {
    Fail("prompt (", prompt, " tokens) + max_tokens (", request.max_tokens,
         ") exceeds the model's max_position_embeddings (", c.max_position_embeddings, ")");
  }
  const int64_t capacity = cache_->capacity_tokens();
  if (total > capacity) {
    Fail("prompt (", prompt, " tokens) + max_tokens (", request.max_tokens,
         ") can never fit in the cache (", capacity, " tokens)");
  }
  auto state = std::make_unique<RequestState>();
  state->sampling_tables = BuildSamplingTables(sampling, c.vocab_size, grammar_end);
  state->request = std::move(request);
  state->on_output = std::move(on_output);
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t id = next_request_id_++;
  submit_queue_.push_back({id, std::move(state)});
  wake_.notify_one();
  return id;
}

void Engine::Cancel(int64_t request_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  cancel_queue_.push_back(request_id);
  wake_.notify_one();
}

void Engine::DrainQueues() {
  std::vector<Submission> submissions;
  std::vector<int64_t> cancels;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submissions.swap(submit_queue_);
    cancels.swap(cancel_queue_);
  }
  for (auto& s : submissions) Admit(s.id, std::move(s.state));
  for (int64_t id : cancels) CancelNow(id);
}

void Engine::Admit(int64_t id, std::unique_ptr<RequestState> state) {
  const Request& r = state->request;
  const uint64_t seed = r.sampling.seed ? *r.sampling.seed : seed_base_ + static_cast<uint64_t>(id) * 0x9e3779b97f4a7c15ull;
  for (int32_t i = 0; i < r.sampling.n; ++i) {
    auto seq = std::make_unique<Sequence>(next_sequence_id_++, cache_->NewTable());
    seq->request_id = id;
    seq->sample = i;
    seq->request = &state->request;
    seq->sampling_tables = &state->sampling_tables;
    seq->seed = seed + static_cast<uint64_t>(i);
    seq->tokens = r.prompt;
    seq->num_prompt = static_cast<int64_t>(r.prompt.size());
    seq->expanded_below = model::ExpandedPositions(model_->config(), options_.attention, seq->num_prompt);
    seq->table.set_root_hash(model_->PrefixCacheSalt(seq->num_prompt));
    if (cache_->has_window()) {
      seq->window_table = cache_->NewWindowTable();
      seq->window_table->set_root_hash(model_->PrefixCacheSalt(seq->num_prompt) ^ 0x77696e646f77ull);  // "window"
      seq->window = cache_->window_tokens();
    }
    if (i == 0 && r.prompt_logprobs >= 0) seq->prompt_logprobs_next = 1;
    if (r.constraint && options_.debug_replay.empty()) {
      seq->constraint = r.constraint->Start();
      seq->bitmask.resize(BitmaskWords(model_->config().vocab_size));
    }
    state->samples.push_back(std::move(seq));
  }
  state->live = r.sampling.n;
  // Sample 0 computes the prompt; the others fork its blocks once it has (ForkSamples).
  scheduler_->AddWaiting(state->samples[0].get());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.prompt_tokens += static_cast<int64_t>(r.prompt.size());
  }
  requests_.emplace(id, std::move(state));
}

void Engine::CancelNow(int64_t id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return;
  for (auto& seq : it->second->samples) {
    if (seq->status != SequenceStatus::kFinished) Finish(*seq, FinishReason::kCancelled);
  }
}

void Engine::Finish(Sequence& seq, FinishReason reason, const std::string& error) {
  if (seq.status == SequenceStatus::kFinished) return;
  scheduler_->Remove(&seq);
  seq.status = SequenceStatus::kFinished;
  auto it = requests_.find(seq.request_id);
  RequestState& state = *it->second;
  PublishEnd(state);  // Whoever hears of the end sees its blocks released.
  RequestOutput out;
  out.request_id = seq.request_id;
  out.sample = seq.sample;
  out.finish = reason;
  out.error = error;
  if (state.on_output) state.on_output(out);
  // Sample 0 ended without a token (a failed draw, a cancel, a failed step): its siblings end
  // with it, those waiting to fork and those forked from it in this step (which then share
  // the request's failure).
  if (seq.sample == 0 && seq.num_generated() == 0) {
    for (auto& other : state.samples) {
      if (other.get() != &seq && other->status != SequenceStatus::kFinished) Finish(*other, reason, error);
    }
  }
  --state.live;  // Retired by RetireFinished, once no caller holds the state.
}

Engine::Drawn Engine::Draw(const Sequence& seq, const float* logits) const {
  const int64_t vocab = model_->config().vocab_size;
  const SamplingParams& sampling = seq.request->sampling;
  Drawn drawn;
  // min_tokens holds off the ids that would end the sample. num_generated() counts the draft
  // tokens DrawRows stands in for the sequence's own, so each draft row holds off exactly what
  // its own step would.
  std::vector<int32_t> held_off;
  const Request& r = *seq.request;
  if (seq.num_generated() < r.min_tokens) {
    if (!r.ignore_eos) held_off = eos_ids_;
    held_off.insert(held_off.end(), r.stop_token_ids.begin(), r.stop_token_ids.end());
  }
  try {
    drawn.sampled = !options_.debug_replay.empty()
                        ? ReplayNext(options_.debug_replay, logits, vocab, seq, sampling)
                        : SampleNext(logits, vocab, seq, sampling,
                                     seq.constraint ? seq.bitmask.data() : nullptr, held_off,
                                     seq.sampling_tables);
  } catch (const Error& e) {
    drawn.error = e.what();
  }
  return drawn;
}

std::vector<std::vector<Engine::Drawn>> Engine::DrawRows(const SchedulePlan& plan,
                                                         const BuiltBatch& batch,
                                                         const float* logits) {
  const int64_t vocab = model_->config().vocab_size;
  const bool replay = !options_.debug_replay.empty();
  std::vector<std::vector<Drawn>> drawn(plan.chunks.size());
  std::vector<size_t> slots;  // the rows that sample a token
  for (size_t slot = 0; slot < plan.chunks.size(); ++slot) {
    const Sequence& seq = *plan.chunks[slot].seq;
    if (batch.logits_index[slot] >= 0 && seq.request->max_tokens > 0) slots.push_back(slot);
  }
  // Side by side: a structured-output mask costs up to a few hundred microseconds and a filtered
  // draw (top-p over a 100k-token vocabulary) about a millisecond; with dozens of rows per step
  // they would add up on one core. Each row reads its own logits and touches only its own
  // sequence (its grammar state and mask are its own).
  threads::ParallelFor(static_cast<int64_t>(slots.size()), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const size_t slot = slots[i];
      Sequence& seq = *plan.chunks[slot].seq;
      if (seq.constraint) {
        seq.constraint->FillNextTokenBitmask(seq.bitmask.data());
        seq.mask_ready = true;
      }
      if (replay) continue;
      const float* rows = logits + batch.logits_index[slot] * vocab;
      std::vector<Drawn>& chain = drawn[slot];
      chain.push_back(Draw(seq, rows));
      if (seq.constraint) continue;
      // Row i + 1 as its step would draw it once draft token i is accepted, which it is when
      // the draw from row i equals it: the draw reads the sequence's tokens (penalties, and
      // their count for the seed), so the draft tokens stand in for them meanwhile.
      struct Restore {  // the sequence's own tokens again, however the loop ends
        std::vector<int32_t>& tokens;
        size_t size;
        ~Restore() { tokens.resize(size); }
      } restore{seq.tokens, seq.tokens.size()};
      for (int64_t i = 0; i < plan.chunks[slot].num_draft; ++i) {
        const Drawn& last = chain.back();
        if (!last.error.empty() || last.sampled.token != seq.draft[i]) break;
        seq.tokens.push_back(seq.draft[i]);
        chain.push_back(Draw(seq, rows + (i + 1) * vocab));
      }
    }
  });
  return drawn;
}

void Engine::AcceptToken(Sequence& seq, const float* logits, const Drawn* drawn) {
  const Request& r = *seq.request;
  const bool replay = !options_.debug_replay.empty();
  std::optional<Drawn> drawn_now;
  if (drawn == nullptr) {
    if (seq.constraint && !seq.mask_ready) seq.constraint->FillNextTokenBitmask(seq.bitmask.data());
    drawn_now = Draw(seq, logits);
    drawn = &*drawn_now;
  }
  seq.mask_ready = false;
  if (!drawn->error.empty()) {
    Finish(seq, FinishReason::kError, drawn->error);
    return;
  }
  const SampledToken& sampled = drawn->sampled;
  // The grammar ends the sample once it has accepted its stop token (EOS, allowed only where the
  // text may end), whatever ignore_eos says.
  bool constraint_done = false;
  if (seq.constraint) {
    if (!seq.constraint->Accept(sampled.token)) {
      Finish(seq, FinishReason::kError, "the structured-output grammar rejected token " + std::to_string(sampled.token));
      return;
    }
    constraint_done = seq.constraint->IsTerminated();
  }
  seq.tokens.push_back(sampled.token);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++metrics_.generated_tokens;
  }
  RequestOutput out;
  out.request_id = seq.request_id;
  out.sample = seq.sample;
  out.has_token = true;
  out.token = sampled.token;
  out.logprob = sampled.logprob;
  out.top_logprobs = sampled.top_logprobs;
  if (seq.num_generated() == 1) {
    out.cached_prompt_tokens = std::max<int64_t>(seq.prefix_hit_tokens, 0);
  }
  // The tokenizer's EOS ends it whether or not generation_config lists it (vLLM checks
  // request.eos_token_id, the tokenizer's, then stop_token_ids).
  const bool is_eos =
      !r.ignore_eos && std::count(eos_ids_.begin(), eos_ids_.end(), sampled.token) > 0;
  const bool is_stop = std::count(r.stop_token_ids.begin(), r.stop_token_ids.end(), sampled.token) > 0;
  if (is_eos || is_stop || constraint_done || (replay && ReplayDone(options_.debug_replay, seq))) {
    out.finish = FinishReason::kStop;
    // vLLM checks the tokenizer's EOS first (stop_reason None); the checkpoint's other EOS ids
    // are among its stop_token_ids (unless ignore_eos), so they report their id as a stop id.
    const bool primary_eos = is_eos && !generation_.IsExtraEos(sampled.token);
    if ((is_stop || is_eos) && !primary_eos) out.stop_token = sampled.token;
    out.stop_terminated = is_eos || is_stop;
  } else if (seq.num_generated() >= r.max_tokens) {
    out.finish = FinishReason::kLength;
  }
  RequestState& state = *requests_.at(seq.request_id);
  if (out.finish == FinishReason::kNone) {
    if (state.on_output) state.on_output(out);
    return;
  }
  // Release the sequence, then report the token and the end in one event.
  scheduler_->Remove(&seq);
  seq.status = SequenceStatus::kFinished;
  PublishEnd(state);
  if (state.on_output) state.on_output(out);
  --state.live;
}

void Engine::PublishEnd(const RequestState& state) {
  PublishGauges();
  // The request's last sample has just ended: count it now, before its end is reported, so that
  // whoever hears of it (LLM.generate returning, a client reading /metrics) finds it counted.
  for (const auto& sample : state.samples) {
    if (sample->status != SequenceStatus::kFinished) return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++metrics_.requests_finished;
}

void Engine::RetireFinished() {
  // Counted in requests_finished already (PublishEnd).
  for (auto it = requests_.begin(); it != requests_.end();) {
    if (it->second->live > 0) {
      ++it;
      continue;
    }
    it = requests_.erase(it);
  }
}

void Engine::ForkSamples(RequestState& state, Sequence& first, const float* logits) {
  // Called when sample 0 has just computed the whole prompt, before its first token is accepted
  // (which may finish it and free its blocks): the others share its full blocks,
  // copy its partial last block, and draw their first token from the same logits (or wait to
  // compute the prompt themselves when no block is free for the copy).
  for (size_t i = 1; i < state.samples.size(); ++i) {
    Sequence& seq = *state.samples[i];
    if (seq.status == SequenceStatus::kFinished) continue;
    std::optional<BlockCopy> copy;
    if (!scheduler_->Fork(&seq, first, first.num_prompt, copy)) continue;
    if (copy) model_->CopyCacheBlock(cache_->rows(), copy->from, copy->to, copy->tokens);
    if (seq.state_slot >= 0) model_->CopyStateSlot(cache_->rows(), first.state_slot, seq.state_slot);
    AcceptToken(seq, logits);
  }
}

void Engine::ReportPromptLogprobs(Sequence& seq, const PromptLogitsRows& rows, const float* logits) {
  const int64_t vocab = model_->config().vocab_size;
  const int32_t top = seq.request->prompt_logprobs;
  RequestOutput out;
  out.request_id = seq.request_id;
  out.sample = seq.sample;
  out.prompt_logprobs_start = rows.first_position + 1;
  out.prompt_logprobs.resize(rows.count);
  // Rows side by side: scoring a long prompt reads a vocabulary-wide row per token.
  std::atomic<bool> non_finite{false};
  threads::ParallelFor(rows.count, 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = logits + r * vocab;
      const float log_z = LogPartition(row, vocab);
      // A NaN or +inf logit makes the log-partition NaN or inf (and every logprob with it).
      if (!std::isfinite(log_z)) non_finite = true;
      PromptTokenLogprob& e = out.prompt_logprobs[r];
      e.token = seq.tokens[rows.first_position + 1 + r];
      e.logprob = row[e.token] - log_z;
      if (seq.request->prompt_ranks) {
        e.rank = 0;
        for (int64_t v = 0; v < vocab; ++v) e.rank += row[v] >= row[e.token] ? 1 : 0;
      }
      TopLogprobs(row, vocab, top, log_z, e.top);
    }
  });
  if (non_finite) {
    Finish(seq, FinishReason::kError, kNonFiniteLogitsError);
    return;
  }
  seq.prompt_logprobs_next = rows.first_position + 1 + rows.count;
  RequestState& state = *requests_.at(seq.request_id);
  if (state.on_output) state.on_output(out);
}

void Engine::Commit(const SchedulePlan& plan, const BuiltBatch& batch, const float* logits) {
  const int64_t vocab = model_->config().vocab_size;
  scheduler_->CommitStep(plan);
  const std::vector<std::vector<Drawn>> drawn = DrawRows(plan, batch, logits);
  for (size_t slot = 0; slot < plan.chunks.size(); ++slot) {
    Sequence& seq = *plan.chunks[slot].seq;
    const PromptLogitsRows& prompt = batch.prompt_logits[slot];
    if (prompt.count > 0) ReportPromptLogprobs(seq, prompt, logits + prompt.first_row * vocab);
    if (batch.logits_index[slot] < 0 || seq.status == SequenceStatus::kFinished) continue;
    if (seq.request->max_tokens == 0) {
      Finish(seq, FinishReason::kLength);  // Prompt only (scoring); its samples end with it.
      continue;
    }
    const float* row = logits + batch.logits_index[slot] * vocab;
    RequestState& state = *requests_.at(seq.request_id);
    // Sample 0 just computed the prompt: its siblings fork from its blocks (and state slot)
    // before its own token, which may finish it and free them (max_tokens 1, an eos or a stop
    // id as its first token); its siblings go on either way.
    if (seq.sample == 0 && seq.num_generated() == 0 && state.samples.size() > 1) {
      ForkSamples(state, seq, row);
    }
    AcceptToken(seq, row, drawn[slot].empty() ? nullptr : &drawn[slot][0]);
    const int64_t draft = plan.chunks[slot].num_draft;
    if (draft > 0) VerifyDraft(seq, draft, row, drawn[slot]);
  }
}

void Engine::ProposeDrafts() {
  for (Sequence* seq : scheduler_->running()) {
    seq->draft.clear();
    if (seq->is_prefill()) continue;
    // This step draws one token, and one more for each draft token that proves right: past
    // max_tokens they would be drawn for nothing. (The scheduler cuts drafts to the budget.)
    const int64_t left = seq->request->max_tokens - seq->num_generated() - 1;
    if (left <= 0) continue;
    const int64_t count = seq->draft_pace.Next(
        std::min<int64_t>({options_.speculative_tokens, left, options_.max_batch_tokens - 1}));
    if (count <= 0) continue;
    ProposeNgramDraft(seq->tokens, options_.speculative_ngram_min, options_.speculative_ngram_max,
                      static_cast<int32_t>(count), seq->draft);
  }
}

void Engine::VerifyDraft(Sequence& seq, int64_t draft, const float* rows,
                         const std::vector<Drawn>& drawn) {
  const int64_t vocab = model_->config().vocab_size;
  int64_t accepted = 0;
  // Row i holds the logits after draft token i - 1 (row 0: after the pending token), computed as
  // that token's own decode step would compute them (the kernels give every row the same bits
  // whatever else the step runs). So while the token drawn from row i equals draft token i, the
  // draft token's row is the sequence's and the draw from row i + 1 is its next one. A drawn
  // token that ends the sample (EOS, a stop id, the grammar's end) and equals its draft token
  // proved that draft right too: it counts, as vLLM counts every matched draft token before its
  // stop check, and nothing is drawn after it.
  while (accepted < draft && seq.tokens.back() == seq.draft[accepted]) {
    ++accepted;
    if (seq.status == SequenceStatus::kFinished) break;
    const size_t row = static_cast<size_t>(accepted);
    AcceptToken(seq, rows + accepted * vocab, row < drawn.size() ? &drawn[row] : nullptr);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.draft_tokens += draft;
    metrics_.accepted_draft_tokens += accepted;
  }
  seq.draft.clear();
  seq.draft_pace.Record(draft, accepted);
  if (seq.status != SequenceStatus::kFinished) scheduler_->CommitDraft(&seq, accepted);
}

bool Engine::Step() {
  std::lock_guard<std::mutex> step_lock(step_mutex_);
  const auto start = std::chrono::steady_clock::now();
  DrainQueues();
  RetireFinished();
  if (!scheduler_->HasWork()) {
    PublishGauges();
    return false;
  }
  std::optional<profile::Scope> scope;
  scope.emplace(profile::Op::kSchedule);
  if (options_.speculative_tokens > 0) ProposeDrafts();
  const SchedulePlan plan = scheduler_->Schedule();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    metrics_.preemptions += plan.num_preempted;
    metrics_.prefix_hit_tokens += plan.prefix_hit_tokens;
  }
  PublishGauges();
  if (plan.chunks.empty()) {
    if (options_.check_invariants) CheckInvariants();
    return true;
  }
  BuildBatch(plan, batch_);
  if (profile::Enabled()) {
    bool decode = true;
    for (const ScheduledChunk& chunk : plan.chunks) decode = decode && chunk.own_tokens() == 1;
    profile::SetPhase(decode ? profile::Phase::kDecode : profile::Phase::kPrefill);
  }
  scope.reset();
  float* logits = activations_.Logits(static_cast<int64_t>(batch_.forward.logits_rows.size()));
  std::optional<std::string> failure;  // set when the forward threw
  try {
    model_->Forward(batch_.forward, options_.attention, logits);
  } catch (const InternalError& e) {  // a failed check: a bug, which the requests' error says
    failure = StrCat("internal error: ", e.what());
  } catch (const Error& e) {
    failure = e.what();
  } catch (const std::exception& e) {  // std::bad_alloc, a library's own error
    failure = StrCat("the forward failed: ", e.what());
  } catch (...) {
    failure = "the forward failed with an unknown exception";
  }
  if (failure) {
    // Fail what ran in this step; the rest of the engine goes on. Nothing of the step is kept:
    // its rows count as computed, and join the prefix cache, only in Commit.
    for (const ScheduledChunk& chunk : plan.chunks) {
      Finish(*chunk.seq, FinishReason::kError, *failure);
    }
    RetireFinished();
    if (options_.check_invariants) CheckInvariants();
    PublishGauges();
    return true;
  }
  // The step counts before Commit reports its tokens and ends, so that whoever hears of them finds
  // it in steps and its time up to here in busy_seconds; the time Commit takes is added after.
  auto now = std::chrono::steady_clock::now();
  AddBusyTime(start, now, /*new_step=*/true);
  scope.emplace(profile::Op::kSampling);
  Commit(plan, batch_, logits);
  scope.reset();
  RetireFinished();
  if (options_.check_invariants) CheckInvariants();
  AddBusyTime(now, std::chrono::steady_clock::now(), /*new_step=*/false);
  PublishGauges();
  return true;
}

void Engine::AddBusyTime(std::chrono::steady_clock::time_point from,
                         std::chrono::steady_clock::time_point to, bool new_step) {
  const double seconds = std::chrono::duration<double>(to - from).count();
  std::lock_guard<std::mutex> lock(mutex_);
  if (new_step) ++metrics_.steps;
  metrics_.busy_seconds += seconds;
}

void Engine::CheckInvariants() const {
  const std::string pool_error = pool_->CheckConsistency();
  if (!pool_error.empty()) Fail("block pool: ", pool_error);
  // Blocks at or past touched_end() were never handed out (block_pool.h): only those below can
  // be held, which keeps this O(peak use) per step however large the pool.
  const cache::BlockId touched = pool_->touched_end();
  std::vector<int32_t> holders(touched, 0);
  auto hold = [&](cache::BlockId b, const Sequence& seq) {
    if (b < 0 || b >= touched) Fail("sequence ", seq.id, " holds block ", b, ", which the pool never handed out");
    ++holders[b];
  };
  for (const auto& [id, state] : requests_) {
    for (const auto& seq : state->samples) {
      if (seq->status == SequenceStatus::kFinished) continue;
      for (cache::BlockId b : seq->table.blocks()) hold(b, *seq);
      if (seq->window_table) {
        for (cache::BlockId b : seq->window_table->blocks())
          if (b != cache::kNoBlock) hold(b, *seq);
      }
    }
  }
  for (cache::BlockId b = 0; b < touched; ++b) {
    if (holders[b] != pool_->ref_count(b)) {
      Fail("block ", b, " has reference count ", pool_->ref_count(b), " but ", holders[b], " block tables hold it");
    }
  }
  if (requests_.empty() && pool_->NumUsed() != 0) Fail(pool_->NumUsed(), " blocks still used with no request left");
  // Hybrid models: exactly the running sequences hold state slots, each its own.
  if (const cache::SlotPool* slots = cache_->slot_pool()) {
    std::vector<bool> held(slots->num_slots(), false);
    int32_t holding = 0;
    for (const Sequence* seq : scheduler_->running()) {
      if (seq->state_slot < 0) Fail("running sequence ", seq->id, " holds no state slot");
      if (held[seq->state_slot]) Fail("state slot ", seq->state_slot, " is held twice");
      held[seq->state_slot] = true;
      ++holding;
    }
    if (holding != slots->NumUsed()) Fail(slots->NumUsed(), " state slots used but ", holding, " running sequences hold one");
  }
}

void Engine::Start() {
  stop_ = false;
  thread_ = std::thread([this] {
    while (!stop_) {
      if (Step()) {
        // Lets a thread waiting for the step lock (Metrics()) in before the next step takes it
        // again; without it, a busy loop can starve /metrics for many steps.
        std::this_thread::yield();
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stop_ || !submit_queue_.empty() || !cancel_queue_.empty(); });
    }
  });
}

void Engine::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Engine::PublishGauges() {
  // Read on the engine thread, which alone changes the queues and the pool.
  const int32_t running = static_cast<int32_t>(scheduler_->running().size());
  const int32_t waiting = static_cast<int32_t>(scheduler_->waiting().size());
  const int32_t used = pool_->NumUsed();
  const int32_t cached = pool_->NumCachedUnowned();
  int32_t window_blocks = 0;
  for (const Sequence* seq : scheduler_->running()) {
    if (seq->window_table) window_blocks += seq->window_table->NumHeld();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  metrics_.window_blocks = window_blocks;
  metrics_.peak_window_blocks = std::max(metrics_.peak_window_blocks, window_blocks);
  metrics_.running = running;
  metrics_.waiting = waiting;
  metrics_.used_blocks = used;
  metrics_.cached_blocks = cached;
}

EngineMetrics Engine::Metrics() const {
  // Never waits for a step: the counters and the gauges last published (at step boundaries and
  // before a request's end is reported) sit under the small lock.
  std::lock_guard<std::mutex> lock(mutex_);
  return metrics_;
}

}  // namespace latent::engine
