// What XGrammar is given is bounded before it compiles, since its compile time grows faster than
// its input and cannot be interrupted: a JSON schema's values and optional properties
// (json_schema_size.h), a regex's or grammar's bytes (kMaxGrammarBytes), a structural tag's
// different schemas and their size in all. And a caller waiting for a compile can be let go
// (StructuredOutput::Abandon, for a server shutting down).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/detached_threads.h"
#include "base/error.h"
#include "error_of.h"
#include "structured/json_schema_size.h"
#include "structured/output_spec.h"
#include "structured/structural_tag.h"
#include "structured/structured_output.h"

namespace latent {
namespace {

using OJson = nlohmann::ordered_json;
using test::ErrorOf;

// EOS (id 0) and a few characters.
structured::GrammarVocabulary TinyVocabulary() {
  structured::GrammarVocabulary v;
  v.token_bytes.push_back(std::nullopt);
  for (const char* piece : {"{", "}", "\"", ":", ",", "a", "b", "c", "x", "<", ">", "/"}) {
    v.token_bytes.push_back(piece);
  }
  v.stop_token_ids = {0};
  return v;
}

// An object of `count` string properties named p0, p1, ...: the first `required` required.
// 3 * count + 4 values with them all required.
OJson Properties(size_t count, size_t required, const std::string& prefix = "p") {
  OJson properties = OJson::object();
  OJson names = OJson::array();
  for (size_t i = 0; i < count; ++i) {
    properties[StrCat(prefix, i)] = {{"type", "string"}};
    if (i < required) names.push_back(StrCat(prefix, i));
  }
  return {{"type", "object"}, {"properties", properties}, {"required", names}};
}

TEST(JsonSchemaSize, CountsEveryValueAndTheOptionalPropertiesWhereXGrammarReadsThem) {
  const OJson schema = OJson::parse(R"({
    "type": "object",
    "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
    "required": ["a"]})");
  // The object, "object", properties, a's object and "string", b's and "integer", required, "a".
  EXPECT_EQ(structured::MeasureJsonSchema(schema).values, 9u);
  EXPECT_EQ(structured::MeasureJsonSchema(schema).optional_properties, 1u);
  // Under items, anyOf, $defs and a property's own properties, all counted.
  const OJson nested = OJson::parse(R"({
    "type": "array",
    "items": {"anyOf": [{"type": "object", "properties": {"x": {}, "y": {}}},
                        {"$ref": "#/$defs/d"}]},
    "$defs": {"d": {"type": "object", "properties": {
      "z": {"type": "object", "properties": {"w": {}}, "required": ["w"]}}}}})");
  EXPECT_EQ(structured::MeasureJsonSchema(nested).optional_properties, 3u);  // x, y, z
  // A property named "properties" is a property, and the values of "enum" or "default" are no
  // schemas (their values still count).
  const OJson named = OJson::parse(R"({
    "type": "object",
    "properties": {"properties": {"type": "string", "enum": [{"properties": {"q": {}}}]}},
    "default": {"properties": {"r": {}}}})");
  const structured::JsonSchemaSize size = structured::MeasureJsonSchema(named);
  EXPECT_EQ(size.optional_properties, 1u);
  EXPECT_EQ(size.values, 12u);
}

