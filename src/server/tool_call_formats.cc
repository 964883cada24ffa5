#include "server/tool_call_formats.h"

#include <cctype>
#include <utility>

#include "base/json_depth.h"
#include "server/openai_schema.h"
#include "server/python_literal.h"
#include "tokenizer/chat_template/pystr.h"

namespace latent::server {
namespace {

using OrderedJson = nlohmann::ordered_json;

// How long a name or tag may grow before its end must have come.
constexpr size_t kMaxHeader = 512;

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string JsonString(const std::string& text) { return PythonJsonDumps(OrderedJson(text)); }

// Python's str.strip(): Unicode whitespace too (U+00A0, U+3000, ...), as vLLM's glm4_moe strips
// keys and values (the chat templates' str.strip).
std::string PythonStrip(std::string_view s) {
  return tokenizer::jinja::Strip(s, std::nullopt, /*left=*/true, /*right=*/true);
}

// A value written as text: a JSON string when `is_string`, else the JSON it parses as, else
// (`python_literals`, GLM's as vLLM's ast.literal_eval fallback) the Python literal it reads as;
// a string when it is neither, or when it nests deeper than a request may: the model's text is
// not trusted to be shallow, and a value thousands of levels deep overflows the stack when
// dumped. GLM's (`python_literals`) is read and kept stripped as Python strips it (vLLM's
// glm4_moe deserializes value.strip()); DSML's is read trimmed and kept as written.
std::string ValueJson(const std::string& text, bool is_string, bool python_literals) {
  if (is_string) return JsonString(text);
  const std::string trimmed = python_literals ? PythonStrip(text) : Trim(text);
  if (!JsonNestsDeeperThan(text, kMaxJsonDepth)) {
    OrderedJson parsed = OrderedJson::parse(trimmed, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) return PythonJsonDumps(parsed);
  }
  if (python_literals) {
    if (const std::optional<OrderedJson> literal = ParsePythonLiteral(trimmed, kMaxJsonDepth)) {
      return PythonJsonDumps(*literal);
    }
    return JsonString(trimmed);
  }
  return JsonString(text);
}

// The value of attribute `key` in `attrs` (` name="x" string="true"`), if present.
std::optional<std::string> Attribute(std::string_view attrs, std::string_view key) {
  const std::string pattern = std::string(key) + "=\"";
  size_t p = 0;
  while ((p = attrs.find(pattern, p)) != std::string_view::npos) {
    if (p == 0 || std::isspace(static_cast<unsigned char>(attrs[p - 1]))) {
      const size_t start = p + pattern.size();
      const size_t end = attrs.find('"', start);
      if (end == std::string_view::npos) return std::nullopt;
      return std::string(attrs.substr(start, end - start));
    }
    p += pattern.size();
  }
  return std::nullopt;
}

// DeepSeek V3/R1 and V3.1: one section of calls, JSON arguments.
class DeepseekParser : public ToolCallParser {
 public:
  explicit DeepseekParser(bool v3) : ToolCallParser({"<｜tool▁calls▁begin｜>"}, false), v3_(v3) {}

 private:
  static constexpr std::string_view kCallBegin = "<｜tool▁call▁begin｜>";
  static constexpr std::string_view kCallEnd = "<｜tool▁call▁end｜>";
  static constexpr std::string_view kSectionEnd = "<｜tool▁calls▁end｜>";
  static constexpr std::string_view kSep = "<｜tool▁sep｜>";
  enum class State { kCallOrEnd, kType, kName, kFence, kArguments };

  void BeginSection() override { state_ = State::kCallOrEnd; }

