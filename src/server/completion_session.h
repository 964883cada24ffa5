// One /v1/completions or /v1/chat/completions request in flight: its prompts submitted to the
// engine (one engine request per prompt, n samples each), the engine's token events turned into
// choices (streaming detokenization, stop strings, logprobs), and the response: one JSON body,
// or SSE chunks as tokens arrive.
//
// Threads: the engine calls OnOutput on its own thread, which only queues the event (the HTTP
// layer never blocks the engine). The HTTP handler's thread does everything else through Wait()
// and Take*/Response(). Abort() may come from any thread (shutdown).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/openai_schema.h"
#include "server/output_parser.h"
#include "server/reasoning_parser.h"
#include "server/server_context.h"
#include "server/stop_strings.h"
#include "tokenizer/streaming_detokenizer.h"

namespace latent::server {

class CompletionSession : public std::enable_shared_from_this<CompletionSession> {
 public:
  using Clock = std::chrono::steady_clock;

  // Create with std::make_shared (the engine's callbacks hold the session).
  CompletionSession(const ServerContext& context, GenerationRequest request,
                    Clock::time_point arrival);

  // Tokenizes the prompts (through the chat template for chat) and submits them. Throws ApiError
  // for a prompt that is refused; then nothing stays submitted.
  void Start();

  // Waits up to `timeout` for engine events and applies them. Returns whether any arrived.
  bool Wait(std::chrono::milliseconds timeout);
  // Every choice has ended, or the request failed or was aborted.
  bool done() const { return done_; }

  // Streaming: the SSE text produced since the last call. Once done(), it ends with the last
  // chunks (finish reasons, then usage with include_usage, or an error event) and
  // "data: [DONE]", exactly once; stream_closed() is then true.
  std::string TakeStream();
  bool stream_closed() const { return stream_closed_; }

  // Non-streaming, once done(): the HTTP status and the JSON body.
  std::pair<int, std::string> Response() const;

  // Called after each engine event is queued and after Abort(), on that thread, so that an event
  // loop can wake up and call Wait(0) instead of blocking in Wait(). Set it before Start().
  void SetNotify(std::function<void()> notify) { notify_ = std::move(notify); }

  // The client went away: cancels what still runs in the engine. Idempotent.
  void Cancel();
  // The server is stopping: ends the request with a 503 error. Any thread.
  void Abort(const std::string& message);

  const GenerationRequest& request() const { return request_; }

  // The engine's callback for prompt `prompt`.
  void OnOutput(int32_t prompt, const engine::RequestOutput& output);

 private:
  struct Event {
    int32_t prompt;
    engine::RequestOutput output;
    Clock::time_point at;
  };
  struct Prompt {
    std::vector<int32_t> ids;
    // Echo: the prompt's text, and with logprobs its tokens' entries as the engine reports them
    // (entry 0 has none); put before each of its choices once all have come (Echo()).
    std::string echo_text;
    std::vector<LogprobEntry> echo_logprobs;
    bool echoed = false;
    // With prompt_logprobs: each prompt token's after the first (PromptLogprobsJson).
    std::vector<std::vector<RankedLogprob>> prompt_logprobs;
    int64_t engine_id = -1;
    int64_t cached_tokens = 0;
    int32_t samples_ended = 0;  // Samples whose end the engine reported.
    bool first_token_seen = false;
    bool cancelled = false;
  };
  struct Choice {
    Choice(std::vector<std::string> stops, bool include_stop)
        : stop(std::move(stops), include_stop) {}
    int32_t index = 0;
    std::optional<tokenizer::StreamingDetokenizer> detokenizer;
    // Decoding keeps special tokens, and drops those but kept_markers_ itself (a request with a
    // parser under skip_special_tokens, when the tokenizer marks the parser's markers special).
    bool keep_markers_only = false;
    StopStringMatcher stop;
    std::string text;  // Emitted text (what stop strings let through); with a parser, content.
    int64_t text_chars = 0;  // Characters (code points) in text.
    // Characters of text the echo and the choice's tokens gave so far, whether a partial stop
    // string holds them back or not: where the next token's text starts (its text_offset).
    int64_t given_chars = 0;
    // Chat with a reasoning and/or tool-call parser: it splits the emitted text into reasoning,
    // text and tool calls.
    std::unique_ptr<OutputParser> parser;
    std::string reasoning;
    std::vector<ToolCallOutput> tool_calls;
    size_t complete_calls = 0;  // Calls whose parser saw them close (ToolCallDelta::closed).
    bool unfinished_call = false;  // The output ended inside a call (ParsedDelta::unfinished_call).
    // Streams: how many calls went out (id and name), and how much of each one's arguments.
    size_t sent_calls = 0;
    std::vector<size_t> sent_arguments;
    std::vector<int32_t> token_ids;
    std::vector<LogprobEntry> logprobs;
    int64_t tokens = 0;  // Completion tokens, up to the one that completed a stop string.
    std::string finish_reason;
    OrderedJson stop_reason;  // ChoiceOutput::stop_reason
    bool ended = false;
    Clock::time_point last_token;
    // How much of text / token_ids / logprobs went out in chunks, and whether the end did.
    size_t sent_text = 0, sent_reasoning = 0, sent_ids = 0, sent_logprobs = 0;
    bool sent_end = false;
    bool sent_prompt_ids = false;  // Its first chunk, which carries prompt_token_ids, went out.
  };

