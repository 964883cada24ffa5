#include "server/completion_session.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <random>

#include "base/error.h"
#include "server/chat_prompt.h"
#include "server/forced_tool_call_parser.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "server/tool_request.h"
#include "structured/after_reasoning.h"
#include "structured/tool_choice.h"
#include "tokenizer/utf8.h"

namespace latent::server {
namespace {

std::string RandomId(const char* prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%s%016llx%08llx", prefix, static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng() & 0xffffffffu));
  return buf;
}

// The server stopped waiting for the request's grammar to compile (HttpServer::AbortAll): a 503,
// as the requests it cancels get.
ApiError ShuttingDown(const structured::CompileAbandoned& e) {
  return ApiError(503, e.what(), "", "server_shutting_down");
}

double Seconds(CompletionSession::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

}  // namespace

CompletionSession::CompletionSession(const ServerContext& context, GenerationRequest request,
                                     Clock::time_point arrival)
    : context_(context), request_(std::move(request)), arrival_(arrival) {
  const bool chat = request_.endpoint == Endpoint::kChatCompletions;
  meta_.endpoint = request_.endpoint;
  meta_.id = RandomId(chat ? "chatcmpl-" : "cmpl-");
  meta_.created = static_cast<int64_t>(std::time(nullptr));
  meta_.model = request_.model;
  meta_.logprobs = request_.logprobs;
  meta_.return_token_ids = request_.return_token_ids;
  meta_.include_usage = request_.include_usage;
  meta_.forced_tool_call = ToolCallForced();
}

std::vector<int32_t> CompletionSession::Tokenize(const PromptSpec& prompt) const {
  if (!prompt.is_text) return prompt.ids;
  if (!context_.tokenizer) {
    throw ApiError(400, "this model has no tokenizer: give the prompt as token ids", "prompt");
  }
  return context_.tokenizer->Encode(prompt.text, /*add_special_tokens=*/true);
}

std::vector<int32_t> CompletionSession::RenderChat(std::string* rendered) const {
  if (!context_.tokenizer || !context_.chat_template) {
    throw ApiError(400, "this model has no chat template: use /v1/completions", "messages");
  }
  *rendered =
      RenderChatPrompt(*context_.chat_template, request_);
  // The template writes the special tokens (BOS) itself.
  return context_.tokenizer->Encode(*rendered, /*add_special_tokens=*/false);
}

std::shared_ptr<const engine::TokenConstraintFactory> CompletionSession::ResponseConstraint() const {
  try {
    if (context_.structured == nullptr) latent::Fail("structured output is not available in this server");
    return context_.structured->Get().Constraint(request_.output);
  } catch (const structured::CompileAbandoned& e) {
    throw ShuttingDown(e);
  } catch (const Error& e) {
    throw RequestError(e, StrCat(request_.output_field, ": "), request_.output_field);
  }
}

std::shared_ptr<const engine::TokenConstraintFactory> CompletionSession::ForcedToolCallConstraint() const {
  if (request_.output.active()) {
    throw ApiError(400, StrCat(request_.output_field, " cannot be combined with tool_choice "
                               "'required' or a named function: the forced call is the output"),
                   request_.output_field);
  }
  nlohmann::ordered_json choice = "required";
  if (request_.tool_choice.mode == ToolChoice::Mode::kFunction) {
    choice = {{"type", "function"}, {"function", {{"name", request_.tool_choice.function}}}};
  }
  try {
    if (context_.structured == nullptr) latent::Fail("structured output is not available in this server");
    return context_.structured->Get().JsonSchema(structured::ToolCallSchema(request_.tools, choice));
  } catch (const structured::CompileAbandoned& e) {
    throw ShuttingDown(e);
  } catch (const Error& e) {
    throw RequestError(e, "tool_choice: ", "tool_choice");
  }
}

std::optional<ThinkStart> CompletionSession::OutputStart(const std::string& chat_prompt) const {
  if (request_.endpoint != Endpoint::kChatCompletions) return std::nullopt;
  const std::optional<ContinuedMessage> continued = Continued();
  return ReasoningStart(context_.reasoning_parser, chat_prompt,
                        continued ? &*continued : nullptr, &request_.chat_template_kwargs);
}

std::shared_ptr<const engine::TokenConstraintFactory> CompletionSession::AfterReasoning(
    std::shared_ptr<const engine::TokenConstraintFactory> grammar, ThinkStart start) const {
  // The parser decides by <think> only where the model may open the reasoning itself.
  const bool may_open = start == ThinkStart::kMayOpen;
  for (const auto& [marker, token] :
       {std::pair{ReasoningEndMarker(), context_.reasoning_end_token},
        std::pair{ReasoningStartMarker(), may_open ? context_.reasoning_start_token : 0}}) {
    if (token >= 0) continue;
    // Only a token id tells the engine, token by token, where the reasoning opens and ends (as
    // vLLM's is_reasoning_end does); matching decoded text would need the detokenizer in the
    // engine's step. So such a tokenizer cannot have both: refused rather than constrain the
    // reasoning, or leave the answer unconstrained.
    const std::string field = ToolCallForced() ? "tool_choice" : request_.output_field;
    throw ApiError(400, StrCat(field, " cannot be combined with the reasoning parser '",
                               context_.reasoning_parser, "' here: the tokenizer has no single ",
                               "token for its marker ", marker, ", so the grammar cannot tell ",
                               "where the answer starts (serve with --reasoning-parser none to ",
                               "constrain the whole output)"),
                   field);
  }
  return structured::AfterReasoning(std::move(grammar), context_.reasoning_end_token,
                                    context_.structured->Get().vocab_size(),
                                    may_open ? context_.reasoning_start_token : -1);
}

void CompletionSession::Start() {
  // Tokenize and check every prompt before submitting any.
  std::vector<engine::Request> requests;
  std::vector<bool> truncated;  // Completions: truncate_prompt_tokens cut prompt p.
  std::string chat_prompt;
  if (request_.endpoint == Endpoint::kChatCompletions) {
    requests.push_back(MakeEngineRequest(request_, RenderChat(&chat_prompt), context_.limits));
    meta_.reasoning = !context_.reasoning_parser.empty();
  } else {
    for (const PromptSpec& prompt : request_.prompts) {
      std::vector<int32_t> ids = Tokenize(prompt);
      const size_t given = ids.size();
      requests.push_back(MakeEngineRequest(request_, std::move(ids), context_.limits));
      truncated.push_back(requests.back().prompt.size() < given);
    }
  }
  std::shared_ptr<const engine::TokenConstraintFactory> constraint;
  if (ToolCallForced()) {
    constraint = ForcedToolCallConstraint();
  } else if (request_.output.active()) {
    constraint = ResponseConstraint();
  }
  if (constraint) {
    const std::optional<ThinkStart> start = OutputStart(chat_prompt);
    if (start && *start != ThinkStart::kContent) {
      constraint = AfterReasoning(std::move(constraint), *start);
    }
  }
  for (engine::Request& r : requests) r.constraint = constraint;
  if (ToolCallsParsed()) kept_markers_ = context_.tool_marker_tokens;
  if (meta_.reasoning) {
    kept_markers_.insert(kept_markers_.end(), context_.reasoning_marker_tokens.begin(),
                         context_.reasoning_marker_tokens.end());
    std::sort(kept_markers_.begin(), kept_markers_.end());
  }
  const int32_t n = request_.sampling.n;
  prompts_.resize(requests.size());
  choices_.reserve(requests.size() * n);
  for (size_t p = 0; p < requests.size(); ++p) {
    prompts_[p].ids = requests[p].prompt;
    if (request_.echo) {
      // The text as given; token-id prompts decoded as the output is (skip_special_tokens).
      // (A prompt that truncate_prompt_tokens cut is echoed as what is left of it, decoded.)
      const PromptSpec& spec = request_.prompts[p];
      if (spec.is_text && !truncated[p]) {
        prompts_[p].echo_text = spec.text;
      } else if (context_.tokenizer) {
        prompts_[p].echo_text =
            context_.tokenizer->Decode(prompts_[p].ids, request_.skip_special_tokens);
      }
      if (request_.logprobs) {
        LogprobEntry first;
        first.token = TokenText(prompts_[p].ids[0]);
        first.null_logprob = true;
        prompts_[p].echo_logprobs.push_back(std::move(first));
      }
    }
    const bool keep_markers_only = request_.skip_special_tokens && !kept_markers_.empty();
    // The output's text is what it adds after the prompt's, as vLLM's detokenizer gives it (a
    // SentencePiece token's leading space, a character the prompt's last bytes began); so the
    // prompt primes each choice's detokenizer, without the tokens Apply would not push.
    std::vector<int32_t> context = prompts_[p].ids;
    if (keep_markers_only) std::erase_if(context, [&](int32_t id) { return Skipped(id); });
    for (int32_t s = 0; s < n; ++s) {
      Choice& c = choices_.emplace_back(request_.stop, request_.include_stop_str_in_output);
      c.index = static_cast<int32_t>(p) * n + s;
      if (request_.endpoint == Endpoint::kChatCompletions) c.parser = MakeParser(chat_prompt);
      c.keep_markers_only = keep_markers_only;
      if (context_.tokenizer) {
        c.detokenizer.emplace(*context_.tokenizer,
                              request_.skip_special_tokens && !c.keep_markers_only);
        c.detokenizer->Prime(context);
      }
    }
    // Without logprobs (or with a one-token prompt) there is nothing to wait for.
    const size_t awaited = request_.logprobs ? prompts_[p].ids.size() : 0;
    if (request_.echo && prompts_[p].echo_logprobs.size() >= awaited) {
      Echo(static_cast<int32_t>(p));
    }
  }
  auto self = shared_from_this();
  for (size_t p = 0; p < requests.size(); ++p) {
    const int32_t prompt = static_cast<int32_t>(p);
    try {
      prompts_[p].engine_id = context_.engine->Submit(
          std::move(requests[p]),
          [self, prompt](const engine::RequestOutput& out) { self->OnOutput(prompt, out); });
    } catch (const Error& e) {
      for (size_t q = 0; q < p; ++q) context_.engine->Cancel(prompts_[q].engine_id);
      cancelled_ = true;
      throw RequestError(e, "",
                         request_.endpoint == Endpoint::kCompletions ? "prompt" : "messages");
    }
  }
}

void CompletionSession::OnOutput(int32_t prompt, const engine::RequestOutput& output) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    events_.push_back({prompt, output, Clock::now()});
  }
  wake_.notify_one();
  if (notify_) notify_();
}

