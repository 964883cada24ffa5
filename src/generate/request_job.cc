#include "generate/request_job.h"

#include <algorithm>
#include <span>

#include "server/openai_schema.h"

namespace latent::generate {
namespace {

// {"token", "logprob"}: the logprob a number always, as the server sends it (-inf as -9999).
nlohmann::ordered_json TokenLogprobJson(int64_t token, float logprob) {
  return {{"token", token}, {"logprob", server::LogprobValue(logprob)}};
}

// The text of a streamed sample at its end: what the matcher released, then the rest. A stop
// string that the last characters complete ends the sample as it would have earlier (the
// server's rule); none does in the text of the first `min_tokens` tokens. `stop_token_text`:
// the rest may hold the text of the stop token that ended the sample (kept under
// include_stop_str_in_output), which vLLM does not search for stop strings.
void FinishText(RequestJob::Sample& sample, int64_t min_tokens, bool stop_token_text) {
  if (!sample.detokenizer || !sample.stop_reason.empty()) return;
  const std::string rest = sample.detokenizer->Finish();
  if (!sample.matcher) {
    sample.text += rest;
    return;
  }
  const auto tokens = static_cast<int64_t>(sample.ids.size());
  sample.text += stop_token_text ? sample.matcher->PushUnmatched(rest)
                                 : sample.matcher->PushTokenText(rest, tokens, min_tokens);
  if (!sample.matcher->stopped()) {
    sample.text += sample.matcher->Finish();
    return;
  }
  using engine::FinishReason;
  if (sample.finish == FinishReason::kLength || sample.finish == FinishReason::kStop) {
    // Text held back from tokens before the last completed the string: it would have ended the
    // sample at that token, before any stop token, had it been released then.
    sample.stop_reason = sample.matcher->matched();
    sample.stop_token = -1;
    sample.finish = FinishReason::kStop;
  }
}

}  // namespace

RequestJob::RequestJob(RequestLine line, TextTools& text, bool stream_text)
    : line_(std::move(line)), text_(text), samples_(line_.request.sampling.n) {
  const bool with_text = stream_text || !line_.stop.empty();
  for (Sample& sample : samples_) {
    if (with_text) {
      sample.detokenizer = std::make_unique<tokenizer::StreamingDetokenizer>(
          text_.Tokenizer(), line_.skip_special_tokens);
      // As vLLM: the output's text is what it adds after the prompt's (a SentencePiece token's
      // leading space, a character the prompt's last bytes began).
      sample.detokenizer->Prime(line_.request.prompt);
    }
    if (!line_.stop.empty()) {
      sample.matcher = std::make_unique<server::StopStringMatcher>(line_.stop, line_.include_stop);
    }
  }
}

bool RequestJob::OnOutput(const engine::RequestOutput& out) {
  Sample& sample = samples_.at(out.sample);
  prompt_logprobs_.insert(prompt_logprobs_.end(), out.prompt_logprobs.begin(),
                          out.prompt_logprobs.end());
  // vLLM's detokenizer (update(new_token_ids, stop_terminated)): the EOS or stop id that ended
  // the sample is in the ids, but its text is neither output nor searched for stop strings
  // unless include_stop_str_in_output, where it is output, still unsearched; so its id is the
  // stop_reason even where its text would complete a stop string.
  const bool stop_terminated =
      out.has_token && out.finish == engine::FinishReason::kStop && out.stop_terminated;
  if (out.has_token && sample.stop_reason.empty()) {
    sample.ids.push_back(out.token);
    sample.last_text_dropped = stop_terminated && !line_.include_stop;
    if (line_.request.sampling.top_logprobs >= 0) sample.logprobs.push_back(out);
    if (sample.detokenizer && !sample.last_text_dropped) {
      const std::string piece = sample.detokenizer->Push(out.token);
      if (!sample.matcher) {
        sample.text += piece;
      } else if (stop_terminated) {
        sample.text += sample.matcher->PushUnmatched(piece);
      } else {
        sample.text += sample.matcher->PushTokenText(
            piece, static_cast<int64_t>(sample.ids.size()), line_.request.min_tokens);
      }
      if (sample.matcher && sample.matcher->stopped()) {
        sample.stop_reason = sample.matcher->matched();
        sample.finish = engine::FinishReason::kStop;
        ++stopped_by_text_;
      }
    }
  }
  if (out.finish == engine::FinishReason::kNone) return false;
  sample.ended = true;
  if (sample.stop_reason.empty()) {
    sample.finish = out.finish;
    sample.stop_token = out.stop_token;
    sample.error = out.error;
    FinishText(sample, line_.request.min_tokens, stop_terminated && line_.include_stop);
  }
  return ++done_ == static_cast<int32_t>(samples_.size());
}

bool RequestJob::TakeCancelNeeded() {
  const bool all_ended = std::all_of(samples_.begin(), samples_.end(), [](const Sample& s) {
    return s.finish != engine::FinishReason::kNone;
  });
  if (cancel_sent_ || stopped_by_text_ == 0 || !all_ended || done()) return false;
  cancel_sent_ = true;
  return true;
}

void RequestJob::Abandon(const std::string& error) {
  for (size_t i = 0; i < samples_.size(); ++i) {
    if (samples_[i].ended) continue;
    engine::RequestOutput out;
    out.sample = static_cast<int32_t>(i);
    out.finish = engine::FinishReason::kError;
    out.error = error;
    OnOutput(out);
  }
}

nlohmann::ordered_json RequestJob::PromptLogprobsJson() const {
  nlohmann::ordered_json out = nlohmann::ordered_json::array({nullptr});
  for (const engine::PromptTokenLogprob& p : prompt_logprobs_) {
    nlohmann::ordered_json top = nlohmann::ordered_json::array();
    for (const auto& alt : p.top) top.push_back(TokenLogprobJson(alt.token, alt.logprob));
    nlohmann::ordered_json entry = TokenLogprobJson(p.token, p.logprob);
    entry["top_logprobs"] = top;
    out.push_back(entry);
  }
  return out;
}

nlohmann::ordered_json RequestJob::StopReason(const Sample& sample) {
  if (!sample.stop_reason.empty()) return sample.stop_reason;
  if (sample.stop_token >= 0) return sample.stop_token;
  return nullptr;
}

std::string RequestJob::Text(const Sample& sample) const {
  if (sample.matcher) return sample.text;
  std::span<const int32_t> ids = sample.ids;
  if (sample.last_text_dropped) ids = ids.first(ids.size() - 1);
  // The streamed text's rule, so that streaming or not gives the same text.
  return tokenizer::DecodeAfter(text_.Tokenizer(), line_.request.prompt, ids,
                                line_.skip_special_tokens);
}

nlohmann::ordered_json RequestJob::SampleJson(const Sample& s) const {
  nlohmann::ordered_json j = {{"ids", s.ids}};
  if (text_.has_tokenizer()) j["text"] = Text(s);
  j["finish_reason"] = engine::FinishReasonName(s.finish);
  if (nlohmann::ordered_json stop = StopReason(s); !stop.is_null()) j["stop_reason"] = stop;
  if (line_.request.sampling.top_logprobs >= 0) {
    nlohmann::ordered_json logprobs = nlohmann::ordered_json::array();
    for (const engine::RequestOutput& out : s.logprobs) {
      nlohmann::ordered_json top = nlohmann::ordered_json::array();
      for (const auto& alt : out.top_logprobs)
        top.push_back(TokenLogprobJson(alt.token, alt.logprob));
      nlohmann::ordered_json entry = TokenLogprobJson(out.token, out.logprob);
      entry["top_logprobs"] = top;
      logprobs.push_back(entry);
    }
    j["logprobs"] = logprobs;
  }
  if (!s.error.empty()) j["error"] = s.error;
  return j;
}

}  // namespace latent::generate