// 25,000 properties ran XGrammar's compiler for minutes: past the limits a schema is refused at
// once, the limit and the count named (tests/e2e has the 25,000).
TEST(StructuredLimits, AJsonSchemaPastTheLimitsIsRefusedBeforeItIsCompiled) {
  EXPECT_EQ(structured::kMaxJsonSchemaValues, 10000u);
  EXPECT_EQ(structured::kMaxJsonSchemaOptionalProperties, 1000u);
  const auto check = [](const OJson& schema) {
    structured::CheckJsonSchemaSize(structured::MeasureJsonSchema(schema), "the JSON schema",
                                    structured::kMaxJsonSchemaValues,
                                    structured::kMaxJsonSchemaOptionalProperties);
  };
  EXPECT_EQ(ErrorOf([&] { check(Properties(3332, 3332)); }), "");  // 10,000 values
  EXPECT_EQ(ErrorOf([&] { check(Properties(1000, 0)); }), "");
  structured::StructuredOutput output(TinyVocabulary());
  EXPECT_EQ(ErrorOf([&] { output.JsonSchema(Properties(3333, 3333)); }),
            "too many values in the JSON schema: 10003 at any depth (objects, arrays, strings, "
            "numbers, booleans and nulls), more than the 10000 allowed");
  EXPECT_EQ(ErrorOf([&] { output.JsonSchema(Properties(1001, 0)); }),
            "too many optional properties in the JSON schema: 1001 (properties their object does "
            "not list in 'required'), more than the 1000 allowed");
  // However they are spread: two objects of 501 optional properties each.
  const OJson spread = {{"type", "object"},
                        {"properties", {{"x", Properties(501, 0)}, {"y", Properties(501, 0)}}},
                        {"required", {"x", "y"}}};
  EXPECT_THAT(ErrorOf([&] { output.JsonSchema(spread); }),
              ::testing::HasSubstr("optional properties in the JSON schema: 1002"));
  // Through structured_outputs too; a small schema still compiles.
  const structured::OutputSpec spec =
      structured::ParseStructuredOutputs({{"json", Properties(1001, 0)}});
  EXPECT_THAT(ErrorOf([&] { output.Constraint(spec); }),
              ::testing::HasSubstr("too many optional properties"));
  // Each schema compiled, and cached by its own text (the compile, off this thread, owns a copy).
  const auto two = output.JsonSchema(Properties(2, 1));
  const auto three = output.JsonSchema(Properties(3, 1));
  EXPECT_NE(two, three);
  EXPECT_EQ(output.JsonSchema(Properties(2, 1)), two);
  EXPECT_EQ(output.cached_grammars(), 2u);
}

TEST(StructuredLimits, ARegexOrGrammarPastTheLimitIsRefusedBeforeItIsCompiled) {
  EXPECT_EQ(structured::kMaxGrammarBytes, 32768u);
  structured::StructuredOutput output(TinyVocabulary());
  const std::string at_the_limit = "root ::= \"a\"" + std::string(32768 - 12, ' ');
  EXPECT_NE(output.Grammar(at_the_limit), nullptr);
  EXPECT_EQ(ErrorOf([&] { output.Grammar(at_the_limit + " "); }),
            "the grammar is too long: 32769 bytes, more than the 32768 allowed");
  EXPECT_EQ(ErrorOf([&] { output.Regex(std::string(32769, 'a')); }),
            "the regex is too long: 32769 bytes, more than the 32768 allowed");
  // A choice, as its grammar.
  structured::OutputSpec choice;
  choice.kind = structured::OutputSpec::Kind::kChoice;
  choice.choices.assign(3000, "abcdefgh");  // " | \"abcdefgh\"": 13 bytes each
  EXPECT_THAT(ErrorOf([&] { output.Constraint(choice); }),
              ::testing::StartsWith("the choice's grammar (root ::= \"a\" | \"b\" ...) is too "
                                    "long: 39006 bytes"));
}