bool CompletionSession::Wait(std::chrono::milliseconds timeout) {
  std::deque<Event> events;
  std::optional<std::string> abort;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, timeout,
                   [this] { return !events_.empty() || abort_message_.has_value(); });
    events.swap(events_);
    abort = abort_message_;
  }
  if (done_) return !events.empty();
  for (const Event& e : events) {
    Apply(e);
    if (done_) break;
  }
  if (!done_ && abort) {
    Fail(503, *abort, "server_shutting_down");
  }
  if (!done_) CancelEngineRequests(/*all=*/false);
  return !events.empty();
}

bool CompletionSession::Skipped(int32_t token) const {
  return context_.tokenizer->IsSpecial(token) &&
         !std::binary_search(kept_markers_.begin(), kept_markers_.end(), token);
}

LogprobEntry CompletionSession::MakeLogprob(const engine::RequestOutput& out,
                                            int64_t offset) const {
  LogprobEntry e;
  e.token = TokenText(out.token);
  if (request_.return_tokens_as_token_ids && context_.tokenizer) {
    const int32_t ids[1] = {out.token};
    e.bytes = context_.tokenizer->Decode(ids, /*skip_special_tokens=*/false);
  }
  e.logprob = out.logprob;
  e.text_offset = offset;
  for (const engine::TokenLogprob& alt : out.top_logprobs) {
    if (static_cast<int32_t>(e.top.size()) >= request_.top_logprobs) break;
    e.top.emplace_back(TokenText(alt.token), alt.logprob);
  }
  return e;
}

