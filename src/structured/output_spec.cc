#include "structured/output_spec.h"

#include <cstdio>
#include <string_view>

#include "base/error.h"
#include "base/json_depth.h"
#include "structured/echo.h"
#include "structured/lark_grammar.h"
#include "structured/structural_tag.h"

namespace latent::structured {
namespace {

using OrderedJson = nlohmann::ordered_json;

const char* const kKinds = "json, regex, choice, grammar, json_object or structural_tag";

std::string String(const OrderedJson& v, std::string_view key) {
  if (!v.is_string()) Fail("structured_outputs.", key, " must be a string, got ", Echo(v));
  return v.get<std::string>();
}

// JSON text a request carries in a string, parsed: the request's own depth check cannot see into
// the string, and a value nested some ten thousand levels overflows the stack where it is next
// copied or dumped.
OrderedJson ParseText(const std::string& text, std::string_view key, const char* what) {
  if (JsonNestsDeeperThan(text, kMaxJsonDepth)) {
    Fail("structured_outputs.", key, " nests deeper than ", kMaxJsonDepth, " levels");
  }
  try {
    return OrderedJson::parse(text);
  } catch (const OrderedJson::exception& e) {
    // The parser's message quotes the text it last read, which may be the whole string.
    Fail("structured_outputs.", key, " is not ", what, ": ", Truncated(e.what()));
  }
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
      // vLLM takes the schema as its text too.
      spec.schema = v.is_string() ? ParseText(v.get_ref<const std::string&>(), key, "a JSON schema")
                                  : v;
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
      if (GrammarIsLikelyLark(spec.text)) spec.text = LarkToEbnf(spec.text);  // as vLLM does
    } else if (key == "choice") {
      choose(key, OutputSpec::Kind::kChoice);
      if (!v.is_array() || v.empty()) {
        Fail("structured_outputs.choice must be a non-empty list of strings, got ", Echo(v));
      }
      for (const OrderedJson& c : v) spec.choices.push_back(String(c, "choice[]"));
    } else if (key == "json_object") {
      if (!v.is_boolean()) Fail("structured_outputs.json_object must be a boolean, got ", Echo(v));
      if (v.get<bool>()) choose(key, OutputSpec::Kind::kJsonObject);
    } else if (key == "structural_tag") {
      choose(key, OutputSpec::Kind::kStructuralTag);
      // vLLM's is the tag's JSON text; the object itself is taken too.
      spec.schema = ParseStructuralTag(
          v.is_string() ? ParseText(v.get_ref<const std::string&>(), key, "JSON") : v,
          "structured_outputs.structural_tag");
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

std::string EbnfStringLiteral(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
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
  return out + '"';
}

std::string ChoiceGrammar(const std::vector<std::string>& choices) {
  std::string out = "root ::=";
  for (size_t i = 0; i < choices.size(); ++i) {
    out += i == 0 ? " " : " | ";
    out += EbnfStringLiteral(choices[i]);
  }
  return out;
}

}  // namespace latent::structured
