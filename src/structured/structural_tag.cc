#include "structured/structural_tag.h"

#include <string>
#include <vector>

#include "base/error.h"
#include "structured/echo.h"

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

bool StartsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// Each trigger must start some begin: XGrammar refuses a trigger no tag has only with a failed
// internal check ("new_choice_ids.size() >= 1"), which tells the caller nothing.
void CheckTriggersStartABegin(const std::vector<std::string>& triggers,
                              const std::vector<std::string>& begins, const std::string& where) {
  for (size_t i = 0; i < triggers.size(); ++i) {
    bool starts = false;
    for (const std::string& begin : begins) starts = starts || StartsWith(begin, triggers[i]);
    if (!starts) {
      Fail(where, ".triggers[", i, "] ", Echo(triggers[i]),
           " starts no begin (each trigger must be a prefix of some begin)");
    }
  }
}

// vLLM's legacy {"structures": [...], "triggers": [...]} as a triggered_tags format.
OrderedJson LegacyFormat(const OrderedJson& value, const std::string& field) {
  const OrderedJson* structures = Member(value, "structures");
  const OrderedJson* triggers = Member(value, "triggers");
  if (triggers == nullptr) Fail(field, " needs 'triggers' beside 'structures'");
  if (structures == nullptr) Fail(field, " needs 'structures' beside 'triggers'");
  if (!structures->is_array() || structures->empty()) {
    Fail(field, ".structures must be a non-empty list of {\"begin\", \"schema\", \"end\"} "
         "objects, got ", Echo(*structures));
  }
  if (!triggers->is_array() || triggers->empty()) {
    Fail(field, ".triggers must be a non-empty list of strings, got ", Echo(*triggers));
  }
  std::vector<std::string> trigger_texts;
  for (size_t i = 0; i < triggers->size(); ++i) {
    const OrderedJson& t = (*triggers)[i];
    if (!t.is_string() || t.get_ref<const std::string&>().empty()) {
      Fail(field, ".triggers[", i, "] must be a non-empty string, got ", Echo(t));
    }
    trigger_texts.push_back(t.get<std::string>());
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
    size_t starting = 0;
    for (const std::string& t : trigger_texts) starting += StartsWith(begin, t) ? 1 : 0;
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

// What XGrammar refuses without naming it, over every format nested in `format` (`where` is its
// place).
void CheckFormat(const OrderedJson& format, const std::string& where) {
  if (format.is_array()) {
    for (size_t i = 0; i < format.size(); ++i) CheckFormat(format[i], StrCat(where, "[", i, "]"));
    return;
  }
  if (!format.is_object()) return;
  const OrderedJson* type = Member(format, "type");
  const bool is_type = type != nullptr && type->is_string();
  if (is_type && *type == "json_schema") return;  // A schema holds no formats.
  if (is_type && *type == "triggered_tags") {
    const OrderedJson* triggers = Member(format, "triggers");
    const OrderedJson* tags = Member(format, "tags");
    std::vector<std::string> trigger_texts;
    std::vector<std::string> begins;
    bool all_strings = triggers != nullptr && triggers->is_array() && tags != nullptr &&
                       tags->is_array();
    for (size_t i = 0; all_strings && i < triggers->size(); ++i) {
      all_strings = (*triggers)[i].is_string();
      if (all_strings) trigger_texts.push_back((*triggers)[i].get<std::string>());
    }
    for (size_t i = 0; all_strings && i < tags->size(); ++i) {
      const OrderedJson* begin = (*tags)[i].is_object() ? Member((*tags)[i], "begin") : nullptr;
      all_strings = begin != nullptr && begin->is_string();
      if (all_strings) begins.push_back(begin->get<std::string>());
    }
    // Anything else malformed (or a token begin) is XGrammar's to name.
    if (all_strings) CheckTriggersStartABegin(trigger_texts, begins, where);
  }
  for (const auto& [key, v] : format.items()) CheckFormat(v, StrCat(where, ".", key));
}

void VisitSchemas(const OrderedJson& format, const std::string& where,
                  const std::function<void(const OrderedJson&, const std::string&)>& visit) {
  if (format.is_array()) {
    for (size_t i = 0; i < format.size(); ++i) {
      VisitSchemas(format[i], StrCat(where, "[", i, "]"), visit);
    }
    return;
  }
  if (!format.is_object()) return;
  const OrderedJson* type = Member(format, "type");
  if (type != nullptr && type->is_string() && *type == "json_schema") {
    if (const OrderedJson* schema = Member(format, "json_schema")) visit(*schema, where);
    return;
  }
  for (const auto& [key, v] : format.items()) VisitSchemas(v, StrCat(where, ".", key), visit);
}

}  // namespace

OrderedJson ParseStructuralTag(const OrderedJson& value, std::string_view field_name) {
  const std::string field(field_name);
  if (!value.is_object()) Fail(field, " must be a structural tag (an object), got ", Echo(value));
  if (const OrderedJson* type = Member(value, "type");
      type != nullptr && (!type->is_string() || *type != "structural_tag")) {
    Fail(field, ".type must be \"structural_tag\", got ", Echo(*type));
  }
  const OrderedJson* format = Member(value, "format");
  const bool legacy =
      Member(value, "structures") != nullptr || Member(value, "triggers") != nullptr;
  if (format != nullptr && legacy) {
    Fail(field, ": give either 'format' (XGrammar's structural tag) or 'structures' and "
         "'triggers' (the legacy form), not both");
  }
  if (legacy) return {{"type", "structural_tag"}, {"format", LegacyFormat(value, field)}};
  if (format == nullptr) {
    Fail(field, " needs 'format' (XGrammar's structural tag format) or 'structures' and "
         "'triggers'");
  }
  if (!format->is_object()) Fail(field, ".format must be an object, got ", Echo(*format));
  CheckFormat(*format, field + ".format");
  return {{"type", "structural_tag"}, {"format", *format}};
}

void ForEachStructuralTagSchema(
    const OrderedJson& tag,
    const std::function<void(const OrderedJson&, const std::string&)>& visit) {
  if (const OrderedJson* format = Member(tag, "format")) VisitSchemas(*format, "format", visit);
}

}  // namespace latent::structured