  Step Section() override {
    switch (state_) {
      case State::kCallOrEnd: {
        SkipSpace();
        if (buf_.empty()) return Step::kWait;
        const int which = ExpectOneOf({kCallBegin, kSectionEnd});
        if (which == -1) return Step::kWait;
        if (which == -2) return Step::kMalformed;
        if (which == 1) return Step::kSectionEnd;
        state_ = v3_ ? State::kType : State::kName;
        return Step::kProgress;
      }
      case State::kType: {  // V3: "function<｜tool▁sep｜>"
        const std::optional<std::string> type = ReadUntil(kSep);
        if (!type) return WaitedTooLong(kMaxHeader) ? Step::kMalformed : Step::kWait;
        if (!ValidName(Trim(*type))) return Step::kMalformed;
        state_ = State::kName;
        return Step::kProgress;
      }
      case State::kName: {  // V3: the name ends the line; V3.1: at the separator.
        const std::optional<std::string> name = ReadUntil(v3_ ? std::string_view("\n") : kSep);
        if (!name) return WaitedTooLong(kMaxHeader) ? Step::kMalformed : Step::kWait;
        const std::string trimmed = Trim(*name);
        if (!ValidName(trimmed)) return Step::kMalformed;
        StartCall("", trimmed);
        state_ = v3_ ? State::kFence : State::kArguments;
        return Step::kProgress;
      }
      case State::kFence: {  // V3: "```json\n" before the arguments.
        SkipSpace();
        if (buf_.empty()) return Step::kWait;
        if (buf_[0] == '{') {  // No fence: the JSON itself.
          state_ = State::kArguments;
          return Step::kProgress;
        }
        const Match m = Expect("```json");
        if (m == Match::kWait) return Step::kWait;
        if (m == Match::kNo) return Step::kMalformed;
        state_ = State::kArguments;
        return Step::kProgress;
      }
      case State::kArguments:
        if (!StreamArgumentsUntil(kCallEnd, v3_ ? " \t\r\n`" : " \t\r\n")) return Step::kWait;
        EndCall();
        state_ = State::kCallOrEnd;
        return Step::kProgress;
    }
    return Step::kMalformed;
  }

  const bool v3_;
  State state_ = State::kCallOrEnd;
};

// Kimi K2: the call's id is the model's functions.NAME:IDX.
class KimiK2Parser : public ToolCallParser {
 public:
  KimiK2Parser()
      : ToolCallParser({"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"}, false) {}

 private:
  static constexpr std::string_view kCallBegin = "<|tool_call_begin|>";
  static constexpr std::string_view kArgBegin = "<|tool_call_argument_begin|>";
  static constexpr std::string_view kCallEnd = "<|tool_call_end|>";
  enum class State { kCallOrEnd, kId, kArguments };

  void BeginSection() override { state_ = State::kCallOrEnd; }

  // "functions.get_weather:0" -> "get_weather"; "" when it is not NAME:DIGITS.
  static std::string NameOf(const std::string& id) {
    const size_t colon = id.rfind(':');
    if (colon == std::string::npos || colon + 1 == id.size()) return "";
    for (size_t i = colon + 1; i < id.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(id[i]))) return "";
    }
    std::string name = id.substr(0, colon);
    constexpr std::string_view kPrefix = "functions.";
    if (name.compare(0, kPrefix.size(), kPrefix) == 0) name.erase(0, kPrefix.size());
    return name;
  }

  Step Section() override {
    switch (state_) {
      case State::kCallOrEnd: {
        SkipSpace();
        if (buf_.empty()) return Step::kWait;
        const int which = ExpectOneOf(
            {kCallBegin, "<|tool_calls_section_end|>", "<|tool_call_section_end|>"});
        if (which == -1) return Step::kWait;
        if (which == -2) return Step::kMalformed;
        if (which >= 1) return Step::kSectionEnd;
        state_ = State::kId;
        return Step::kProgress;
      }
      case State::kId: {
        const std::optional<std::string> id = ReadUntil(kArgBegin);
        if (!id) return WaitedTooLong(kMaxHeader) ? Step::kMalformed : Step::kWait;
        const std::string trimmed = Trim(*id);
        const std::string name = NameOf(trimmed);
        if (!ValidName(trimmed) || !ValidName(name)) return Step::kMalformed;
        StartCall(trimmed, name);
        state_ = State::kArguments;
        return Step::kProgress;
      }
      case State::kArguments:
        if (!StreamArgumentsUntil(kCallEnd, " \t\r\n")) return Step::kWait;
        EndCall();
        state_ = State::kCallOrEnd;
        return Step::kProgress;
    }
    return Step::kMalformed;
  }

