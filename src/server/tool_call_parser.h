// Tool calls out (`latent serve --tool-call-parser`): a ToolCallParser turns one model family's
// tool-call markup in the decoded output into OpenAI tool calls (id, function name, arguments as
// JSON text), incrementally, so a stream can send each call's id and name as soon as the name is
// complete and its arguments piece by piece. Text outside the markup is content.
//
// The families (names as vLLM's --tool-call-parser):
// - deepseek_v3 (V3, R1): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n
//   ```json\nARGS\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// - deepseek_v31 (V3.1): <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS
//   <｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
// - deepseek_v32 (V3.2's DSML): <｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n
//   <｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>\n...</｜DSML｜invoke>\n
//   </｜DSML｜function_calls> (string="false" values are JSON)
// - kimi_k2: <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX
//   <|tool_call_argument_begin|>ARGS<|tool_call_end|>...<|tool_calls_section_end|>; the call's
//   id is the model's own functions.NAME:IDX (Kimi's template writes it back)
// - glm45 (GLM-4.5, and GLM-4.7/5, whose name is not followed by a newline): <tool_call>NAME\n
//   <arg_key>K</arg_key>\n<arg_value>V</arg_value>...</tool_call>; a value is a string when the
//   tool's JSON schema says so, else JSON if it parses as JSON
// Key/value arguments (DSML, GLM) become a JSON object written as Python's json.dumps does
// ({"k": "v", "n": 1}), sent whole when the call closes: a repeated key keeps its first place and
// its last value (vLLM builds a dict), which a stream that had sent the first value could not
// take back; JSON arguments (the others) stream as the model writes them, less surrounding
// whitespace (and V3's code fence).
//
// Whitespace between the content and the markup, between calls and after them is dropped.
// Markup that does not parse falls back to content: from where it stops parsing, the rest of the
// output is content, byte for byte (a call whose name was already out stays as it stands; when
// nothing of the section parsed, the whitespace before it is content again too). An output that
// ends inside the markup keeps an open call with the arguments so far; the unparsed rest (a call's
// opening cut before its name, half an argument) is dropped, not content, as vLLM drops it, and
// Finish says a call was under way (ParsedDelta::unfinished_call). Neither such call is complete
// (ToolCallDelta::closed): only a call whose end marker came is.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/output_parser.h"

namespace latent::server {

// The JSON schema "type" of each tool's parameters, for formats that write every value as text.
class ToolSchemas {
 public:
  ToolSchemas() = default;
  // `tools`: the request's OpenAI tools list (or null).
  explicit ToolSchemas(const nlohmann::ordered_json& tools);
  // Whether `tool`'s parameter `param` is declared {"type": "string"}.
  bool IsString(const std::string& tool, const std::string& param) const;

 private:
  std::map<std::string, std::map<std::string, std::string>> types_;
};

class ToolCallParser : public OutputParser {
 public:
  ParsedDelta Push(std::string_view text) final;
  ParsedDelta Finish() final;

 protected:
  // `section_begins`: the markers that open the markup (the first found wins). `key_value`: the
  // family adds arguments one by one (AddArgument), else it streams JSON text
  // (StreamArgumentsUntil).
  ToolCallParser(std::vector<std::string> section_begins, bool key_value);

  enum class Step { kProgress, kWait, kMalformed, kSectionEnd };
  // A section's begin marker was consumed: reset the family's state.
  virtual void BeginSection() = 0;
  // Parses what it can of buf_ inside a section: kProgress (call again), kWait (needs more
  // text), kMalformed (the rest becomes content), kSectionEnd (back to content).
  virtual Step Section() = 0;