std::string CompletionSession::TokenText(int32_t token) const {
  if (!context_.tokenizer || request_.return_tokens_as_token_ids) {
    return StrCat("token_id:", token);
  }
  const int32_t ids[1] = {token};
  return context_.tokenizer->Decode(ids, /*skip_special_tokens=*/false);
}

void CompletionSession::AddPromptLogprobs(int32_t p, const engine::RequestOutput& out) {
  Prompt& prompt = prompts_[p];
  if (request_.prompt_logprobs >= 0) {
    // vLLM's prompt_logprobs: the token itself, then its best alternatives (ranked 1, 2, ...).
    auto decoded = [&](int32_t token) -> std::optional<std::string> {
      if (!context_.tokenizer) return std::nullopt;
      const int32_t ids[1] = {token};
      return context_.tokenizer->Decode(ids, /*skip_special_tokens=*/false);
    };
    for (const engine::PromptTokenLogprob& token : out.prompt_logprobs) {
      std::vector<RankedLogprob> listed = {
          {token.token, token.logprob, token.rank, decoded(token.token)}};
      for (size_t i = 0; i < token.top.size() && i < static_cast<size_t>(request_.prompt_logprobs);
           ++i) {
        const engine::TokenLogprob& alt = token.top[i];
        listed.push_back({alt.token, alt.logprob, static_cast<int64_t>(i) + 1, decoded(alt.token)});
      }
      prompt.prompt_logprobs.push_back(std::move(listed));
    }
  }
  if (prompt.echoed || !request_.echo || !request_.logprobs) return;
  // The engine reports each prompt token once, in order, from token 1.
  if (out.prompt_logprobs_start != static_cast<int64_t>(prompt.echo_logprobs.size())) {
    Fail(500,
         StrCat("the engine reported prompt logprobs from token ", out.prompt_logprobs_start,
                " after ", prompt.echo_logprobs.size()),
         "engine_error");
    return;
  }
  for (const engine::PromptTokenLogprob& token : out.prompt_logprobs) {
    LogprobEntry e;
    e.token = TokenText(token.token);
    e.logprob = token.logprob;
    for (const engine::TokenLogprob& alt : token.top) {
      if (static_cast<int32_t>(e.top.size()) >= request_.top_logprobs) break;
      e.top.emplace_back(TokenText(alt.token), alt.logprob);
    }
    prompt.echo_logprobs.push_back(std::move(e));
  }
  if (prompt.echo_logprobs.size() >= prompt.ids.size()) Echo(p);
}