// XGrammar compiles each different schema of a structural tag on its own, far slower than a plain
// schema of the same size (a legacy tag of 1,024 took 38 s): their number, their values in all and
// each one's optional properties are bounded when the tag is parsed.
TEST(StructuredLimits, AStructuralTagsSchemasAreBoundedInNumberAndSize) {
  EXPECT_EQ(structured::kMaxStructuralTagSchemas, 64u);
  EXPECT_EQ(structured::kMaxStructuralTagSchemaValues, 2000u);
  EXPECT_EQ(structured::kMaxStructuralTagOptionalProperties, 250u);
  const auto parse = [](const OJson& tag) {
    return structured::ParseStructuredOutputs({{"structural_tag", tag}});
  };
  // `schemas[i]` for structure i.
  const auto legacy = [](const std::vector<OJson>& schemas) {
    OJson tag = {{"structures", OJson::array()}, {"triggers", {"<f"}}};
    for (size_t i = 0; i < schemas.size(); ++i) {
      tag["structures"].push_back(
          {{"begin", StrCat("<f", i, ">")}, {"schema", schemas[i]}, {"end", "</f>"}});
    }
    return tag;
  };
  std::vector<OJson> different;
  for (size_t i = 0; i < 65; ++i) different.push_back(Properties(1, 1, StrCat("a", i, "_")));
  const std::string field = "structured_outputs.structural_tag";
  EXPECT_EQ(ErrorOf([&] { parse(legacy(different)); }),
            field + " holds 65 different JSON schemas, more than the 64 a structural tag may have");
  different.pop_back();
  EXPECT_EQ(parse(legacy(different)).kind, structured::OutputSpec::Kind::kStructuralTag);
  // The same schema 200 times is one schema, compiled once.
  EXPECT_EQ(parse(legacy(std::vector<OJson>(200, Properties(100, 100)))).kind,
            structured::OutputSpec::Kind::kStructuralTag);
  // Values and optional properties over all the schemas: 2 * (3 * 333 + 4) = 2006 values.
  EXPECT_EQ(ErrorOf([&] { parse(legacy({Properties(333, 333, "a"), Properties(333, 333, "b")})); }),
            "too many values in " + field + "'s schemas in all: 2006 at any depth (objects, "
            "arrays, strings, numbers, booleans and nulls), more than the 2000 allowed");
  // Optional properties cost the cube of their number in one schema, not across a tag's schemas
  // (compiled apart): bounded in each.
  EXPECT_EQ(parse(legacy({Properties(250, 0, "a"), Properties(250, 0, "b")})).kind,
            structured::OutputSpec::Kind::kStructuralTag);
  EXPECT_EQ(ErrorOf([&] { parse(legacy({Properties(1, 0, "a"), Properties(251, 0, "b")})); }),
            "too many optional properties in " + field + "'s schema at format.tags[1].content: "
            "251 (properties their object does not list in 'required'), more than the 250 allowed");
  // XGrammar's format form alike, wherever its schemas are.
  const OJson format = {
      {"type", "sequence"},
      {"elements", {{{"type", "json_schema"}, {"json_schema", Properties(251, 0)}}}}};
  EXPECT_THAT(ErrorOf([&] { parse({{"format", format}}); }),
              ::testing::HasSubstr("optional properties in " + field +
                                   "'s schema at format.elements[0]: 251"));
  // Its regexes and grammars in all, as a plain one.
  const auto texts = [](size_t regex, size_t grammar) {
    return OJson{{"format",
                  {{"type", "sequence"},
                   {"elements",
                    {{{"type", "regex"}, {"pattern", std::string(regex, 'a')}},
                     {{"type", "grammar"}, {"grammar", std::string(grammar, ' ')}}}}}}};
  };
  EXPECT_EQ(parse(texts(16384, 16384)).kind, structured::OutputSpec::Kind::kStructuralTag);
  EXPECT_EQ(ErrorOf([&] { parse(texts(16384, 16385)); }),
            field + ".format's regexes and grammars are too long: 32769 bytes in all, more than "
            "the 32768 allowed");
}

// A server shutting down stops waiting for a compile, which XGrammar cannot interrupt: the caller
// gets CompileAbandoned, and every later compile too; what is compiled is still given.
TEST(StructuredLimits, AbandonLetsTheCallersOfACompileGo) {
  structured::StructuredOutput output(TinyVocabulary());
  const auto compiled = output.Regex("ab");
  // A tenth of a second's work here (optional properties cost the cube of their number), far
  // longer than this thread takes to see it start.
  const OJson slow = Properties(500, 0);
  std::string error;
  std::atomic<bool> returned{false};
  // Earlier compiles' threads are gone (their callers had their grammars).
  while (DetachedThreadsRunning() > 0) std::this_thread::yield();
  std::thread waiting([&] {
    try {
      output.JsonSchema(slow);
    } catch (const structured::CompileAbandoned& e) {
      error = e.what();
    }
    returned = true;
  });
  // Abandoned once its compile has started (its thread is running), before it can end.
  while (DetachedThreadsRunning() == 0 && !returned) std::this_thread::yield();
  output.Abandon("the server is shutting down");
  waiting.join();
  EXPECT_EQ(error, "the server is shutting down");
  try {
    output.Regex("ba");
    ADD_FAILURE() << "compiled after Abandon";
  } catch (const structured::CompileAbandoned& e) {
    EXPECT_STREQ(e.what(), "the server is shutting down");
  }
  EXPECT_EQ(output.Regex("ab"), compiled);
  // The compile runs on unwaited for; this process waits for it before it exits.
  while (DetachedThreadsRunning() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

TEST(DetachedThreads, CountedUntilTheirWorkAndWhatItHeldAreGone) {
  const size_t before = DetachedThreadsRunning();
  std::mutex mutex;
  std::unique_lock<std::mutex> hold(mutex);
  auto held = std::make_shared<int>(1);
  RunDetached([&mutex, held] { std::lock_guard<std::mutex> wait(mutex); });
  EXPECT_EQ(DetachedThreadsRunning(), before + 1);
  std::weak_ptr<int> gone = held;
  held.reset();
  hold.unlock();
  while (DetachedThreadsRunning() > before) std::this_thread::yield();
  EXPECT_TRUE(gone.expired());
}

}  // namespace
}  // namespace latent