  std::vector<int32_t> Tokenize(const PromptSpec& prompt) const;
  // The chat prompt's ids; `text` gets the rendered prompt.
  std::vector<int32_t> RenderChat(std::string* text) const;
  // The grammar constraint of response_format or structured_outputs (compiled or from the cache);
  // ApiError 400 naming the problem for a schema the grammar cannot enforce, a regex or grammar
  // that does not compile.
  std::shared_ptr<const engine::TokenConstraintFactory> ResponseConstraint() const;
  // tool_choice "required" or a named function: the grammar of the forced call's JSON
  // (structured::ToolCallSchema); ApiError 400 naming the problem.
  std::shared_ptr<const engine::TokenConstraintFactory> ForcedToolCallConstraint() const;
  // Whether tool_choice forces a call (chat with tools, "required" or a named function).
  bool ToolCallForced() const;
  // Where this chat's output starts (ReasoningStart); nullopt without a reasoning parser. Unless
  // kContent, a grammar waits for the reasoning's end (AfterReasoning).
  std::optional<ThinkStart> OutputStart(const std::string& chat_prompt) const;
  // `grammar` applied from the token after the reasoning's end token, or, where the model may
  // open the reasoning (`start` kMayOpen), from the first token unless that opens it; ApiError
  // 400 when the tokenizer has no single token for a marker it needs.
  std::shared_ptr<const engine::TokenConstraintFactory> AfterReasoning(
      std::shared_ptr<const engine::TokenConstraintFactory> grammar, ThinkStart start) const;
  // continue_final_message: the final message the output goes on with.
  std::optional<ContinuedMessage> Continued() const;
  // Appends text that stop strings let through to the choice (through its parser, if any).
  void Emit(Choice& choice, std::string_view text);
  // Appends to the choice's text, counting its characters.
  static void AppendText(Choice& choice, std::string_view text);
  void AddParsed(Choice& choice, const ParsedDelta& parsed);
  // Whether this request's output is searched for tool calls.
  bool ToolCallsParsed() const;
  // The chat choice's parser (reasoning, then tool calls), or null.
  std::unique_ptr<OutputParser> MakeParser(const std::string& rendered_prompt) const;
  void Apply(const Event& event);
  // Takes prompt logprobs from the engine (for prompt_logprobs, and echo's); echoes the prompt once
  // they are complete.
  void AddPromptLogprobs(int32_t prompt, const engine::RequestOutput& output);
  // Puts prompt `p`'s text (and logprobs) before each of its choices, once.
  void Echo(int32_t p);
  void EndChoice(Choice& choice, const std::string& reason);
  // Under keep_markers_only: a special token the parsers do not read, which decoding drops.
  bool Skipped(int32_t token) const;
  LogprobEntry MakeLogprob(const engine::RequestOutput& output, int64_t text_offset) const;
  // A logprob entry's token: its text, or "token_id:N" under return_tokens_as_token_ids (or
  // without a tokenizer).
  std::string TokenText(int32_t token) const;
  // Cancels engine requests whose choices have all ended (stop strings) or, with `all`, every one
  // still running.
  void CancelEngineRequests(bool all);
  void Fail(int status, const std::string& message, const std::string& code);
  void CheckDone();
  Usage TotalUsage() const;
  // The prompt choice `c` samples.
  const Prompt& PromptOf(const Choice& c) const;
  // A stream chunk's usage for choice `c` under continuous_usage_stats, with the completion
  // tokens that have gone out with this chunk; nullopt without.
  std::optional<Usage> ChunkUsage(const Choice& c, int64_t completion_tokens) const;

  const ServerContext& context_;
  const GenerationRequest request_;
  const Clock::time_point arrival_;
  ResponseMeta meta_;
  std::vector<Prompt> prompts_;
  std::vector<Choice> choices_;
  // The special tokens that this request's parsers read, decoded under skip_special_tokens too
  // (the tool-call markers with tools, the reasoning markers with a reasoning parser); sorted.
  std::vector<int32_t> kept_markers_;
  bool done_ = false;
  bool cancelled_ = false;
  bool stream_opened_ = false, stream_closed_ = false;
  std::optional<ApiError> error_;
  std::function<void()> notify_;

  std::mutex mutex_;  // Guards the fields below.
  std::condition_variable wake_;
  std::deque<Event> events_;
  std::optional<std::string> abort_message_;
};

}  // namespace latent::server