  State state_ = State::kCallOrEnd;
};

// GLM-4.5 (and 4.7/5): one <tool_call> per call, key/value arguments typed by the tools' schemas.
class Glm45Parser : public ToolCallParser {
 public:
  explicit Glm45Parser(ToolSchemas schemas)
      : ToolCallParser({"<tool_call>"}, true), schemas_(std::move(schemas)) {}

 private:
  static constexpr std::string_view kKeyBegin = "<arg_key>";
  static constexpr std::string_view kKeyEnd = "</arg_key>";
  static constexpr std::string_view kValueBegin = "<arg_value>";
  static constexpr std::string_view kValueEnd = "</arg_value>";
  static constexpr std::string_view kCallEnd = "</tool_call>";
  enum class State { kName, kKeyOrEnd, kKey, kValueBegin, kValue };

  void BeginSection() override { state_ = State::kName; }

  Step Section() override {
    switch (state_) {
      case State::kName: {  // Ends at a newline (4.5), or where the arguments or the call end.
        size_t end = std::string::npos, skip = 0;
        for (std::string_view stop : {std::string_view("\n"), kKeyBegin, kCallEnd}) {
          const size_t p = buf_.find(stop);
          if (p < end) {
            end = p;
            skip = stop == "\n" ? 1 : 0;
          }
        }
        if (end == std::string::npos) {
          return WaitedTooLong(kMaxHeader) ? Step::kMalformed : Step::kWait;
        }
        const std::string name = Trim(std::string_view(buf_).substr(0, end));
        if (!ValidName(name)) return Step::kMalformed;
        buf_.erase(0, end + skip);
        StartCall("", name);
        state_ = State::kKeyOrEnd;
        return Step::kProgress;
      }
      case State::kKeyOrEnd: {
        SkipSpace();
        if (buf_.empty()) return Step::kWait;
        const int which = ExpectOneOf({kKeyBegin, kCallEnd});
        if (which == -1) return Step::kWait;
        if (which == -2) return Step::kMalformed;
        if (which == 1) {
          EndCall();
          return Step::kSectionEnd;
        }
        state_ = State::kKey;
        return Step::kProgress;
      }
      case State::kKey: {
        const std::optional<std::string> key = ReadUntil(kKeyEnd);
        if (!key) return WaitedTooLong(kMaxHeader) ? Step::kMalformed : Step::kWait;
        key_ = PythonStrip(*key);
        if (key_.empty() || key_.find('<') != std::string::npos) return Step::kMalformed;
        state_ = State::kValueBegin;
        return Step::kProgress;
      }
      case State::kValueBegin: {
        SkipSpace();
        if (buf_.empty()) return Step::kWait;
        const Match m = Expect(kValueBegin);
        if (m == Match::kWait) return Step::kWait;
        if (m == Match::kNo) return Step::kMalformed;
        state_ = State::kValue;
        return Step::kProgress;
      }
      case State::kValue: {
        const std::optional<std::string> value = ReadUntil(kValueEnd);
        if (!value) return Step::kWait;
        AddArgument(key_, ValueJson(*value, schemas_.IsString(current_call_name(), key_),
                                    /*python_literals=*/true));
        state_ = State::kKeyOrEnd;
        return Step::kProgress;
      }
    }
    return Step::kMalformed;
  }

  const ToolSchemas schemas_;
  State state_ = State::kName;
  std::string key_;
};

// DeepSeek V3.2's DSML: XML-like invoke/parameter tags; string="false" values are JSON.
class DsmlParser : public ToolCallParser {
 public:
  DsmlParser() : ToolCallParser({"<｜DSML｜function_calls>"}, true) {}