void CompletionSession::Echo(int32_t p) {
  Prompt& prompt = prompts_[p];
  if (prompt.echoed) return;
  prompt.echoed = true;
  if (!prompt.echo_logprobs.empty()) {
    // text_offset: where each token's text starts in the echoed text, in characters (as
    // vLLM's len() and OpenAI count), from detokenizing the prompt as the output is; clamped,
    // since a text prompt is echoed as given (no BOS text).
    std::optional<tokenizer::StreamingDetokenizer> detokenizer;
    if (context_.tokenizer) detokenizer.emplace(*context_.tokenizer, request_.skip_special_tokens);
    const auto echo_chars = static_cast<int64_t>(tokenizer::Utf8CharCount(prompt.echo_text));
    int64_t offset = 0;
    for (size_t i = 0; i < prompt.echo_logprobs.size(); ++i) {
      prompt.echo_logprobs[i].text_offset = std::min(offset, echo_chars);
      if (detokenizer) {
        offset += static_cast<int64_t>(
            tokenizer::Utf8CharCount(detokenizer->Push(prompt.ids[i])));
      }
    }
  }
  const int32_t n = request_.sampling.n;
  for (int32_t s = 0; s < n; ++s) {
    Choice& c = choices_[static_cast<size_t>(p) * n + s];
    // Before any of the choice's tokens: the engine reports the whole prompt first.
    c.text.insert(0, prompt.echo_text);
    const auto echo_chars = static_cast<int64_t>(tokenizer::Utf8CharCount(prompt.echo_text));
    c.text_chars += echo_chars;
    c.given_chars += echo_chars;
    c.logprobs.insert(c.logprobs.begin(), prompt.echo_logprobs.begin(), prompt.echo_logprobs.end());
  }
  prompt.echo_logprobs.clear();
}

