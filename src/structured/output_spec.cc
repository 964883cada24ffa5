#include "structured/output_spec.h"

#include <cstdio>
#include <string_view>

#include "base/error.h"
#include "base/json_depth.h"

namespace latent::structured {
namespace {

using OrderedJson = nlohmann::ordered_json;

const char* const kKinds = "json, regex, choice, grammar or json_object";

// At most this much of a value the caller sent goes into an error: a schema can be megabytes.
constexpr size_t kMaxEchoed = 200;

std::string Truncated(std::string text) {
  if (text.size() <= kMaxEchoed) return text;
  size_t cut = kMaxEchoed;
  // Not inside a UTF-8 character: the message must stay valid text.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  text.resize(cut);
  return text + "...";
}

std::string Echo(const OrderedJson& v) {
  return Truncated(v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace));
}

std::string String(const OrderedJson& v, std::string_view key) {
  if (!v.is_string()) Fail("structured_outputs.", key, " must be a string, got ", Echo(v));
  return v.get<std::string>();
}

}  // namespace

OutputSpec ParseStructuredOutputs(const OrderedJson& value) {
  if (!value.is_object()) Fail("structured_outputs must be an object, got ", Echo(value));
  OutputSpec spec;
  std::string chosen;  // The key that set spec.kind.
  auto choose = [&](const std::string& key, OutputSpec::Kind kind) {
    if (spec.active()) {
      Fail("structured_outputs: give one of ", kKinds, ", not both '", chosen, "' and '", key, "'");
    }
    spec.kind = kind;
    chosen = key;
  };
  for (const auto& [key, v] : value.items()) {
    if (v.is_null()) continue;
    if (key == "json") {
      choose(key, OutputSpec::Kind::kJsonSchema);
      if (v.is_string()) {
        // vLLM takes the schema as its text too. The request's own depth check cannot see into
        // the string, and a schema nested some ten thousand levels overflows the stack where it
        // is next copied or dumped.
        const std::string& text = v.get_ref<const std::string&>();
        if (JsonNestsDeeperThan(text, kMaxJsonDepth)) {
          Fail("structured_outputs.json nests deeper than ", kMaxJsonDepth, " levels");
        }
        try {
          spec.schema = OrderedJson::parse(text);
        } catch (const OrderedJson::exception& e) {
          // The parser's message quotes the text it last read, which may be the whole string.
          Fail("structured_outputs.json is not a JSON schema: ", Truncated(e.what()));
        }
      } else {
        spec.schema = v;
      }
      if (!spec.schema.is_object() && !spec.schema.is_boolean()) {
        Fail("structured_outputs.json must be a JSON schema (an object), got ", Echo(spec.schema));
      }
    } else if (key == "regex") {
      choose(key, OutputSpec::Kind::kRegex);
      spec.text = String(v, key);
      if (spec.text.empty()) Fail("structured_outputs.regex is empty");
    } else if (key == "grammar") {
      choose(key, OutputSpec::Kind::kGrammar);
      spec.text = String(v, key);
      if (spec.text.empty()) Fail("structured_outputs.grammar is empty");
    } else if (key == "choice") {
      choose(key, OutputSpec::Kind::kChoice);
      if (!v.is_array() || v.empty()) {
        Fail("structured_outputs.choice must be a non-empty list of strings, got ", Echo(v));
      }
      for (const OrderedJson& c : v) spec.choices.push_back(String(c, "choice[]"));
    } else if (key == "json_object") {
      if (!v.is_boolean()) Fail("structured_outputs.json_object must be a boolean, got ", Echo(v));
      if (v.get<bool>()) choose(key, OutputSpec::Kind::kJsonObject);
    } else if (key == "disable_any_whitespace" || key == "disable_additional_properties" ||
               key == "disable_fallback") {
      if (!v.is_boolean()) Fail("structured_outputs.", key, " must be a boolean, got ", Echo(v));
    } else {
      Fail("structured_outputs.", Truncated(key), " is not supported (latent takes ", kKinds, ")");
    }
  }
  if (!spec.active()) Fail("structured_outputs needs one of ", kKinds);
  return spec;
}

std::string ChoiceGrammar(const std::vector<std::string>& choices) {
  std::string out = "root ::=";
  for (size_t i = 0; i < choices.size(); ++i) {
    out += i == 0 ? " \"" : " | \"";
    for (const char c : choices[i]) {
      const auto byte = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (byte < 0x20 || byte == 0x7f) {
        // \u with its fixed 4 digits: XGrammar's \x takes every hex digit that follows, so "\n1"
        // written \xa1 would read as one character.
        char escaped[8];
        std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
        out += escaped;
      } else {
        out += c;  // UTF-8 bytes stand for themselves inside a literal.
      }
    }
    out += '"';
  }
  return out;
}

}  // namespace latent::structured
