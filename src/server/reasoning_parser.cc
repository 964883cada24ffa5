#include "server/reasoning_parser.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

#include "base/error.h"

namespace latent::server {
namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";
// Kimi K2 may start its tool calls without closing the reasoning: the tool-call section's start
// (both spellings the kimi_k2 tool parser reads) ends it too, and stays for the tool parser, as
// vLLM's kimi_k2 reasoning parser does.
constexpr std::array<std::string_view, 2> kKimiToolSection = {"<|tool_calls_section_begin|>",
                                                              "<|tool_call_section_begin|>"};

// The names that use ThinkParser with the start decided by the prompt.
constexpr std::array<std::string_view, 3> kPromptStartNames = {"think", "deepseek_v3", "glm45"};

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// The length of the longest suffix of `text` that is a proper prefix of `marker`: the part that
// the next delta might complete into the marker.
size_t PartialMarkerSuffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace

ThinkParser::ThinkParser(ThinkStart start, std::vector<std::string_view> content_starts)
    : state_(start == ThinkStart::kContent ? State::kContent : State::kStart),
      starts_in_reasoning_(start == ThinkStart::kReasoning),
      content_starts_(std::move(content_starts)) {}

ParsedDelta ThinkParser::Push(std::string_view text) {
  held_.append(text);
  ParsedDelta out;
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const size_t first = held_.find_first_not_of(" \n\r\t");
        if (first == std::string::npos) return out;  // Whitespace only, so far.
        const std::string_view rest = std::string_view(held_).substr(first);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, first + kOpen.size());
          state_ = State::kReasoning;
          continue;
        }
        if (kOpen.substr(0, rest.size()) == rest) return out;  // Maybe "<think>" still.
        state_ = starts_in_reasoning_ ? State::kReasoning : State::kContent;
        continue;
      }
      case State::kReasoning: {
        // The first of </think> (dropped) and a content start (kept) ends the reasoning.
        size_t end = held_.find(kClose), end_size = kClose.size();
        size_t keep = PartialMarkerSuffix(held_, kClose);
        for (std::string_view marker : content_starts_) {
          const size_t at = held_.find(marker);
          if (at < end) end = at, end_size = 0;
          keep = std::max(keep, PartialMarkerSuffix(held_, marker));
        }
        if (end != std::string::npos) {
          out.reasoning.append(held_, 0, end);
          held_.erase(0, end + end_size);
          state_ = State::kContent;
          continue;
        }
        out.reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      case State::kContent:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ParsedDelta ThinkParser::Finish() {
  ParsedDelta out;
  const bool reasoning =
      state_ == State::kReasoning || (state_ == State::kStart && starts_in_reasoning_);
  (reasoning ? out.reasoning : out.content) += held_;
  held_.clear();
  return out;
}

const char* ReasoningParserNames() { return "deepseek_r1, kimi_k2, think, deepseek_v3, glm45"; }

std::string ResolveReasoningParser(const std::string& flag, bool template_mentions_think) {
  if (flag == "none") return "";
  if (flag == "auto") return template_mentions_think ? "think" : "";
  if (flag == "deepseek_r1" || flag == "kimi_k2") return flag;
  for (std::string_view name : kPromptStartNames) {
    if (flag == name) return flag;
  }
  Fail("--reasoning-parser: unknown parser '", flag, "' (known: auto, none, ",
       ReasoningParserNames(), ")");
}

namespace {

std::string_view TrimEnd(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

std::string_view TrimBothEnds(std::string_view s) {
  s = TrimEnd(s);
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}

bool EndsWith(std::string_view s, std::string_view end) {
  return s.size() >= end.size() && s.substr(s.size() - end.size()) == end;
}

// Where the output of a continued message starts, or nullopt for a fresh reply's rule.
std::optional<ThinkStart> ContinuedStart(std::string_view prompt, const ContinuedMessage& m) {
  if (m.role != "assistant") return ThinkStart::kContent;
  // Trimmed at both ends, as the prompt holds it (templates strip a message's text).
  const std::string_view text = TrimBothEnds(m.text);
  if (text.empty()) return std::nullopt;
  const size_t open = text.rfind(kOpen), close = text.rfind(kClose);
  if (open != std::string_view::npos && (close == std::string_view::npos || open > close)) {
    return ThinkStart::kReasoning;
  }
  if (close != std::string_view::npos) return ThinkStart::kContent;
  prompt = TrimEnd(prompt);
  if (!EndsWith(prompt, text)) return ThinkStart::kContent;  // the template rewrote the text
  const std::string_view before = TrimEnd(prompt.substr(0, prompt.size() - text.size()));
  return EndsWith(before, kOpen) ? ThinkStart::kReasoning : ThinkStart::kContent;
}

// Python's bool() of a JSON value, as vLLM reads a chat_template_kwargs switch.
bool PythonTruth(const nlohmann::ordered_json& v) {
  if (v.is_null()) return false;
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>() != 0;
  if (v.is_number_unsigned()) return v.get<uint64_t>() != 0;
  if (v.is_number_float()) return v.get<double>() != 0.0;
  if (v.is_string()) return !v.get_ref<const std::string&>().empty();
  return !v.empty();  // lists and dicts: non-empty
}

// vLLM's kimi_k2 parser: `bool(chat_template_kwargs.get("thinking", True))`.
bool KimiThinkingOff(const nlohmann::ordered_json* template_kwargs) {
  if (template_kwargs == nullptr || !template_kwargs->is_object()) return false;
  const auto it = template_kwargs->find("thinking");
  return it != template_kwargs->end() && !PythonTruth(*it);
}

}  // namespace

std::optional<ThinkStart> ReasoningStart(const std::string& name, std::string_view rendered_prompt,
                                         const ContinuedMessage* continued,
                                         const nlohmann::ordered_json* template_kwargs) {
  if (name.empty()) return std::nullopt;
  // Thinking off, vLLM's kimi_k2 becomes its identity parser: nothing is reasoning, whatever the
  // prompt or a continued message holds, and is_reasoning_end holds from the start (the grammar
  // applies at once).
  if (name == "kimi_k2" && KimiThinkingOff(template_kwargs)) return ThinkStart::kContent;
  if (continued != nullptr) {
    if (const std::optional<ThinkStart> start = ContinuedStart(rendered_prompt, *continued)) {
      return start;
    }
  }
  rendered_prompt = TrimEnd(rendered_prompt);
  // A prompt that closed the reasoning (Qwen3 with enable_thinking=false) leaves none to the
  // output, whatever the parser: vLLM too ends the reasoning on the prompt's ids
  // (is_reasoning_end), and a grammar waiting for a </think> that never comes would never apply.
  if (EndsWith(rendered_prompt, kClose)) return ThinkStart::kContent;
  // vLLM's deepseek_r1 and kimi_k2 parsers start inside the reasoning whatever the prompt: Kimi
  // K2's templates end the prompt with the assistant tag, and an output that closes reasoning it
  // never opened ("r</think>c") is reasoning then content, not text holding a </think>.
  if (name == "deepseek_r1" || name == "kimi_k2" || EndsWith(rendered_prompt, kOpen)) {
    return ThinkStart::kReasoning;
  }
  return ThinkStart::kMayOpen;
}

std::unique_ptr<OutputParser> MakeReasoningParser(const std::string& name,
                                                  std::string_view rendered_prompt,
                                                  const ContinuedMessage* continued,
                                                  const nlohmann::ordered_json* template_kwargs) {
  const std::optional<ThinkStart> start =
      ReasoningStart(name, rendered_prompt, continued, template_kwargs);
  if (!start) return nullptr;
  std::vector<std::string_view> content_starts;
  if (name == "kimi_k2") content_starts.assign(kKimiToolSection.begin(), kKimiToolSection.end());
  return std::make_unique<ThinkParser>(*start, std::move(content_starts));
}

std::string_view ReasoningEndMarker() { return kClose; }

std::string_view ReasoningStartMarker() { return kOpen; }

}  // namespace latent::server
