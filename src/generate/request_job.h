// One submitted request's outputs, gathered from the engine's events: each sample's token ids,
// logprobs, finish reason and (with stop strings or when streaming) its text so far. Not
// thread-safe: the owner serializes OnOutput and the readers (the CLI runs both on one thread,
// the Python module holds a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/request.h"
#include "generate/request_line.h"
#include "server/stop_strings.h"
#include "tokenizer/streaming_detokenizer.h"

namespace latent::generate {

class RequestJob {
 public:
  struct Sample {
    std::vector<int32_t> ids;
    std::vector<engine::RequestOutput> logprobs;  // With logprobs: each token's event.
    engine::FinishReason finish = engine::FinishReason::kNone;
    std::string error;
    // With stop strings or streaming: the text so far, matched as it streams.
    std::unique_ptr<tokenizer::StreamingDetokenizer> detokenizer;
    std::unique_ptr<server::StopStringMatcher> matcher;
    std::string text;
    std::string stop_reason;  // The stop string that ended this sample, if one did.
    // Else the stop_token_ids entry that did (RequestOutput::stop_token), or -1.
    int32_t stop_token = -1;
    // The last id is the EOS or stop id that ended the sample, whose text vLLM leaves out
    // (include_stop_str_in_output unset): ids has it, text does not.
    bool last_text_dropped = false;
    bool ended = false;       // The engine has reported this sample's end.
  };

  // Makes the samples of `line` (n of them). With `stream_text` (needs a tokenizer) every sample
  // keeps its text as the tokens arrive, not only those with stop strings.
  RequestJob(RequestLine line, TextTools& text, bool stream_text);

  // The grammar the line's structured_outputs compiled to, set before the request is submitted
  // (the submitter compiles it: it holds the model's vocabulary).
  void SetConstraint(std::shared_ptr<const engine::TokenConstraintFactory> constraint) {
    line_.request.constraint = std::move(constraint);
  }

  // Applies one engine event. Returns true when it finished the whole request.
  bool OnOutput(const engine::RequestOutput& out);
  // True once, when every sample has ended on a stop string while the engine still runs them:
  // the owner should cancel the request (the samples ignore the kCancelled that follows).
  bool TakeCancelNeeded();
  // Ends the samples the engine never ended with kError and `error`: the engine stopped with
  // them still running and will report nothing more. Samples a stop string ended keep that end.
  void Abandon(const std::string& error);

  bool done() const { return done_ == static_cast<int32_t>(samples_.size()); }
  const RequestLine& line() const { return line_; }
  const engine::Request& request() const { return line_.request; }
  const std::vector<Sample>& samples() const { return samples_; }
  // With "prompt_logprobs": the logprobs of prompt tokens 1, 2, ... (token 0 has none), as they
  // arrive from sample 0.
  const std::vector<engine::PromptTokenLogprob>& prompt_logprobs() const {
    return prompt_logprobs_;
  }
  // The same as `latent generate` writes them (vLLM's form): null for the first prompt token,
  // then {token, logprob, top_logprobs} per prompt token.
  nlohmann::ordered_json PromptLogprobsJson() const;
  // A sample's text: the streamed text with stop strings, else its ids decoded after the prompt
  // as they stream (tokenizer::DecodeAfter; special tokens skipped unless the line's
  // "skip_special_tokens" is false). Needs a tokenizer.
  std::string Text(const Sample& sample) const;
  // `latent generate`'s output for one sample: ids, text (with a tokenizer), finish_reason,
  // stop_reason, logprobs, error.
  nlohmann::ordered_json SampleJson(const Sample& sample) const;
  // vLLM's stop_reason: the stop string, else the stop token id, else null.
  static nlohmann::ordered_json StopReason(const Sample& sample);

 private:
  RequestLine line_;
  TextTools& text_;
  std::vector<Sample> samples_;
  std::vector<engine::PromptTokenLogprob> prompt_logprobs_;
  int32_t done_ = 0;             // Samples the engine has finished.
  int32_t stopped_by_text_ = 0;  // Samples a stop string ended (the engine runs them on).
  bool cancel_sent_ = false;
};

}  // namespace latent::generate
