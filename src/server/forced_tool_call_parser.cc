#include "server/forced_tool_call_parser.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/json_depth.h"
#include "server/tool_call_parser.h"

namespace latent::server {
namespace {

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Follows one JSON value through its text, a character at a time, to tell where it ends, and
// writes it as Python's json.dumps does (", " and ": ", no other whitespace outside strings):
// the forced call's grammar makes the model write compact JSON, and the markup parsers' arguments
// are in json.dumps's spacing. Only a counter tracks the nesting, so any depth is safe.
class JsonValueText {
 public:
  // Takes the next character, appending what it becomes to `out`; false when `c` lies past the
  // value (the delimiter after a number or literal, or any character once the value is whole):
  // not taken.
  bool Take(char c, std::string& out) {
    if (complete_) return false;
    if (in_string_) {
      out += c;
      if (string_.Closes(c)) {
        in_string_ = false;
        complete_ = depth_ == 0;
      }
      return true;
    }
    if (IsJsonSpace(c) || c == ',' || c == '}' || c == ']') {
      if (depth_ == 0) {
        // A number or literal ends where its delimiter starts.
        complete_ = scalar_;
        return !scalar_ && IsJsonSpace(c);  // Whitespace before the value is dropped.
      }
      if (c == ',') out += ", ";
      if (c == '}' || c == ']') {
        out += c;
        complete_ = --depth_ == 0;
      }
      return true;
    }
    if (c == '"') {
      in_string_ = true;
      string_ = JsonStringScan();
    } else if (c == '{' || c == '[') {
      ++depth_;
    } else if (depth_ == 0) {
      scalar_ = true;
    }
    out += c;
    if (c == ':' && depth_ > 0) out += ' ';
    return true;
  }
  // Whether the value is whole (a number or literal: once it has ended, or at the output's end).
  bool complete(bool at_end) const { return complete_ || (at_end && scalar_); }

 private:
  int64_t depth_ = 0;
  JsonStringScan string_;
  bool in_string_ = false, scalar_ = false, complete_ = false;
};

// tool_choice {"type": "function", "function": {"name": NAME}}: the output is NAME's arguments.
class NamedCallParser : public OutputParser {
 public:
  explicit NamedCallParser(std::string name) : name_(std::move(name)) {}

  ParsedDelta Push(std::string_view text) override {
    std::string arguments;
    for (char c : text) {
      if (value_.Take(c, arguments) || IsJsonSpace(c)) continue;
      // Text after the whole value (no grammar allows it): arguments still, but not JSON.
      arguments += c;
      spoiled_ = true;
    }
    ParsedDelta out;
    if (arguments.empty()) return out;
    ToolCallDelta call;
    if (!started_) {
      call.id = NewToolCallId();
      call.name = name_;
      started_ = true;
    }
    call.arguments = std::move(arguments);
    out.tool_calls.push_back(std::move(call));
    return out;
  }
  // No text, no call: the model made none (an output that ended inside its reasoning, so the
  // grammar never started), and a made-up one would finish "tool_calls" as if it had. A call
  // whose arguments were cut (max_tokens, a stop string) is not complete.
  ParsedDelta Finish() override {
    ParsedDelta out;
    if (started_ && !spoiled_ && value_.complete(/*at_end=*/true)) {
      out.tool_calls.push_back({0, "", "", "", /*closed=*/true});
    }
    return out;
  }

 private:
  const std::string name_;
  JsonValueText value_;
  bool started_ = false;
  bool spoiled_ = false;
};

// tool_choice "required": an array of {"name", "parameters"}, read as it comes. A call goes out
// (id and name) once its name is whole and its parameters have begun; the parameters stream as
// its arguments, and the call is complete at its object's "}". Text that does not fit (no grammar
// allows it) ends the parsing: from there on the output is content (all of it while no call went
// out), as malformed markup is; an open call stays as it stands, not complete.
class RequiredCallsParser : public OutputParser {
 public:
  ParsedDelta Push(std::string_view text) override {
    ParsedDelta out;
    out_ = &out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (state_ == State::kMalformed) {
        out.content += text.substr(i);
        break;
      }
      raw_ += text[i];
      // A value that ended before this character leaves it to the next state.
      while (!Step(text[i]) && state_ != State::kMalformed) {
      }
      // All the text while no call went out, else from where it stopped fitting.
      if (state_ == State::kMalformed) {
        out.content += calls_ == 0 ? raw_ : raw_.substr(std::min(malformed_at_, raw_.size() - 1));
      }
    }
    out_ = nullptr;
    return out;
  }
  // Cut short (max_tokens, a stop string) inside an element, or after a "," that begins another:
  // a call was under way, maybe one not out yet (its name cut), so the choice must not finish
  // "tool_calls". Its text stays neither content nor a call.
  ParsedDelta Finish() override {
    ParsedDelta out;
    out.unfinished_call = state_ != State::kArray && state_ != State::kAfterElement &&
                          state_ != State::kDone && state_ != State::kMalformed;
    return out;
  }

 private:
  enum class State {
    kArray,           // Before the '['.
    kElementOrEnd,    // After '[' or ',': a '{' (or ']' for an empty array).
    kAfterElement,    // ',' or ']'.
    kKeyOrEnd,        // In an object: a key's '"' or '}'.
    kKey,             // In a key's string.
    kColon,
    kValue,           // In a member's value.
    kAfterValue,      // ',' or '}'.
    kKeyStart,        // After ',' in an object: a key's '"'.
    kDone,            // After ']': only whitespace.
    kMalformed,
  };
  enum class Member { kName, kParameters, kOther };