void CompletionSession::Apply(const Event& event) {
  Prompt& prompt = prompts_[event.prompt];
  const engine::RequestOutput& out = event.output;
  if (!out.prompt_logprobs.empty()) {
    AddPromptLogprobs(event.prompt, out);
    if (done_) return;
  }
  if (out.finish != engine::FinishReason::kNone) ++prompt.samples_ended;
  if (out.has_token && out.sample == 0 && out.cached_prompt_tokens >= 0) {
    prompt.cached_tokens = out.cached_prompt_tokens;
  }
  Choice& c = choices_[static_cast<size_t>(event.prompt) * request_.sampling.n + out.sample];
  if (c.ended) return;  // Tokens after a stop string.
  const bool stop_terminated =
      out.has_token && out.finish == engine::FinishReason::kStop && out.stop_terminated;
  if (out.has_token) {
    if (!prompt.first_token_seen) {
      prompt.first_token_seen = true;
      context_.metrics->ObserveTimeToFirstToken(Seconds(event.at - arrival_));
    }
    if (c.tokens > 0) context_.metrics->ObserveInterTokenLatency(Seconds(event.at - c.last_token));
    c.last_token = event.at;
    ++c.tokens;
    if (request_.return_token_ids) c.token_ids.push_back(out.token);
    if (request_.logprobs) c.logprobs.push_back(MakeLogprob(out, c.given_chars));
    const bool skipped = c.keep_markers_only && Skipped(out.token);
    // vLLM's detokenizer (update(new_token_ids, stop_terminated)): the EOS or stop id that ended
    // the choice is in token_ids, logprobs and usage, but its text is neither output nor
    // searched for stop strings unless include_stop_str_in_output, where it is output, still
    // unsearched; so its id is the stop_reason even where its text would complete a stop
    // string. Left out here, before the parsers, it is in no content, reasoning or tool call.
    const bool dropped = stop_terminated && !request_.include_stop_str_in_output;
    const std::string piece = c.detokenizer && !skipped && !dropped
                                  ? c.detokenizer->Push(out.token) : std::string();
    c.given_chars += static_cast<int64_t>(tokenizer::Utf8CharCount(piece));
    if (stop_terminated) {
      if (!dropped) Emit(c, c.stop.PushUnmatched(piece));
    } else {
      Emit(c, c.stop.PushTokenText(piece, c.tokens, request_.min_tokens));
    }
    if (c.stop.stopped()) {
      c.stop_reason = c.stop.matched();
      EndChoice(c, "stop");
      return;
    }
  }
  if (out.finish == engine::FinishReason::kNone) return;
  // The detokenizer's held-back rest: the text of tokens before the last, unless it holds the
  // kept text of a stop id (then unsearched, as above).
  const std::string rest = c.detokenizer ? c.detokenizer->Finish() : std::string();
  Emit(c, stop_terminated && request_.include_stop_str_in_output
              ? c.stop.PushUnmatched(rest)
              : c.stop.PushTokenText(rest, c.tokens, request_.min_tokens));
  if (!c.stop.stopped()) Emit(c, c.stop.Finish());
  // A stop string completed by text held back from tokens before the last would have ended the
  // choice at that token, before any stop id, had the text been released then; so it wins. Else
  // the stop id (or extra EOS id) is the stop_reason; the tokenizer's EOS gives none (stop_token
  // is -1).
  if (out.finish == engine::FinishReason::kStop || out.finish == engine::FinishReason::kLength) {
    if (c.stop.stopped()) {
      c.stop_reason = c.stop.matched();
    } else if (out.stop_token >= 0) {
      c.stop_reason = out.stop_token;
    }
  }
  switch (out.finish) {
    case engine::FinishReason::kStop:
      EndChoice(c, "stop");
      break;
    case engine::FinishReason::kLength:
      EndChoice(c, c.stop.stopped() ? "stop" : "length");
      break;
    case engine::FinishReason::kCancelled:
      // Only this session cancels its requests; a choice still open then was aborted.
      EndChoice(c, "abort");
      break;
    case engine::FinishReason::kError:
    case engine::FinishReason::kNone:
      Fail(500, StrCat("the engine failed on this request: ", out.error), "engine_error");
      break;
  }
}