 private:
  static constexpr std::string_view kInvoke = "<｜DSML｜invoke";
  static constexpr std::string_view kInvokeEnd = "</｜DSML｜invoke>";
  static constexpr std::string_view kParameter = "<｜DSML｜parameter";
  static constexpr std::string_view kParameterEnd = "</｜DSML｜parameter>";
  static constexpr std::string_view kSectionEnd = "</｜DSML｜function_calls>";
  enum class State { kInvokeOrEnd, kInvokeTag, kParameterOrEnd, kParameterTag, kValue };

  void BeginSection() override { state_ = State::kInvokeOrEnd; }

  Step Section() override {
    switch (state_) {
      case State::kInvokeOrEnd: {
        SkipSpace();
        if (buf_.empty()) return Step::kWait;
        const int which = ExpectOneOf({kInvoke, kSectionEnd});
        if (which == -1) return Step::kWait;
        if (which == -2) return Step::kMalformed;
        if (which == 1) return Step::kSectionEnd;
        state_ = State::kInvokeTag;
        return Step::kProgress;
      }
      case State::kInvokeTag: {  // ` name="NAME">`
        const std::optional<std::string> attrs = ReadUntil(">");
        if (!attrs) return WaitedTooLong(kMaxHeader) ? Step::kMalformed : Step::kWait;
        const std::optional<std::string> name = Attribute(*attrs, "name");
        if (attrs->empty() || !std::isspace(static_cast<unsigned char>((*attrs)[0])) || !name ||
            !ValidName(*name)) {
          return Step::kMalformed;
        }
        StartCall("", *name);
        state_ = State::kParameterOrEnd;
        return Step::kProgress;
      }
      case State::kParameterOrEnd: {
        SkipSpace();
        if (buf_.empty()) return Step::kWait;
        const int which = ExpectOneOf({kParameter, kInvokeEnd});
        if (which == -1) return Step::kWait;
        if (which == -2) return Step::kMalformed;
        if (which == 1) {
          EndCall();
          state_ = State::kInvokeOrEnd;
          return Step::kProgress;
        }
        state_ = State::kParameterTag;
        return Step::kProgress;
      }
      case State::kParameterTag: {  // ` name="K" string="true">`
        const std::optional<std::string> attrs = ReadUntil(">");
        if (!attrs) return WaitedTooLong(kMaxHeader) ? Step::kMalformed : Step::kWait;
        const std::optional<std::string> key = Attribute(*attrs, "name");
        if (attrs->empty() || !std::isspace(static_cast<unsigned char>((*attrs)[0])) || !key ||
            key->empty()) {
          return Step::kMalformed;
        }
        key_ = *key;
        is_string_ = Attribute(*attrs, "string") == std::optional<std::string>("true");
        state_ = State::kValue;
        return Step::kProgress;
      }
      case State::kValue: {
        const std::optional<std::string> value = ReadUntil(kParameterEnd);
        if (!value) return Step::kWait;
        AddArgument(key_, ValueJson(*value, is_string_, /*python_literals=*/false));
        state_ = State::kParameterOrEnd;
        return Step::kProgress;
      }
    }
    return Step::kMalformed;
  }

  State state_ = State::kInvokeOrEnd;
  std::string key_;
  bool is_string_ = false;
};

}  // namespace

std::unique_ptr<OutputParser> MakeDeepseekV3ToolParser() {
  return std::make_unique<DeepseekParser>(true);
}
std::unique_ptr<OutputParser> MakeDeepseekV31ToolParser() {
  return std::make_unique<DeepseekParser>(false);
}
std::unique_ptr<OutputParser> MakeDsmlToolParser() { return std::make_unique<DsmlParser>(); }
std::unique_ptr<OutputParser> MakeKimiK2ToolParser() { return std::make_unique<KimiK2Parser>(); }
std::unique_ptr<OutputParser> MakeGlm45ToolParser(ToolSchemas schemas) {
  return std::make_unique<Glm45Parser>(std::move(schemas));
}

}  // namespace latent::server
