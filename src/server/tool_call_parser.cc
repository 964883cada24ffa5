#include "server/tool_call_parser.h"

#include <algorithm>
#include <random>

#include "base/error.h"
#include "server/tool_call_formats.h"

namespace latent::server {
namespace {

using OrderedJson = nlohmann::ordered_json;

constexpr std::string_view kSpace = " \t\r\n";

// The length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t PartialSuffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

void DumpPython(const OrderedJson& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out += ", ";
      first = false;
      out += OrderedJson(it.key()).dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
      out += ": ";
      DumpPython(it.value(), out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ", ";
      DumpPython(v[i], out);
    }
    out += ']';
  } else {
    out += v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
  }
}

}  // namespace

std::string NewToolCallId() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
  return id;
}

std::string PythonJsonDumps(const OrderedJson& value) {
  std::string out;
  DumpPython(value, out);
  return out;
}

ToolSchemas::ToolSchemas(const OrderedJson& tools) {
  if (!tools.is_array()) return;
  for (const OrderedJson& tool : tools) {
    if (!tool.is_object() || !tool.contains("function") || !tool["function"].is_object()) continue;
    const OrderedJson& fn = tool["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) continue;
    auto& types = types_[fn["name"].get<std::string>()];
    if (!fn.contains("parameters") || !fn["parameters"].is_object()) continue;
    const OrderedJson& params = fn["parameters"];
    if (!params.contains("properties") || !params["properties"].is_object()) continue;
    for (auto it = params["properties"].begin(); it != params["properties"].end(); ++it) {
      const OrderedJson& prop = it.value();
      std::string type;
      if (prop.is_object() && prop.contains("type") && prop["type"].is_string()) {
        type = prop["type"].get<std::string>();
      }
      types[it.key()] = type;
    }
  }
}

bool ToolSchemas::IsString(const std::string& tool, const std::string& param) const {
  auto t = types_.find(tool);
  if (t == types_.end()) return false;
  auto p = t->second.find(param);
  return p != t->second.end() && p->second == "string";
}

ToolCallParser::ToolCallParser(std::vector<std::string> section_begins, bool key_value)
    : section_begins_(std::move(section_begins)), key_value_(key_value) {}

bool ToolCallParser::ValidName(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  return name.find_first_of(" \t\r\n<>\"") == std::string_view::npos;
}

void ToolCallParser::Consume(size_t n) {
  pending_raw_.append(buf_, 0, n);
  buf_.erase(0, n);
}

void ToolCallParser::SkipSpace() {
  const size_t k = buf_.find_first_not_of(kSpace);
  Consume(k == std::string::npos ? buf_.size() : k);
}

ToolCallParser::Match ToolCallParser::Expect(std::string_view marker) {
  if (std::string_view(buf_).substr(0, marker.size()) == marker) {
    Consume(marker.size());
    return Match::kYes;
  }
  return marker.substr(0, buf_.size()) == buf_ ? Match::kWait : Match::kNo;
}

int ToolCallParser::ExpectOneOf(std::initializer_list<std::string_view> markers) {
  bool wait = false;
  int index = 0;
  for (std::string_view marker : markers) {
    if (std::string_view(buf_).substr(0, marker.size()) == marker) {
      Consume(marker.size());
      return index;
    }
    if (marker.substr(0, buf_.size()) == buf_) wait = true;
    ++index;
  }
  return wait ? -1 : -2;
}

std::optional<std::string> ToolCallParser::ReadUntil(std::string_view marker) {
  const size_t p = buf_.find(marker);
  if (p == std::string::npos) return std::nullopt;
  std::string text = buf_.substr(0, p);
  Consume(p + marker.size());
  return text;
}

void ToolCallParser::AddArgumentText(const std::string& text) {
  if (text.empty()) return;
  out_->AppendToolCall({calls_ - 1, "", "", text});
  arguments_started_ = true;
  Commit();
}

bool ToolCallParser::StreamArgumentsUntil(std::string_view end, std::string_view trailing_trim) {
  if (!leading_space_done_) {
    const size_t k = buf_.find_first_not_of(kSpace);
    if (k == std::string::npos) {
      Consume(buf_.size());
      return false;
    }
    Consume(k);
    leading_space_done_ = true;
  }
  auto trimmed_end = [&](std::string_view text) {
    size_t cut = text.size();
    while (cut > 0 && trailing_trim.find(text[cut - 1]) != std::string_view::npos) --cut;
    return cut;
  };
  const size_t p = buf_.find(end);
  if (p != std::string::npos) {
    AddArgumentText(buf_.substr(0, trimmed_end(std::string_view(buf_).substr(0, p))));
    Consume(p + end.size());
    Commit();
    return true;
  }
  const size_t cut =
      trimmed_end(std::string_view(buf_).substr(0, buf_.size() - PartialSuffix(buf_, end)));
  if (cut > 0) {
    AddArgumentText(buf_.substr(0, cut));
    buf_.erase(0, cut);
  }
  return false;
}

void ToolCallParser::StartCall(std::string id, std::string name) {
  if (id.empty()) id = NewToolCallId();
  call_name_ = name;
  out_->tool_calls.push_back({calls_++, std::move(id), std::move(name), ""});
  call_open_ = true;
  arguments_started_ = false;
  key_values_.clear();
  leading_space_done_ = false;
  Commit();
}

void ToolCallParser::AddArgument(const std::string& key, const std::string& json_value) {
  // A repeated key keeps its first place and takes the last value, as vLLM's dict does.
  auto same = std::find_if(key_values_.begin(), key_values_.end(),
                           [&](const auto& kv) { return kv.first == key; });
  if (same != key_values_.end()) {
    same->second = json_value;
  } else {
    key_values_.emplace_back(key, json_value);
  }
  Commit();
}

void ToolCallParser::CloseCall(bool complete) {
  if (!call_open_) return;
  if (key_value_) {
    std::string object = "{";
    for (const auto& [key, value] : key_values_) {
      if (object.size() > 1) object += ", ";
      object += PythonJsonDumps(key) + ": " + value;
    }
    AddArgumentText(object + "}");
    key_values_.clear();
  } else if (!arguments_started_) {
    AddArgumentText("{}");
  }
  if (complete) out_->AppendToolCall({calls_ - 1, "", "", "", /*closed=*/true});
  call_open_ = false;
  Commit();
}

void ToolCallParser::EmitContent(std::string_view text) {
  if (text.empty()) return;
  const size_t last = text.find_last_not_of(kSpace);
  if (last == std::string_view::npos) {
    held_space_ += text;
    return;
  }
  out_->content += held_space_;
  out_->content += text.substr(0, last + 1);
  held_space_ = text.substr(last + 1);
}

void ToolCallParser::Run() {
  for (;;) {
    if (passthrough_) {
      EmitContent(buf_);
      buf_.clear();
      return;
    }
    if (!in_section_) {
      size_t at = std::string::npos, marker_size = 0, keep = 0;
      for (const std::string& marker : section_begins_) {
        const size_t p = buf_.find(marker);
        if (p < at) {
          at = p;
          marker_size = marker.size();
        }
        keep = std::max(keep, PartialSuffix(buf_, marker));
      }
      if (at == std::string::npos) {
        EmitContent(std::string_view(buf_).substr(0, buf_.size() - keep));
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      EmitContent(std::string_view(buf_).substr(0, at));
      Commit();
      // Whitespace before the markup is dropped, unless the markup does not parse (kMalformed).
      section_space_ = std::move(held_space_);
      held_space_.clear();
      Consume(at + marker_size);
      pending_raw_.erase(0, at);  // Only the marker is raw markup.
      in_section_ = true;
      BeginSection();
      continue;
    }
    switch (Section()) {
      case Step::kProgress:
        continue;
      case Step::kWait:
        return;
      case Step::kSectionEnd:
        Commit();
        in_section_ = false;
        continue;
      case Step::kMalformed: {
        // Back to content exactly as written: with the whitespace before the section when none
        // of it parsed (no call event committed any of it).
        const std::string rest = section_space_ + pending_raw_ + buf_;
        CloseCall(/*complete=*/false);
        Commit();
        buf_.clear();
        in_section_ = false;
        passthrough_ = true;
        EmitContent(rest);
        return;
      }
    }
  }
}

ParsedDelta ToolCallParser::Push(std::string_view text) {
  ParsedDelta out;
  out_ = &out;
  buf_.append(text);
  Run();
  out_ = nullptr;
  return out;
}

ParsedDelta ToolCallParser::Finish() {
  ParsedDelta out;
  out_ = &out;
  if (in_section_) {
    // The output ended inside the markup (max_tokens, a stop string): an open call stays as it
    // stands. The unparsed rest is the markup of a call cut short (its opening before the name,
    // half an argument): dropped, not content, as vLLM drops it; and a call was under way, so
    // the choice must not finish "tool_calls" (then the calls out need not be all there were).
    const std::string rest = pending_raw_ + buf_;
    out.unfinished_call = call_open_ || rest.find_first_not_of(kSpace) != std::string::npos;
    CloseCall(/*complete=*/false);
    Commit();
    buf_.clear();
    in_section_ = false;
  } else {
    EmitContent(buf_);
    buf_.clear();
  }
  // Trailing whitespace after calls is dropped, but not after text that is content again.
  if (calls_ == 0 || passthrough_) out.content += held_space_;
  held_space_.clear();
  out_ = nullptr;
  return out;
}

// ---- Names ----

namespace {

struct ParserName {
  std::string_view name;
  std::string_view canonical;
};
constexpr ParserName kNames[] = {
    {"deepseek_v3", "deepseek_v3"}, {"deepseek_r1", "deepseek_v3"},
    {"deepseek_v31", "deepseek_v31"}, {"deepseek_v32", "deepseek_v32"},
    {"kimi_k2", "kimi_k2"},         {"glm45", "glm45"},
    {"glm47", "glm45"},             {"glm4_moe", "glm45"},
};

}  // namespace

const char* ToolCallParserNames() {
  return "deepseek_v3 (alias deepseek_r1), deepseek_v31, deepseek_v32 (DSML), kimi_k2, glm45 "
         "(aliases glm47, glm4_moe)";
}

std::string ResolveToolCallParser(const std::string& flag, std::string_view model_format,
                                  const std::function<bool(std::string_view)>& mentions) {
  if (flag == "none") return "";
  if (flag != "auto") {
    for (const ParserName& n : kNames) {
      if (flag == n.name) return std::string(n.canonical);
    }
    Fail("--tool-call-parser: unknown parser '", flag, "' (known: auto, none, ",
         ToolCallParserNames(), ")");
  }
  // The chat template's own markup says best which format the model writes.
  if (mentions) {
    if (mentions("DSML")) return "deepseek_v32";
    if (mentions("<｜tool▁sep｜>")) return mentions("```json") ? "deepseek_v3" : "deepseek_v31";
    if (mentions("<|tool_call_begin|>") || mentions("<|tool_calls_section_begin|>") ||
        mentions("<|im_middle|>")) {
      return "kimi_k2";  // Moonshot's chat format, with or without tool calls in the template.
    }
    if (mentions("<arg_key>")) return "glm45";
  }
  // Else what the model's family declares (model::ToolCallFormatFor).
  if (model_format.empty()) return "";
  for (const ParserName& n : kNames) {
    if (model_format == n.name) return std::string(n.canonical);
  }
  FailInternal("the model declares tool-call markup '", model_format,
               "', which no parser reads (known: ", ToolCallParserNames(), ")");
}

std::vector<std::string> ToolCallMarkers(const std::string& name) {
  if (name == "deepseek_v3" || name == "deepseek_v31") {
    return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
            "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
  }
  if (name == "deepseek_v32") {
    return {"<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜invoke",
            "</｜DSML｜invoke>", "<｜DSML｜parameter", "</｜DSML｜parameter>", "｜DSML｜"};
  }
  if (name == "kimi_k2") {
    return {"<|tool_calls_section_begin|>", "<|tool_call_section_begin|>", "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|tool_calls_section_end|>",
            "<|tool_call_section_end|>"};
  }
  if (name == "glm45") {
    return {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
            "</arg_value>"};
  }
  return {};
}

std::unique_ptr<OutputParser> MakeToolCallParser(const std::string& name,
                                                 const OrderedJson& tools) {
  if (name.empty()) return nullptr;
  if (name == "deepseek_v3") return MakeDeepseekV3ToolParser();
  if (name == "deepseek_v31") return MakeDeepseekV31ToolParser();
  if (name == "deepseek_v32") return MakeDsmlToolParser();
  if (name == "kimi_k2") return MakeKimiK2ToolParser();
  if (name == "glm45") return MakeGlm45ToolParser(ToolSchemas(tools));
  Fail("no tool-call parser named '", name, "'");
}

}  // namespace latent::server
