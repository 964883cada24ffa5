// The seam between decoded text and the fields of a chat choice: an OutputParser consumes the
// model's decoded text in deltas, as it streams, and yields the parts that are certain, split by
// field. A marker may arrive split across tokens (and so across deltas): a parser holds back any
// tail that could still become one, so half a marker never leaks into a field; Finish() releases
// what is held once the output has ended.
//
// Parsers chain: the reasoning parser splits thinking from the answer; a tool-call parser (later)
// would consume the reasoning parser's `content` and yield content plus tool calls, adding its
// field to ParsedDelta.
#pragma once

#include <string>
#include <string_view>

namespace latent::server {

struct ParsedDelta {
  std::string reasoning;  // -> message.reasoning_content / delta.reasoning_content
  std::string content;    // -> message.content / delta.content

  bool empty() const { return reasoning.empty() && content.empty(); }
  void Append(const ParsedDelta& more) {
    reasoning += more.reasoning;
    content += more.content;
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

}  // namespace latent::server