bool CompletionSession::ToolCallsParsed() const {
  // Only when the request offers tools and lets the model call them.
  return request_.endpoint == Endpoint::kChatCompletions && !context_.tool_call_parser.empty() &&
         request_.tool_choice.mode != ToolChoice::Mode::kNone && !request_.tools.is_null();
}

bool CompletionSession::ToolCallForced() const {
  return request_.endpoint == Endpoint::kChatCompletions && !request_.tools.is_null() &&
         (request_.tool_choice.mode == ToolChoice::Mode::kRequired ||
          request_.tool_choice.mode == ToolChoice::Mode::kFunction);
}

std::optional<ContinuedMessage> CompletionSession::Continued() const {
  if (!request_.continue_final_message || request_.messages.empty()) return std::nullopt;
  // The server's messages hold their content as one string (openai_schema.cc).
  const OrderedJson& last = request_.messages.back();
  ContinuedMessage continued;
  continued.role = last.value("role", "");
  const auto content = last.find("content");
  if (content != last.end() && content->is_string()) continued.text = content->get<std::string>();
  return continued;
}

std::unique_ptr<OutputParser> CompletionSession::MakeParser(const std::string& prompt) const {
  const std::optional<ContinuedMessage> continued = Continued();
  std::unique_ptr<OutputParser> reasoning =
      MakeReasoningParser(context_.reasoning_parser, prompt, continued ? &*continued : nullptr,
                          &request_.chat_template_kwargs);
  // A forced call's grammar starts after the reasoning (AfterReasoning), so the reasoning parser
  // runs first and its content is the call's JSON, as vLLM parses forced calls; no markup parser
  // runs (the grammar allows no markup).
  if (ToolCallForced()) {
    return std::make_unique<ParserChain>(std::move(reasoning),
                                         MakeForcedToolCallParser(request_.tool_choice));
  }
  std::unique_ptr<OutputParser> tools;
  if (ToolCallsParsed()) tools = MakeToolCallParser(context_.tool_call_parser, request_.tools);
  if (!tools) return reasoning;
  if (!reasoning) return tools;
  return std::make_unique<ParserChain>(std::move(reasoning), std::move(tools));
}

void CompletionSession::AddParsed(Choice& c, const ParsedDelta& parsed) {
  c.reasoning += parsed.reasoning;
  AppendText(c, parsed.content);
  for (const ToolCallDelta& call : parsed.tool_calls) {
    // parallel_tool_calls false: only the first call, as vLLM's
    // maybe_filter_parallel_tool_calls keeps (tool_calls[:1], index-0 deltas).
    if (!request_.parallel_tool_calls && call.index > 0) continue;
    if (!call.id.empty()) {
      c.tool_calls.push_back({call.index, call.id, call.name, call.arguments});
    } else if (call.index >= 0 && static_cast<size_t>(call.index) < c.tool_calls.size()) {
      c.tool_calls[call.index].arguments += call.arguments;
    }
    if (call.closed) ++c.complete_calls;
  }
  // A further call cut short matters only where it would have been kept.
  const bool kept_more = request_.parallel_tool_calls || c.tool_calls.empty();
  c.unfinished_call = c.unfinished_call || (parsed.unfinished_call && kept_more);
}

void CompletionSession::Emit(Choice& c, std::string_view text) {
  if (!c.parser) {
    AppendText(c, text);
    return;
  }
  AddParsed(c, c.parser->Push(text));
}

void CompletionSession::AppendText(Choice& c, std::string_view text) {
  c.text += text;
  c.text_chars += static_cast<int64_t>(tokenizer::Utf8CharCount(text));
}

void CompletionSession::EndChoice(Choice& c, const std::string& reason) {
  // The output is over: what the parser held back (a partial marker) is text after all.
  if (c.parser) AddParsed(c, c.parser->Finish());
  c.ended = true;
  // A stop string cut the text where it began, maybe before the text of the tokens it spans.
  for (LogprobEntry& e : c.logprobs) {
    e.text_offset = std::min(e.text_offset, c.text_chars);
  }
  // A turn that ends by calling tools finishes "tool_calls", but only when every call is complete
  // (its end marker came): a call cut by a stop string keeps "stop", as one cut by max_tokens
  // keeps "length", so that a client does not run a call with half its arguments, nor the first
  // calls of a turn whose next call was cut before its name came out (unfinished_call). (vLLM
  // says "tool_calls" whenever its parser found a call, however the output ended.) A named
  // tool_choice finishes "stop" all the same, as OpenAI and vLLM ("tool_calls" for auto or
  // required, "stop" for a named function).
  const bool calls_complete = !c.tool_calls.empty() && !c.unfinished_call &&
                              c.complete_calls == c.tool_calls.size();
  const bool named = ToolCallForced() && request_.tool_choice.mode == ToolChoice::Mode::kFunction;
  c.finish_reason = reason == "stop" && calls_complete && !named ? "tool_calls" : reason;
  context_.metrics->CountFinished(c.finish_reason);
  CheckDone();
}