  // Consumes `c` (true) or leaves it for the next state (false: a value ended before it).
  bool Step(char c) {
    if (state_ == State::kValue) {
      std::string text;
      const bool taken = value_.Take(c, text);
      AddValueText(text);
      if (state_ == State::kMalformed) return true;
      if (value_.complete(/*at_end=*/false)) EndValue();
      if (!taken && !value_.complete(false)) state_ = State::kMalformed;
      return taken;
    }
    if (state_ == State::kKey) {
      key_ += c;
      if (key_string_.Closes(c)) {
        member_ = KeyMember();
        // A second "name" or "parameters" would give the call two names, or arguments that are
        // two objects one after the other: not a call. From the key on, the text is content.
        state_ = SeenKey() ? State::kMalformed : State::kColon;
        if (state_ == State::kMalformed) malformed_at_ = key_at_;
      } else if (key_.size() > kMaxKey) {
        state_ = State::kMalformed;
      }
      return true;
    }
    if (IsJsonSpace(c)) return true;
    switch (state_) {
      case State::kArray:
        state_ = c == '[' ? State::kElementOrEnd : State::kMalformed;
        break;
      case State::kElementOrEnd:
        if (c == '{') {
          StartElement();
        } else {
          state_ = c == ']' && calls_ == 0 ? State::kDone : State::kMalformed;
        }
        break;
      case State::kAfterElement:
        state_ = c == ',' ? State::kElementOrEnd : c == ']' ? State::kDone : State::kMalformed;
        break;
      case State::kKeyOrEnd:
      case State::kKeyStart:
        if (c == '"') {
          key_ = "\"";
          key_string_ = JsonStringScan();
          key_at_ = raw_.size() - 1;
          state_ = State::kKey;
        } else {
          state_ = c == '}' && state_ == State::kKeyOrEnd ? EndElement() : State::kMalformed;
        }
        break;
      case State::kColon:
        if (c != ':') {
          state_ = State::kMalformed;
          break;
        }
        StartValue();
        break;
      case State::kAfterValue:
        state_ = c == ',' ? State::kKeyStart : c == '}' ? EndElement() : State::kMalformed;
        break;
      default:
        state_ = State::kMalformed;
    }
    return true;
  }

  void StartElement() {
    name_.reset();
    pending_arguments_.clear();
    parameters_ = false;
    name_seen_ = false;
    call_out_ = false;
    state_ = State::kKeyOrEnd;
  }
  Member KeyMember() const {
    const nlohmann::json key = nlohmann::json::parse(key_, nullptr, false);
    return !key.is_string()                         ? Member::kOther
           : key.get<std::string>() == "name"       ? Member::kName
           : key.get<std::string>() == "parameters" ? Member::kParameters
                                                    : Member::kOther;
  }
  // Whether the element already has the key just read ("name" or "parameters").
  bool SeenKey() const {
    return (member_ == Member::kName && name_seen_) ||
           (member_ == Member::kParameters && parameters_);
  }
  void StartValue() {
    if (member_ == Member::kParameters) parameters_ = true;
    if (member_ == Member::kName) name_seen_ = true;
    value_ = JsonValueText();
    value_text_.clear();
    state_ = State::kValue;
  }
  void AddValueText(const std::string& text) {
    if (member_ == Member::kParameters) {
      pending_arguments_ += text;
      MaybeStartCall();
    } else if (member_ == Member::kName) {
      value_text_ += text;
      if (value_text_.size() > kMaxKey) state_ = State::kMalformed;
    }
  }
  void EndValue() {
    if (member_ == Member::kName) {
      const nlohmann::json name = nlohmann::json::parse(value_text_, nullptr, false);
      if (!name.is_string() || name.get<std::string>().empty()) {
        state_ = State::kMalformed;
        return;
      }
      name_ = name.get<std::string>();
      MaybeStartCall();
    }
    state_ = State::kAfterValue;
  }
  // The call goes out once its name is whole and its arguments have begun; then every piece of
  // them as it comes.
  void MaybeStartCall() {
    if (!name_ || pending_arguments_.empty()) return;
    ToolCallDelta call;
    call.index = calls_ - (call_out_ ? 1 : 0);
    if (!call_out_) {
      call.id = NewToolCallId();
      call.name = *name_;
      call_out_ = true;
      ++calls_;
    }
    call.arguments = std::move(pending_arguments_);
    pending_arguments_.clear();
    out_->AppendToolCall(call);
  }
  State EndElement() {
    if (!name_ || !parameters_ || !call_out_) return State::kMalformed;
    out_->AppendToolCall({calls_ - 1, "", "", "", /*closed=*/true});
    return State::kAfterElement;
  }

  static constexpr size_t kMaxKey = 1024;  // Longest key or name read (no grammar allows more).

  State state_ = State::kArray;
  std::string raw_;  // Every character read, for content once the text stops fitting.
  size_t malformed_at_ = std::string::npos;  // Where in raw_ it stopped fitting, if not its end.
  int32_t calls_ = 0;
  // The element being read.
  std::string key_;
  size_t key_at_ = 0;  // Where in raw_ key_ began.
  Member member_ = Member::kOther;
  JsonValueText value_;
  std::string value_text_;         // The name's JSON text.
  std::optional<std::string> name_;
  std::string pending_arguments_;  // Parameters not yet out (the name not yet whole).
  bool parameters_ = false;
  bool name_seen_ = false;  // name_ is set only once the name is whole.
  bool call_out_ = false;
  JsonStringScan key_string_;  // Follows key_'s string.
  ParsedDelta* out_ = nullptr;
};

}  // namespace

std::unique_ptr<OutputParser> MakeForcedToolCallParser(const ToolChoice& choice) {
  if (choice.mode == ToolChoice::Mode::kFunction) {
    return std::make_unique<NamedCallParser>(choice.function);
  }
  return std::make_unique<RequiredCallsParser>();
}

}  // namespace latent::server
