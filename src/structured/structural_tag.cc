#include "structured/structural_tag.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "base/error.h"
#include "structured/echo.h"
#include "structured/json_schema_size.h"
#include "structured/output_spec.h"

namespace latent::structured {
namespace {

using OrderedJson = nlohmann::ordered_json;

const OrderedJson* Member(const OrderedJson& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string StringMember(const OrderedJson& object, const char* key, const std::string& where) {
  const OrderedJson* v = Member(object, key);
  if (v == nullptr) Fail(where, " needs '", key, "' (a string)");
  if (!v->is_string()) Fail(where, ".", key, " must be a string, got ", Echo(*v));
  return v->get<std::string>();
}

// Strings in a trie, so that which of them start a text, and whether a text starts one of them,
// cost the text's length: comparing every trigger with every begin was quadratic in the list.
class Trie {
 public:
  void Insert(const std::string& text) {
    size_t node = 0;
    for (const char c : text) {
      auto [it, added] = nodes_[node].next.emplace(c, nodes_.size());
      if (added) nodes_.emplace_back();
      node = it->second;
    }
    ++nodes_[node].ends;
  }
  // How many of the strings (repeats counted) are prefixes of `text`, `text` itself included.
  size_t PrefixesOf(const std::string& text) const {
    size_t node = 0;
    size_t count = nodes_[0].ends;
    for (const char c : text) {
      const auto it = nodes_[node].next.find(c);
      if (it == nodes_[node].next.end()) break;
      node = it->second;
      count += nodes_[node].ends;
    }
    return count;
  }
  // Whether `text` is a prefix of some string.
  bool StartsOne(const std::string& text) const {
    size_t node = 0;
    for (const char c : text) {
      const auto it = nodes_[node].next.find(c);
      if (it == nodes_[node].next.end()) return false;
      node = it->second;
    }
    return true;
  }

 private:
  struct Node {
    std::map<char, size_t> next;
    size_t ends = 0;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

// Each trigger must start some begin: XGrammar refuses a trigger no tag has only with a failed
// internal check ("new_choice_ids.size() >= 1"), which tells the caller nothing.
void CheckTriggersStartABegin(const std::vector<std::string>& triggers,
                              const std::vector<std::string>& begins, const std::string& where) {
  Trie begin_trie;
  for (const std::string& begin : begins) begin_trie.Insert(begin);
  for (size_t i = 0; i < triggers.size(); ++i) {
    if (!begin_trie.StartsOne(triggers[i])) {
      Fail(where, ".triggers[", i, "] ", Echo(triggers[i]),
           " starts no begin (each trigger must be a prefix of some begin)");
    }
  }
}

// XGrammar compiles about 400 tags a second, holding a server worker: a list past the cap is
// refused before anything else is done with it.
void CheckCount(size_t count, const std::string& where, const char* what,
                size_t cap = kMaxStructuralTagItems) {
  if (count > cap) {
    Fail(where, " holds more than ", cap, " ", what, ", the most a structural tag may have");
  }
}

// vLLM's legacy {"structures": [...], "triggers": [...]} as a triggered_tags format.
OrderedJson LegacyFormat(const OrderedJson& value, const std::string& field) {
  const OrderedJson* structures = Member(value, "structures");
  const OrderedJson* triggers = Member(value, "triggers");
  if (triggers == nullptr) Fail(field, " needs 'triggers' beside 'structures'");
  if (!structures->is_array() || structures->empty()) {
    Fail(field, ".structures must be a non-empty list of {\"begin\", \"schema\", \"end\"} "
         "objects, got ", Echo(*structures));
  }
  if (!triggers->is_array() || triggers->empty()) {
    Fail(field, ".triggers must be a non-empty list of strings, got ", Echo(*triggers));
  }
  CheckCount(structures->size(), field + ".structures", "structures");
  CheckCount(triggers->size(), field + ".triggers", "triggers");
  std::vector<std::string> trigger_texts;
  Trie trigger_trie;
  for (size_t i = 0; i < triggers->size(); ++i) {
    const OrderedJson& t = (*triggers)[i];
    if (!t.is_string() || t.get_ref<const std::string&>().empty()) {
      Fail(field, ".triggers[", i, "] must be a non-empty string, got ", Echo(t));
    }
    trigger_texts.push_back(t.get<std::string>());
    trigger_trie.Insert(trigger_texts.back());
  }
  OrderedJson tags = OrderedJson::array();
  std::vector<std::string> begins;
  for (size_t i = 0; i < structures->size(); ++i) {
    const OrderedJson& s = (*structures)[i];
    const std::string where = StrCat(field, ".structures[", i, "]");
    if (!s.is_object()) {
      Fail(where, " must be an object {\"begin\", \"schema\", \"end\"}, got ", Echo(s));
    }
    std::string begin = StringMember(s, "begin", where);
    std::string end = StringMember(s, "end", where);
    const OrderedJson* schema = Member(s, "schema");
    if (schema == nullptr) Fail(where, " needs 'schema' (a JSON schema object)");
    if (!schema->is_object()) {
      Fail(where, ".schema must be a JSON schema (an object), got ", Echo(*schema));
    }
    const size_t starting = trigger_trie.PrefixesOf(begin);
    if (starting != 1) {
      Fail(where, ".begin ", Echo(begin), starting == 0 ? " starts with no trigger"
                                                        : " starts with more than one trigger",
           " (it must start with exactly one of ", field, ".triggers)");
    }
    begins.push_back(begin);
    tags.push_back({{"type", "tag"},
                    {"begin", std::move(begin)},
                    {"content", {{"type", "json_schema"},
                                 {"json_schema", *schema},
                                 {"max_whitespace_cnt", 1}}},
                    {"end", std::move(end)}});
  }
  CheckTriggersStartABegin(trigger_texts, begins, field);
  return {{"type", "triggered_tags"}, {"triggers", *triggers}, {"tags", std::move(tags)}};
}

bool IsNonEmptyArray(const OrderedJson* v) { return v != nullptr && v->is_array() && !v->empty(); }

bool IsArrayOfStrings(const OrderedJson* v) {
  if (v == nullptr || !v->is_array()) return false;
  for (const OrderedJson& item : *v) {
    if (!item.is_string()) return false;
  }
  return true;
}

// The type XGrammar 0.2.9 gives the format `f` (StructuralTagParser::ParseFormat): its "type",
// or, without one, the first type it tries in turn whose required members `f` has with the right
// JSON types ("" when none has). XGrammar also needs the nested formats to parse before it takes
// a type; this does not look into them, so a tag whose nested formats are bad may be typed here
// as XGrammar would have typed it had they been good (XGrammar then refuses the tag, or, rarely,
// tries its next type).
std::string FormatType(const OrderedJson& f) {
  if (const OrderedJson* type = Member(f, "type")) {
    return type->is_string() ? type->get<std::string>() : "";
  }
  const auto has = [&](const char* key) { return Member(f, key) != nullptr; };
  const OrderedJson* begin = Member(f, "begin");
  const OrderedJson* end = Member(f, "end");
  if (begin != nullptr && (begin->is_string() || begin->is_object()) && has("content") &&
      end != nullptr && (end->is_string() || end->is_array() || end->is_object())) {
    return "tag";
  }
  if (const OrderedJson* value = Member(f, "value"); value != nullptr && value->is_string()) {
    return "const_string";
  }
  if (const OrderedJson* schema = Member(f, "json_schema");
      schema != nullptr && (schema->is_object() || schema->is_boolean())) {
    return "json_schema";
  }
  // any_text without a type needs "excludes" (so a triggered_tags with "excludes" is any_text).
  if (IsArrayOfStrings(Member(f, "excludes"))) return "any_text";
  if (IsNonEmptyArray(Member(f, "elements"))) return "sequence";
  if (IsNonEmptyArray(Member(f, "triggers")) && IsNonEmptyArray(Member(f, "tags"))) {
    return "triggered_tags";
  }
  if (IsNonEmptyArray(Member(f, "tags")) && Member(f, "separator") != nullptr) {
    return "tags_with_separator";
  }
  if (has("content")) return "optional";
  if (IsNonEmptyArray(Member(f, "rules"))) return "dispatch";
  return "";
}

// Whether a triggered_tags format's triggers are all used: not when it is at_least_one and
// stop_after_first, whose grammar is one of its tags, with no dispatch on its triggers.
bool DispatchesOnTriggers(const OrderedJson& f) {
  const OrderedJson* at_least_one = Member(f, "at_least_one");
  const OrderedJson* stop_after_first = Member(f, "stop_after_first");
  return !(at_least_one != nullptr && *at_least_one == true && stop_after_first != nullptr &&
           *stop_after_first == true);
}

// Calls `visit(object, type, where)` for each format object in `format` (`where` names it),
// nested at any depth, with FormatType's type; never inside a schema.
void ForEachFormat(
    const OrderedJson& format, const std::string& where,
    const std::function<void(const OrderedJson&, const std::string&, const std::string&)>& visit) {
  if (format.is_array()) {
    for (size_t i = 0; i < format.size(); ++i) {
      ForEachFormat(format[i], StrCat(where, "[", i, "]"), visit);
    }
    return;
  }
  if (!format.is_object()) return;
  visit(format, FormatType(format), where);
  for (const auto& [key, v] : format.items()) {
    if (key != "json_schema") ForEachFormat(v, StrCat(where, ".", key), visit);
  }
}

// What XGrammar refuses without naming it, or too slowly, over every format in `format`.
void CheckFormat(const OrderedJson& format, const std::string& where) {
  size_t tags = 0;
  size_t triggers = 0;
  size_t formats = 0;
  size_t grammar_bytes = 0;
  ForEachFormat(format, where, [&](const OrderedJson& f, const std::string& type,
                                   const std::string& at) {
    // Counted over the whole tag, wherever they are. Every format counts ("sequence" and "or"
    // elements, tags' contents, ...): the walk stops at the first past the cap.
    CheckCount(++formats, where, "formats in all", kMaxStructuralTagFormats);
    // A regex's pattern and a grammar's text, as a plain regex or grammar is bounded.
    for (const char* key : {"pattern", "grammar"}) {
      if (const OrderedJson* text = Member(f, key); text != nullptr && text->is_string()) {
        grammar_bytes += text->get_ref<const std::string&>().size();
      }
    }
    if (grammar_bytes > kMaxGrammarBytes) {
      Fail(where, "'s regexes and grammars are too long: ", grammar_bytes,
           " bytes in all, more than the ", kMaxGrammarBytes, " allowed");
    }
    if (const OrderedJson* t = Member(f, "tags"); t != nullptr && t->is_array()) tags += t->size();
    for (const char* key : {"triggers", "trigger_tokens"}) {
      if (const OrderedJson* t = Member(f, key); t != nullptr && t->is_array()) {
        triggers += t->size();
      }
    }
    CheckCount(tags, where, "tags in all");
    CheckCount(triggers, where, "triggers in all");
    if (type != "triggered_tags" || !DispatchesOnTriggers(f)) return;
    const OrderedJson* trigger_list = Member(f, "triggers");
    const OrderedJson* tag_list = Member(f, "tags");
    if (!IsArrayOfStrings(trigger_list) || tag_list == nullptr || !tag_list->is_array()) return;
    std::vector<std::string> begins;
    for (const OrderedJson& tag : *tag_list) {
      const OrderedJson* begin = tag.is_object() ? Member(tag, "begin") : nullptr;
      // Anything else malformed (or a token begin) is XGrammar's to name.
      if (begin == nullptr || !begin->is_string()) return;
      begins.push_back(begin->get<std::string>());
    }
    CheckTriggersStartABegin(trigger_list->get<std::vector<std::string>>(), begins, at);
  });
}

// XGrammar compiles each different schema of a tag on its own: their number, their values in all
// and each one's optional properties are bounded.
void CheckSchemas(const OrderedJson& tag, const std::string& field) {
  std::unordered_set<std::string> schemas;
  JsonSchemaSize in_all;
  ForEachStructuralTagSchema(tag, [&](const OrderedJson& schema, const std::string& where) {
    if (!schemas.insert(schema.dump()).second) return;
    const JsonSchemaSize size = MeasureJsonSchema(schema);
    CheckJsonSchemaSize(size, StrCat(field, "'s schema at ", where), SIZE_MAX,
                        kMaxStructuralTagOptionalProperties);
    in_all.values += size.values;
  });
  if (schemas.size() > kMaxStructuralTagSchemas) {
    Fail(field, " holds ", schemas.size(), " different JSON schemas, more than the ",
         kMaxStructuralTagSchemas, " a structural tag may have");
  }
  CheckJsonSchemaSize(in_all, StrCat(field, "'s schemas in all"), kMaxStructuralTagSchemaValues,
                      SIZE_MAX);
}

// A token as a token_triggered_tags format gives it (an id or the token's text) as its id, or
// nothing when XGrammar would refuse it (and say why).
std::optional<int32_t> TokenId(const OrderedJson& token, const TokenIdOf& id_of) {
  if (token.is_number_integer()) {
    const int64_t id = token.get<int64_t>();
    if (id < 0 || id > INT32_MAX) return std::nullopt;
    return static_cast<int32_t>(id);
  }
  if (token.is_string() && !token.get_ref<const std::string&>().empty()) {
    return id_of(token.get<std::string>());
  }
  return std::nullopt;
}

}  // namespace

OrderedJson ParseStructuralTag(const OrderedJson& value, std::string_view field_name) {
  const std::string field(field_name);
  if (!value.is_object()) Fail(field, " must be a structural tag (an object), got ", Echo(value));
  if (const OrderedJson* type = Member(value, "type");
      type != nullptr && (!type->is_string() || *type != "structural_tag")) {
    Fail(field, ".type must be \"structural_tag\", got ", Echo(*type));
  }
  // As vLLM: the legacy form whenever "structures" is there, else the format; other keys ignored.
  OrderedJson tag;
  if (Member(value, "structures") != nullptr) {
    tag = {{"type", "structural_tag"}, {"format", LegacyFormat(value, field)}};
  } else {
    const OrderedJson* format = Member(value, "format");
    if (format == nullptr) {
      Fail(field, " needs 'format' (XGrammar's structural tag format) or 'structures' and "
           "'triggers'");
    }
    if (!format->is_object()) Fail(field, ".format must be an object, got ", Echo(*format));
    CheckFormat(*format, field + ".format");
    tag = {{"type", "structural_tag"}, {"format", *format}};
  }
  CheckSchemas(tag, field);
  return tag;
}

void ForEachStructuralTagSchema(
    const OrderedJson& tag,
    const std::function<void(const OrderedJson&, const std::string&)>& visit) {
  const OrderedJson* format = Member(tag, "format");
  if (format == nullptr) return;
  ForEachFormat(*format, "format", [&](const OrderedJson& f, const std::string& type,
                                       const std::string& where) {
    // Without a type, XGrammar may take the schema (json_schema is among the types it tries):
    // checked whatever type it would pick, rather than let one through.
    const bool takes_schema = type == "json_schema" || type == "qwen_xml_parameter" ||
                              Member(f, "type") == nullptr;
    const OrderedJson* schema = Member(f, "json_schema");
    if (takes_schema && schema != nullptr && (schema->is_object() || schema->is_boolean())) {
      visit(*schema, where);
    }
  });
}

void CheckStructuralTagTriggerTokens(const OrderedJson& tag, const TokenIdOf& id_of) {
  const OrderedJson* format = Member(tag, "format");
  if (format == nullptr) return;
  ForEachFormat(*format, "format", [&](const OrderedJson& f, const std::string& type,
                                       const std::string& where) {
    if (type != "token_triggered_tags" || !DispatchesOnTriggers(f)) return;
    const OrderedJson* triggers = Member(f, "trigger_tokens");
    const OrderedJson* tags = Member(f, "tags");
    if (triggers == nullptr || !triggers->is_array() || tags == nullptr || !tags->is_array()) {
      return;
    }
    std::unordered_set<int32_t> begins;
    for (const OrderedJson& t : *tags) {
      const OrderedJson* begin = t.is_object() ? Member(t, "begin") : nullptr;
      const OrderedJson* token = begin != nullptr && begin->is_object() ? Member(*begin, "token")
                                                                         : nullptr;
      std::optional<int32_t> id = token != nullptr ? TokenId(*token, id_of) : std::nullopt;
      if (!id) return;  // XGrammar's to name.
      begins.insert(*id);
    }
    for (size_t i = 0; i < triggers->size(); ++i) {
      const std::optional<int32_t> id = TokenId((*triggers)[i], id_of);
      if (!id) return;
      if (!begins.count(*id)) {
        Fail("the structural tag's ", where, ".trigger_tokens[", i, "] ", Echo((*triggers)[i]),
             " begins no tag (each trigger token must be some tag's begin token)");
      }
    }
  });
}

}  // namespace latent::structured