  // For the families.
  enum class Match { kYes, kWait, kNo };
  void SkipSpace();
  // Consumes `marker` at the front of buf_ (kYes); kWait while buf_ is a proper prefix of it.
  Match Expect(std::string_view marker);
  // The index of the marker that starts buf_ (consumed); -1: buf_ is a prefix of one (wait);
  // -2: none.
  int ExpectOneOf(std::initializer_list<std::string_view> markers);
  // The text before `marker`, both consumed, once the marker has come.
  std::optional<std::string> ReadUntil(std::string_view marker);
  bool WaitedTooLong(size_t limit) const { return buf_.size() > limit; }
  // JSON arguments: appends buf_ up to `end` to the open call's arguments (leading whitespace
  // and any trailing characters of `trailing_trim` dropped), holding back what may still be part
  // of the end; true once `end` has been consumed.
  bool StreamArgumentsUntil(std::string_view end, std::string_view trailing_trim);
  // Opens a call (an empty id gets a fresh "call_..." one).
  void StartCall(std::string id, std::string name);
  // Key/value arguments: one more, its value as JSON text (held until the call closes).
  void AddArgument(const std::string& key, const std::string& json_value);
  // Closes the open call ("{}" when it got no arguments): its end marker came, so it is complete
  // (ToolCallDelta::closed).
  void EndCall() { CloseCall(/*complete=*/true); }
  const std::string& current_call_name() const { return call_name_; }
  // A function name as the markup may carry it: not empty, no whitespace or angle brackets.
  static bool ValidName(std::string_view name);

  std::string buf_;  // Received, not yet consumed.

 private:
  void Consume(size_t n);
  // A call event: what was consumed is markup that parsed.
  void Commit() {
    pending_raw_.clear();
    section_space_.clear();
  }
  void EmitContent(std::string_view text);
  void AddArgumentText(const std::string& text);
  // Closes the open call; `complete`: its end marker came (else the output or the markup stopped
  // inside it, and the call stays as it stands, not complete).
  void CloseCall(bool complete);
  void Run();

  const std::vector<std::string> section_begins_;
  const bool key_value_;
  bool in_section_ = false;
  bool passthrough_ = false;  // After malformed markup: everything is content.
  std::string pending_raw_;   // Consumed in a section since the last call event.
  std::string held_space_;    // Content whitespace that may precede markup.
  // The whitespace before the open section, while nothing in it parsed: content again if the
  // section does not parse.
  std::string section_space_;
  int32_t calls_ = 0;
  bool call_open_ = false;
  bool arguments_started_ = false;  // Some argument text went out for the open call.
  bool leading_space_done_ = false;  // StreamArgumentsUntil skipped the leading whitespace.
  std::string call_name_;
  // Key/value families: the open call's arguments so far (key, value as JSON text), in order.
  std::vector<std::pair<std::string, std::string>> key_values_;
  ParsedDelta* out_ = nullptr;
};

// A fresh OpenAI-style call id: "call_" and 24 random letters and digits.
std::string NewToolCallId();

// JSON text as Python's json.dumps(value, ensure_ascii=False) writes it (", " and ": ").
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

// The names --tool-call-parser accepts besides "auto" and "none", for --help and errors.
const char* ToolCallParserNames();

// Resolves --tool-call-parser: "none", a name (or alias), or "auto": from the chat template's
// markup (`template_mentions`), else `model_format`, the parser the model's family declares for
// its model_type (model::ToolCallFormatFor; "" for none). Returns the canonical name, or "" for
// none; throws latent::Error naming an unknown parser.
std::string ResolveToolCallParser(const std::string& flag, std::string_view model_format,
                                  const std::function<bool(std::string_view)>& template_mentions);

// The markers of a parser's markup (`name` resolved), so that a tokenizer that marks them special
// (Kimi K2's, GLM-4.5's) still lets them through to the parser: skip_special_tokens must not drop
// them, as it drops the other special tokens.
std::vector<std::string> ToolCallMarkers(const std::string& name);

// A fresh parser for one choice, given the resolved name ("" gives null) and the request's tools.
std::unique_ptr<OutputParser> MakeToolCallParser(const std::string& name,
                                                 const nlohmann::ordered_json& tools);

}  // namespace latent::server
