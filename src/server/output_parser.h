// The seam between decoded text and the fields of a chat choice: an OutputParser consumes the
// model's decoded text in deltas, as it streams, and yields the parts that are certain, split by
// field. A marker may arrive split across tokens (and so across deltas): a parser holds back any
// tail that could still become one, so half a marker never leaks into a field; Finish() releases
// what is held once the output has ended.
//
// Parsers chain (ParserChain): the reasoning parser splits thinking from the answer; a tool-call
// parser (tool_call_parser.h) consumes the reasoning parser's `content` and yields content plus
// tool calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace latent::server {

// The new part of one tool call: a call's first delta carries its id and name (and maybe the
// start of its arguments); later ones carry only more of the arguments' JSON text, so the
// arguments are the concatenation of every delta's `arguments` for that index. The delta that
// completes a call says so (`closed`): its end marker came, or (forced calls) its JSON closed. A
// call cut short (by max_tokens, a stop string, or markup that stops parsing) never closes, and
// a choice with such a call does not finish "tool_calls" (CompletionSession::EndChoice).
struct ToolCallDelta {
  int32_t index = 0;      // The call's position in the choice's tool_calls.
  std::string id;         // Only in the call's first delta.
  std::string name;       // Only in the call's first delta.
  std::string arguments;  // More of the arguments' JSON text.
  bool closed = false;    // The call is complete with this delta.
};

struct ParsedDelta {
  std::string reasoning;  // -> message.reasoning_content / delta.reasoning_content
  std::string content;    // -> message.content / delta.content
  std::vector<ToolCallDelta> tool_calls;  // -> message.tool_calls / delta.tool_calls
  // The output ended inside a call that never went out, or that is not whole (a tool-call
  // parser's Finish: markup cut before the call's name, a forced array cut after a ","): a call
  // was under way, so the choice does not finish "tool_calls" even if every call out is complete.
  bool unfinished_call = false;

  bool empty() const {
    return reasoning.empty() && content.empty() && tool_calls.empty() && !unfinished_call;
  }
  void Append(const ParsedDelta& more) {
    reasoning += more.reasoning;
    content += more.content;
    unfinished_call = unfinished_call || more.unfinished_call;
    for (const ToolCallDelta& call : more.tool_calls) AppendToolCall(call);
  }
  // Merges more arguments of the last call into its delta; a new call gets its own.
  void AppendToolCall(const ToolCallDelta& call) {
    if (!tool_calls.empty() && tool_calls.back().index == call.index && call.id.empty()) {
      tool_calls.back().arguments += call.arguments;
      tool_calls.back().closed = tool_calls.back().closed || call.closed;
    } else {
      tool_calls.push_back(call);
    }
  }
};

class OutputParser {
 public:
  virtual ~OutputParser() = default;
  // The next piece of decoded text; returns what became certain.
  virtual ParsedDelta Push(std::string_view text) = 0;
  // The output ended: returns whatever was held back.
  virtual ParsedDelta Finish() = 0;
};

// `first`'s content goes through `second`; `first`'s other fields pass through. Either may be
// null (then the other runs alone).
class ParserChain : public OutputParser {
 public:
  ParserChain(std::unique_ptr<OutputParser> first, std::unique_ptr<OutputParser> second)
      : first_(std::move(first)), second_(std::move(second)) {}

  ParsedDelta Push(std::string_view text) override {
    ParsedDelta out = first_ ? first_->Push(text) : Passthrough(text);
    return Through(std::move(out), false);
  }
  ParsedDelta Finish() override {
    ParsedDelta out = first_ ? first_->Finish() : ParsedDelta{};
    return Through(std::move(out), true);
  }

 private:
  static ParsedDelta Passthrough(std::string_view text) {
    ParsedDelta d;
    d.content = text;
    return d;
  }
  ParsedDelta Through(ParsedDelta out, bool finish) {
    if (!second_) return out;
    ParsedDelta rest = second_->Push(out.content);
    if (finish) rest.Append(second_->Finish());
    out.content = std::move(rest.content);
    out.reasoning += rest.reasoning;
    out.unfinished_call = out.unfinished_call || rest.unfinished_call;
    for (const ToolCallDelta& call : rest.tool_calls) out.AppendToolCall(call);
    return out;
  }

  std::unique_ptr<OutputParser> first_;
  std::unique_ptr<OutputParser> second_;
};

}  // namespace latent::server