void CompletionSession::CheckDone() {
  if (done_) return;
  for (const Choice& c : choices_) {
    if (!c.ended) return;
  }
  done_ = true;
  context_.metrics->ObserveRequestLatency(Seconds(Clock::now() - arrival_));
}

void CompletionSession::Fail(int status, const std::string& message, const std::string& code) {
  if (done_) return;
  error_.emplace(status, message, "", code);
  for (Choice& c : choices_) {
    if (!c.ended) {
      c.ended = true;
      c.finish_reason = status == 503 ? "abort" : "error";
      context_.metrics->CountFinished(c.finish_reason);
    }
  }
  CancelEngineRequests(/*all=*/true);
  done_ = true;
  context_.metrics->ObserveRequestLatency(Seconds(Clock::now() - arrival_));
}

void CompletionSession::CancelEngineRequests(bool all) {
  const int32_t n = request_.sampling.n;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    Prompt& prompt = prompts_[p];
    if (prompt.cancelled || prompt.engine_id < 0 || prompt.samples_ended == n) continue;
    bool open = false;
    for (int32_t s = 0; s < n && !all; ++s) open |= !choices_[p * n + s].ended;
    if (open) continue;
    context_.engine->Cancel(prompt.engine_id);
    prompt.cancelled = true;
  }
}

void CompletionSession::Cancel() {
  if (cancelled_) return;
  cancelled_ = true;
  if (!done_) {
    for (Choice& c : choices_) {
      if (!c.ended) {
        c.ended = true;
        c.finish_reason = "abort";
        context_.metrics->CountFinished("abort");
      }
    }
    done_ = true;
  }
  CancelEngineRequests(/*all=*/true);
}

void CompletionSession::Abort(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!abort_message_) abort_message_ = message;
  }
  wake_.notify_all();
  if (notify_) notify_();
}

Usage CompletionSession::TotalUsage() const {
  Usage usage;
  for (const Prompt& p : prompts_) {
    usage.prompt_tokens += static_cast<int64_t>(p.ids.size());
    usage.cached_tokens += p.cached_tokens;
  }
  for (const Choice& c : choices_) usage.completion_tokens += c.tokens;
  return usage;
}

