// Chat template scopes with many names: a scope past a few names is found through an index
// (interpreter.h's Frame), which must give the same bindings as jinja2's scoping: a name set
// again is overwritten in place, a for loop body and a macro shadow the names around them, and
// thousands of chat_template_kwargs each reach the template under their own name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "base/error.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/chat_template/interpreter.h"

namespace latent::tokenizer {
namespace {

using jinja::Frame;
using jinja::Value;
using nlohmann::ordered_json;
using ::testing::HasSubstr;

constexpr int kScopeNames = 2000;

std::string ScopeVar(int i) { return "v" + std::to_string(i); }

// The integer bound to `name` as seen from `frame`; -1 when unbound.
int64_t BoundInt(const Frame& frame, const std::string& name) {
  const Value* v = frame.Lookup(name);
  return v ? v->AsInt() : -1;
}

std::string RenderScoped(const std::string& source, const ordered_json& kwargs = nullptr) {
  return ChatTemplate::FromString(source, {{"bos_token", "<s>"}})
      .Render(ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), nullptr, false,
              kwargs);
}

TEST(ChatTemplateScope, ManyNamesInOneFrame) {
  auto frame = std::make_shared<Frame>(nullptr);
  for (int i = 0; i < kScopeNames; ++i) {
    frame->Set(ScopeVar(i), Value::Int(i));
    // The names set before the frame was indexed, and the one just set, are found as it grows.
    ASSERT_EQ(BoundInt(*frame, ScopeVar(0)), 0) << "after setting " << i;
    ASSERT_EQ(BoundInt(*frame, ScopeVar(i)), i);
  }
  for (int i = 0; i < kScopeNames; i += 3) {
    frame->Set(ScopeVar(i), Value::Int(10 * kScopeNames + i));
  }
  for (int i = 0; i < kScopeNames; ++i) {
    EXPECT_EQ(BoundInt(*frame, ScopeVar(i)), i % 3 == 0 ? 10 * kScopeNames + i : i) << ScopeVar(i);
  }
  EXPECT_EQ(frame->Lookup(ScopeVar(kScopeNames)), nullptr);
  EXPECT_EQ(frame->Lookup("v"), nullptr);
}

TEST(ChatTemplateScope, InnerFramesShadowWithManyNames) {
  auto outer = std::make_shared<Frame>(nullptr);
  for (int i = 0; i < kScopeNames; ++i) outer->Set(ScopeVar(i), Value::Int(i));
  auto inner = std::make_shared<Frame>(outer);
  for (int i = 0; i < kScopeNames; i += 2) inner->Set(ScopeVar(i), Value::Int(-i - 1));
  inner->Set("only_inner", Value::Int(7));
  for (int i = 0; i < kScopeNames; ++i) {
    EXPECT_EQ(BoundInt(*inner, ScopeVar(i)), i % 2 == 0 ? -i - 1 : i) << ScopeVar(i);
    EXPECT_EQ(BoundInt(*outer, ScopeVar(i)), i) << ScopeVar(i);  // untouched by the inner Sets
  }
  EXPECT_EQ(BoundInt(*inner, "only_inner"), 7);
  EXPECT_EQ(outer->Lookup("only_inner"), nullptr);
}

// `{% set v0 = 0 %}...` for each name, then each even name set again, then all printed.
TEST(ChatTemplateScope, TemplateSetsAndOverwritesManyNames) {
  std::string source, expected;
  for (int i = 0; i < kScopeNames; ++i) {
    source += "{% set " + ScopeVar(i) + " = " + std::to_string(i) + " %}";
  }
  for (int i = 0; i < kScopeNames; i += 2) source += "{% set " + ScopeVar(i) + " = 'o' %}";
  for (int i = 0; i < kScopeNames; ++i) {
    source += "{{ " + ScopeVar(i) + " }},";
    expected += (i % 2 == 0 ? "o" : std::to_string(i)) + ",";
  }
  EXPECT_EQ(RenderScoped(source), expected);
}

// Many kwargs in the render's context; a for loop body and a macro set or take the same names,
// and the context's bindings come back after them.
TEST(ChatTemplateScope, LoopAndMacroShadowManyKwargs) {
  ordered_json kwargs = ordered_json::object();
  for (int i = 0; i < kScopeNames; ++i) kwargs[ScopeVar(i)] = i;
  // In the loop, each name is printed before the body sets it (the context's value on every
  // iteration: the body's scope is fresh each time), then after.
  std::string body, after, expected;
  for (int i = 0; i < kScopeNames; i += 100) {
    body += "{{ " + ScopeVar(i) + " }}{% set " + ScopeVar(i) + " = 'L' ~ x %}{{ " + ScopeVar(i) +
            " }};";
    after += "{{ " + ScopeVar(i) + " }};";
  }
  for (int x = 0; x < 2; ++x) {
    for (int i = 0; i < kScopeNames; i += 100) {
      expected += std::to_string(i) + "L" + std::to_string(x) + ";";
    }
    expected += "|";
  }
  for (int i = 0; i < kScopeNames; i += 100) expected += std::to_string(i) + ";";
  const std::string source =
      "{% for x in range(2) %}" + body + "|{% endfor %}" + after +
      "{% macro m(v5, v1999, v3000) %}{{ v5 }},{{ v1999 }},{{ v3000 }},{{ v6 }}"
      "{% set v6 = 'M' %},{{ v6 }}{% endmacro %}"
      "[{{ m('a', 'b', 'c') }}][{{ v5 }},{{ v1999 }},{{ v6 }},{{ v3000 is defined }}]";
  expected += "[a,b,c,6,M][5,1999,6,False]";
  EXPECT_EQ(RenderScoped(source, kwargs), expected);
}

// Thousands of kwargs: each reaches the template under its own name, over the special tokens and
// the globals of the same name; a dict of them passes through ** to dict(), namespace() and
// str.format, and a keyword given twice that way is refused.
TEST(ChatTemplateScope, ThousandsOfKwargs) {
  ordered_json kwargs = ordered_json::object(), big = ordered_json::object();
  std::string source, expected;
  for (int i = 0; i < kScopeNames; ++i) {
    kwargs["k" + std::to_string(i)] = "x" + std::to_string(i);
    big["b" + std::to_string(i)] = i;
    source += "{{ k" + std::to_string(i) + " }} ";
    expected += "x" + std::to_string(i) + " ";
  }
  kwargs["bos_token"] = "<bos>";  // a special token's name
  kwargs["range"] = "no range";   // a global's name
  kwargs["big"] = big;
  source +=
      "{{ bos_token }}|{{ range }}|{{ dict(**big) | length }}|{{ namespace(**big).b1234 }}|"
      "{{ '{b0}:{b1999}'.format(**big) }}";
  expected += "<bos>|no range|2000|1234|0:1999";
  EXPECT_EQ(RenderScoped(source, kwargs), expected);
  try {
    RenderScoped("{{ dict(b1500=1, **big) }}", kwargs);
    ADD_FAILURE() << "a keyword given twice was taken";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("got multiple values for keyword argument 'b1500'"));
  }
}

}  // namespace
}  // namespace latent::tokenizer