std::string CompletionSession::TakeStream() {
  std::string out;
  if (stream_closed_) return out;
  if (!stream_opened_) {
    stream_opened_ = true;
    if (request_.endpoint == Endpoint::kChatCompletions) {
      for (Choice& c : choices_) {
        ChoiceOutput role;
        role.index = c.index;
        // The opening chunk is each choice's first: vLLM puts prompt_token_ids there.
        if (request_.return_token_ids) role.prompt_token_ids = PromptOf(c).ids;
        c.sent_prompt_ids = true;
        // No completion tokens yet, as vLLM's, though some may have come before the stream
        // opened: they go out (and are counted) in the choice's next chunk.
        role.usage = ChunkUsage(c, 0);
        out += SseData(ChunkJson(meta_, role, /*role_only=*/true));
      }
    }
  }
  for (Choice& c : choices_) {
    const bool new_end = c.ended && !c.sent_end && !error_;
    std::vector<ToolCallOutput> call_deltas;
    c.sent_arguments.resize(c.tool_calls.size(), 0);
    for (size_t i = 0; i < c.tool_calls.size(); ++i) {
      const ToolCallOutput& call = c.tool_calls[i];
      if (i >= c.sent_calls) {
        call_deltas.push_back(call);
      } else if (call.arguments.size() > c.sent_arguments[i]) {
        call_deltas.push_back(
            {call.index, "", "", call.arguments.substr(c.sent_arguments[i])});
      }
      c.sent_arguments[i] = call.arguments.size();
    }
    c.sent_calls = c.tool_calls.size();
    // Completions' text_offset: an entry whose offset lies past the text let through so far
    // waits, since a stop string may yet cut the text before it (EndChoice then moves the offset
    // to the cut); so the streamed entries are the whole response's. Offsets only grow.
    size_t logprobs_to = c.logprobs.size();
    if (!c.ended && request_.endpoint == Endpoint::kCompletions) {
      while (logprobs_to > c.sent_logprobs &&
             c.logprobs[logprobs_to - 1].text_offset > c.text_chars) {
        --logprobs_to;
      }
    }
    if (c.sent_text == c.text.size() && c.sent_reasoning == c.reasoning.size() &&
        c.sent_ids == c.token_ids.size() && c.sent_logprobs == logprobs_to &&
        call_deltas.empty() && !new_end) {
      continue;
    }
    ChoiceOutput delta;
    delta.tool_calls = std::move(call_deltas);
    delta.index = c.index;
    delta.text = c.text.substr(c.sent_text);
    delta.reasoning = c.reasoning.substr(c.sent_reasoning);
    delta.token_ids.assign(c.token_ids.begin() + c.sent_ids, c.token_ids.end());
    delta.logprobs.assign(c.logprobs.begin() + c.sent_logprobs, c.logprobs.begin() + logprobs_to);
    if (new_end) {
      delta.finish_reason = c.finish_reason;
      delta.stop_reason = c.stop_reason;
    }
    if (request_.return_token_ids && !c.sent_prompt_ids) delta.prompt_token_ids = PromptOf(c).ids;
    c.sent_prompt_ids = true;
    delta.usage = ChunkUsage(c, c.tokens);
    c.sent_text = c.text.size();
    c.sent_reasoning = c.reasoning.size();
    c.sent_ids = c.token_ids.size();
    c.sent_logprobs = logprobs_to;
    c.sent_end = c.sent_end || new_end;
    out += SseData(ChunkJson(meta_, delta));
  }
  if (done_) {
    if (error_) {
      out += SseData(ErrorJson(*error_));
    } else if (request_.include_usage) {
      out += SseData(UsageChunkJson(meta_, TotalUsage()));
    }
    out += "data: [DONE]\n\n";
    stream_closed_ = true;
  }
  return out;
}

std::pair<int, std::string> CompletionSession::Response() const {
  if (error_) return {error_->status(), Dump(ErrorJson(*error_))};
  std::vector<ChoiceOutput> choices;
  choices.reserve(choices_.size());
  for (const Choice& c : choices_) {
    ChoiceOutput& out = choices.emplace_back();
    out.index = c.index;
    out.text = c.text;
    out.token_ids = c.token_ids;
    out.logprobs = c.logprobs;
    out.finish_reason = c.finish_reason;
    out.stop_reason = c.stop_reason;
    out.reasoning = c.reasoning;
    out.tool_calls = c.tool_calls;
    if (request_.return_token_ids) out.prompt_token_ids = PromptOf(c).ids;
    if (request_.prompt_logprobs >= 0) {
      out.prompt_logprobs = PromptLogprobsJson(PromptOf(c).prompt_logprobs);
    }
  }
  return {200, Dump(ResponseJson(meta_, choices, TotalUsage()))};
}

const CompletionSession::Prompt& CompletionSession::PromptOf(const Choice& c) const {
  return prompts_[static_cast<size_t>(c.index) / request_.sampling.n];
}

std::optional<Usage> CompletionSession::ChunkUsage(const Choice& c,
                                                  int64_t completion_tokens) const {
  if (!request_.continuous_usage) return std::nullopt;
  // vLLM's continuous usage: the choice's prompt and its completion tokens so far (no
  // prompt_tokens_details: ChunkJson leaves them out, as vLLM's chunks do).
  Usage usage;
  usage.prompt_tokens = static_cast<int64_t>(PromptOf(c).ids.size());
  usage.completion_tokens = completion_tokens;
  return usage;
}

}  // namespace latent::server
