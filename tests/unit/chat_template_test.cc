// The chat template interpreter: expressions, statements, filters, whitespace control, errors
// with positions, and the sandbox's bounds. Expected outputs are what jinja2 renders under
// transformers' settings (tests/chat compares whole templates against transformers itself).
#include "tokenizer/chat_template/chat_template.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"

namespace latent::tokenizer {
namespace {

using nlohmann::ordered_json;
using ::testing::HasSubstr;

ordered_json OneMessage() { return ordered_json::parse(R"([{"role": "user", "content": "hi"}])"); }

std::string Render(const std::string& source, const ordered_json& kwargs = nullptr,
                   const ordered_json& messages = OneMessage(),
                   const ChatTemplateLimits& limits = {}) {
  ChatTemplate t = ChatTemplate::FromString(source, {{"bos_token", "<s>"}});
  t.set_limits(limits);
  return t.Render(messages, nullptr, false, kwargs);
}

// The message of the latent::Error that rendering throws.
std::string RenderError(const std::string& source, const ordered_json& kwargs = nullptr,
                        const ChatTemplateLimits& limits = {}) {
  try {
    Render(source, kwargs, OneMessage(), limits);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "rendering did not fail: " << source;
  return "";
}

TEST(ChatTemplateExpressions, Arithmetic) {
  EXPECT_EQ(Render("{{ 1 + 2 }}|{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 2 ** 10 }}"),
            "3|3|-4|2|3.5|1024");
  EXPECT_EQ(Render("{{ 2 ** -1 }}|{{ 4 / 2 }}|{{ 0.1 + 0.2 }}|{{ 1e16 }}|{{ 1e-5 }}|{{ 1e15 }}"),
            "0.5|2.0|0.30000000000000004|1e+16|1e-05|1000000000000000.0");
  EXPECT_EQ(Render("{{ -2 ** 2 }}|{{ 2 ** 3 ** 2 }}|{{ 10 - 2 - 3 }}|{{ 2 * 3 + 4 * 5 }}"),
            "4|64|5|26");
  EXPECT_EQ(Render("{{ 'ab' * 3 }}|{{ [1] * 2 }}|{{ [1, 2] + [3] }}|{{ 'a' ~ 1 ~ none ~ true }}"),
            "ababab|[1, 1]|[1, 2, 3]|a1NoneTrue");
  EXPECT_EQ(Render("{{ 1_000 + 0x10 + 0o7 + 0b11 }}|{{ 2E-2 }}"), "1026|0.02");
}

TEST(ChatTemplateExpressions, ComparisonsAndLogic) {
  EXPECT_EQ(
      Render("{{ 1 < 2 < 3 }}|{{ 3 > 2 > 2 }}|{{ 1 == 1.0 }}|{{ true == 1 }}|{{ 'a' < 'b' }}"),
      "True|False|True|True|True");
  EXPECT_EQ(Render("{{ [1, 2] < [1, 3] }}|{{ none == none }}|{{ [1, 2] == (1, 2) }}"),
            "True|True|False");
  EXPECT_EQ(Render("{{ true and 'x' }}|{{ '' or 'y' }}|{{ 0 or none }}|{{ not none }}"),
            "x|y|None|True");
  EXPECT_EQ(
      Render("{{ 'bc' in 'abcd' }}|{{ 2 in [1, 2] }}|{{ 'k' in {'k': 1} }}|{{ 3 not in [3] }}"),
      "True|True|True|False");
  EXPECT_EQ(Render("{{ 'y' if x else 'n' }}|{{ 'only' if false }}|", {{"x", 0}}), "n||");
  EXPECT_EQ(Render("{{ not 1 == 2 }}|{{ 'x' ~ 'y' | upper }}|{{ -3 | abs }}"), "True|xY|3");
}

TEST(ChatTemplateExpressions, LiteralsAndPrinting) {
  EXPECT_EQ(Render("{{ {'a': 'it\\'s', 'b': \"q\\\"\"} }}"), "{'a': \"it's\", 'b': 'q\"'}");
  EXPECT_EQ(Render("{{ (1,) }}|{{ (1, 2) }}|{{ () }}|{{ [1, 'a', none, true, 1.5] }}"),
            "(1,)|(1, 2)|()|[1, 'a', None, True, 1.5]");
  EXPECT_EQ(Render("{{ '\\u00e9\\x41\\101\\n' }}|{{ 'a' 'b' \"c\" }}|{{ '\\q' }}"),
            "éAA\n|abc|\\q");
  EXPECT_EQ(Render("{{ ['\\n\\t\\x01'] }}"), "['\\n\\t\\x01']");
}

TEST(ChatTemplateExpressions, AttributesItemsAndUndefined) {
  ordered_json ctx = ordered_json::parse(R"({"d": {"a": 1, "b": [1, 2], "c": null}, "l": [3, 1, 2],
                                             "s": "héllo"})");
  EXPECT_EQ(
      Render("{{ d.a }}|{{ d['b'][1] }}|{{ d.missing }}|{{ d.c }}|{{ l[-1] }}|{{ l[10] }}", ctx),
      "1|2||None|2|");
  EXPECT_EQ(
      Render("{{ s[1] }}|{{ s[1:3] }}|{{ s[::-1] }}|{{ l[::-1] }}|{{ l[1:] }}|{{ l.0 }}", ctx),
      "é|él|olléh|[2, 1, 3]|[1, 2]|3");
  EXPECT_EQ(Render("{{ nothing }}|{{ nothing is defined }}|{{ nothing | default('x') }}"),
            "|False|x");
  EXPECT_EQ(Render("{{ none.attr }}|{{ none['k'] }}|{{ d.items is defined }}", ctx), "||True");
  EXPECT_THAT(RenderError("{{ nothing.attr }}"), HasSubstr("'nothing' is undefined"));
  EXPECT_THAT(RenderError("{{ nothing + 'x' }}"), HasSubstr("'nothing' is undefined"));
  EXPECT_THAT(RenderError("{{ d.missing + 'x' }}", ctx),
              HasSubstr("'dict object' has no attribute 'missing'"));
}

TEST(ChatTemplateStatements, IfForSet) {
  EXPECT_EQ(Render("{% if x %}A{% elif y %}B{% else %}C{% endif %}", {{"x", 0}, {"y", 1}}), "B");
  EXPECT_EQ(Render("{% for x in [3, 1, 2] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "103TrueFalse3;212FalseFalse3;321FalseTrue3;");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}"),
            "-2;1-3;2-;");
  EXPECT_EQ(Render("{% for x in [] %}A{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"),
            "a=1;b=2;");
  EXPECT_EQ(Render("{% for x in [3, 1, 2] if x > 1 %}{{ x }}{{ loop.length }}{% endfor %}"),
            "3222");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{% if x == 2 %}{% continue %}{% endif %}{{ x }}"
                   "{% endfor %}|{% for x in [1, 2, 3] %}{% if x == 2 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "13|1");
  // A for loop body is its own scope, fresh on every iteration; if is not a scope.
  EXPECT_EQ(Render("{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}"
                   "{{ x }}"),
            "12121");
  EXPECT_EQ(Render("{% if true %}{% set z = 5 %}{% endif %}{{ z }}"), "5");
  EXPECT_EQ(Render("{% set a, b = 1, 2 %}{{ a }}{{ b }}"), "12");
  EXPECT_EQ(Render("{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]|{% set y | upper %}up"
                   "{% endset %}{{ y }}"),
            "[block 2]|UP");
  EXPECT_EQ(
      Render("{% for c in 'ab' %}{{ c }}.{% endfor %}{% for k in {'x': 1} %}{{ k }}{% endfor %}"),
      "a.b.x");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.cycle('o', 'e') }}{% endfor %}"), "oeo");
}

TEST(ChatTemplateStatements, NamespaceMacroCallFilterWith) {
  EXPECT_EQ(
      Render("{% set ns = namespace(a=1, b='x') %}{% set ns.a = ns.a + 1 %}{{ ns.a }}{{ ns.b }}"
             "{{ ns }}"),
      "2x<Namespace {'a': 2, 'b': 'x'}>");
  EXPECT_EQ(Render("{% set ns = namespace(last=none) %}{% for x in [1, 2] %}{% set ns.last = x %}"
                   "{% endfor %}{{ ns.last }}"),
            "2");
  EXPECT_EQ(Render("{% macro greet(name, greeting='Hello') %}{{ greeting }}, {{ name }}!"
                   "{% endmacro %}{{ greet('A') }}|{{ greet(greeting='Yo', name='C') }}"),
            "Hello, A!|Yo, C!");
  EXPECT_EQ(
      Render("{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=4) }}"),
      "1(2,){'x': 4}");
  EXPECT_EQ(Render("{% macro m(a, b=a) %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}"), "11");
  // Macros see the enclosing scope when called, not when defined.
  EXPECT_EQ(Render("{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}{% set y = 2 %}"
                   "{{ m() }}"),
            "12");
  EXPECT_EQ(Render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                   "{{ f(3) }}"),
            "321");
  EXPECT_EQ(Render("{% macro list(items) %}{% for i in items %}{{ caller(i) }}{% endfor %}"
                   "{% endmacro %}{% call(x) list([1, 2]) %}<{{ x }}>{% endcall %}"),
            "<1><2>");
  EXPECT_EQ(Render("{% filter upper %}hello {{ 'x' }}{% endfilter %}"), "HELLO X");
  EXPECT_EQ(Render("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"), "3[]");
  EXPECT_EQ(Render("{% generation %}gen{% endgeneration %}"), "gen");
  EXPECT_THAT(RenderError("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
              HasSubstr("takes not more than 1 argument"));
}

TEST(ChatTemplateFilters, Strings) {
  ordered_json ctx = {{"ws", "  \t padded \n "}, {"s", "héllo wörld"}};
  EXPECT_EQ(
      Render("[{{ ws | trim }}]|{{ '--a--' | trim('-') }}|{{ ws.strip() }}|{{ ws.rstrip() }}|",
             ctx),
      "[padded]|a|padded|  \t padded|");
  EXPECT_EQ(
      Render("{{ s | upper }}|{{ s.title() }}|{{ s | capitalize }}|{{ 'a-b c' | title }}", ctx),
      "HÉLLO WÖRLD|Héllo Wörld|Héllo wörld|A-B C");
  EXPECT_EQ(Render("{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a,b,c'.rsplit(',', 1) }}"),
            "['a', 'b', '', 'c']|['a', 'b']|['a,b', 'c']");
  EXPECT_EQ(Render("{{ s.startswith('hé') }}|{{ s.endswith(('x', 'ld')) }}|{{ s.find('l') }}|"
                   "{{ s.rfind('l') }}|{{ s.count('l') }}",
                   ctx),
            "True|True|2|9|3");
  EXPECT_EQ(
      Render(
          "{{ s.replace('l', 'L', 1) }}|{{ s | replace('o', '0') }}|{{ 'abc'.replace('', '-') }}",
          ctx),
      "héLlo wörld|héll0 wörld|-a-b-c-");
  EXPECT_EQ(
      Render("{{ 'abc' | center(9) }}|{{ 'hello world foo' | truncate(9) }}|{{ s | length }}", ctx),
      "   abc   |hello...|11");
  EXPECT_EQ(Render("{{ 'line1\\nline2\\n\\nline4' | indent(2) }}"), "line1\n  line2\n\n  line4");
  EXPECT_EQ(Render("{{ '%s-%d-%05.2f-%x' % ('a', 3, 2.5, 255) }}|{{ '{} {:>4}'.format(1, 'b') }}"),
            "a-3-02.50-ff|1    b");
  EXPECT_EQ(Render("{{ '<a>&' | e }}|{{ '<b>x</b>  y' | striptags }}|{{ 42 | string }}"),
            "&lt;a&gt;&amp;|x y|42");
  // The title filter upper-cases each word's first letter (ß -> SS); str.title title-cases it.
  EXPECT_EQ(Render("{{ 'ßa ΣΑΣ' | title }}|{{ 'ßa ΣΑΣ'.title() }}|{{ 'ΟΔΟΣ'.lower() }}"),
            "SSa Σας|Ssa Σας|οδος");
  EXPECT_EQ(Render("{{ 'no args' % [1, 2] }}|{{ '%s' % [1, 2] }}"), "no args|[1, 2]");
  EXPECT_THAT(RenderError("{{ 'x' % (1, 2) }}"), HasSubstr("not all arguments converted"));
  EXPECT_THAT(RenderError("{{ 5 | indent }}"), HasSubstr("indent expects a string"));
}

TEST(ChatTemplateFilters, Sequences) {
  ordered_json ctx = ordered_json::parse(R"({"l": [3, 1, 2], "words": ["b", "A", "c", "a"],
      "objs": [{"name": "x", "v": 2}, {"name": "Y", "v": 1}, {"name": "z", "v": 3, "k": true}]})");
  EXPECT_EQ(
      Render("{{ l | join(', ') }}|{{ objs | join(',', attribute='name') }}|{{ l | length }}", ctx),
      "3, 1, 2|x,Y,z|3");
  EXPECT_EQ(Render("{{ l | sort }}|{{ words | sort }}|{{ words | sort(case_sensitive=true) }}|"
                   "{{ l | sort(reverse=true) }}",
                   ctx),
            "[1, 2, 3]|['A', 'a', 'b', 'c']|['A', 'a', 'b', 'c']|[3, 2, 1]");
  EXPECT_EQ(Render("{{ objs | sort(attribute='v') | map(attribute='name') | list }}|"
                   "{{ objs | selectattr('k') | map(attribute='name') | list }}|"
                   "{{ objs | rejectattr('k') | list | length }}",
                   ctx),
            "['Y', 'x', 'z']|['z']|2");
  EXPECT_EQ(Render("{{ l | first }}|{{ l | last }}|{{ l | min }}|{{ l | max }}|{{ l | sum }}|"
                   "{{ [] | first }}",
                   ctx),
            "3|2|1|3|6|");
  EXPECT_EQ(Render("{{ l | select('odd') | list }}|{{ l | map('string') | join('+') }}|"
                   "{{ [1, 1, 2] | unique | list }}|{{ l | reverse | list }}",
                   ctx),
            "[3, 1]|3+1+2|[1, 2]|[2, 1, 3]");
  EXPECT_EQ(Render("{% for k, v in {'b': 1, 'a': 2} | items %}{{ k }}{{ v }}{% endfor %}|"
                   "{{ {'b': 1, 'a': 2} | dictsort }}|{{ range(1, 10, 3) | list }}"),
            "b1a2|[('a', 2), ('b', 1)]|[1, 4, 7]");
  EXPECT_EQ(Render("{{ '42' | int }}|{{ '4.7' | int }}|{{ 'x' | int(5) }}|{{ '3.5' | float }}|"
                   "{{ 2.5 | round }}|{{ 2.675 | round(2) }}|{{ 2.1 | round(method='ceil') }}"),
            "42|4|5|3.5|2.0|2.67|3.0");
  EXPECT_EQ(Render("{{ none | default('x') }}|{{ '' | default('y', true) }}"), "None|y");
}

TEST(ChatTemplateFilters, ToJsonAsTransformersDefinesIt) {
  ordered_json ctx = ordered_json::parse(R"({"d": {"b": [1, 2.5, null, true], "a": "é\"\n"}})");
  EXPECT_EQ(Render("{{ d | tojson }}", ctx), R"({"b": [1, 2.5, null, true], "a": "é\"\n"})");
  EXPECT_EQ(Render("{{ d | tojson(indent=2) }}", ctx),
            "{\n  \"b\": [\n    1,\n    2.5,\n    null,\n    true\n  ],\n  \"a\": \"é\\\"\\n\"\n}");
  EXPECT_EQ(Render("{{ d | tojson(separators=(',', ':'), sort_keys=true) }}", ctx),
            R"({"a":"é\"\n","b":[1,2.5,null,true]})");
  EXPECT_EQ(Render("{{ 'é<>&' | tojson(ensure_ascii=true) }}|{{ 'x\\x01' | tojson }}"),
            R"("\u00e9<>&"|"x\u0001")");
  EXPECT_THAT(RenderError("{{ nothing | tojson }}"),
              HasSubstr("Object of type Undefined is not JSON serializable"));
}

TEST(ChatTemplateTests, Tests) {
  ordered_json ctx = ordered_json::parse(R"({"d": {}, "l": [1], "s": "x", "i": 7, "f": 1.5,
                                             "n": null, "t": true})");
  EXPECT_EQ(Render("{{ l is iterable }}{{ d is mapping }}{{ s is string }}{{ i is number }}"
                   "{{ f is float }}{{ i is integer }}{{ t is boolean }}{{ n is none }}",
                   ctx),
            "TrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(Render("{{ l is sequence }}{{ d is sequence }}{{ n is iterable }}{{ i is odd }}"
                   "{{ 9 is divisibleby 3 }}{{ 1 is true }}{{ s is lower }}{{ 1 is in l }}",
                   ctx),
            "TrueTrueFalseTrueTrueFalseTrueTrue");
  EXPECT_EQ(Render("{{ nope is undefined }}{{ d is not mapping }}{{ t is sameas true }}", ctx),
            "TrueFalseTrue");
  // Python's modulo: -3 % 2 == 1. jinja2's Undefined is callable (it fails when called).
  EXPECT_EQ(Render("{{ -3 is odd }}{{ 2.5 is odd }}{{ nope is callable }}{{ nope in {} }}"),
            "TrueFalseTrueFalse");
}

TEST(ChatTemplateGlobals, Globals) {
  EXPECT_EQ(Render("{{ range(3) | list }}|{{ dict(a=1, b=2) }}|{{ messages[0].role }}|"
                   "{{ bos_token }}|{{ add_generation_prompt }}|{{ tools }}"),
            "[0, 1, 2]|{'a': 1, 'b': 2}|user|<s>|False|None");
  EXPECT_EQ(Render("{% if false %}{{ raise_exception('no') }}{% endif %}ok"), "ok");
  EXPECT_THAT(RenderError("{{ raise_exception('Only user and assistant roles') }}"),
              HasSubstr("line 1 col 4: raise_exception: Only user and assistant roles"));
  EXPECT_THAT(RenderError("{{ range(100001) | length }}"), HasSubstr("Range too big"));
  EXPECT_EQ(Render("{{ strftime_now('%Y') | length }}"), "4");
}

TEST(ChatTemplateWhitespace, TrimAndLstripBlocks) {
  EXPECT_EQ(Render("{% if true %}\n  yes\n{% endif %}\ndone"), "  yes\ndone");
  EXPECT_EQ(Render("  {% if true %}\n    indented\n  {% endif %}\nx"), "    indented\nx");
  EXPECT_EQ(Render("{%- for x in [1, 2] -%}\n  {{ x }}\n{%- endfor %}\nend\n"), "12end");
  EXPECT_EQ(Render("a   {%- if true %} b {% endif -%}   c\n  {{ 'v' }}  {% if true %}z{% endif %}"),
            "a b c\n  v  z");
  EXPECT_EQ(Render("text  {# comment #}\n  {# own line #}\nmore"), "text  more");
  EXPECT_EQ(Render("{%+ if true %}plus{% endif +%}\nnext"), "plus\nnext");
  EXPECT_EQ(Render("{{ 'a' }} {{- 'b' -}} {{ 'c' }}"), "abc");
  EXPECT_EQ(Render("{% raw -%}\n   {{ raw }}\n{%- endraw %}\nafter"), "{{ raw }}after");
  EXPECT_EQ(Render("one\r\ntwo\rthree\n"), "one\ntwo\nthree");
}

TEST(ChatTemplateErrors, SyntaxErrorsHavePositions) {
  auto parse_error = [](const std::string& source) -> std::string {
    try {
      ChatTemplate::FromString(source);
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "parsing did not fail: " << source;
    return "";
  };
  EXPECT_EQ(parse_error("ab\n{{ 'unterminated }}"),
            "chat template line 2 col 4: unterminated string literal");
  EXPECT_EQ(parse_error("{% if true %}no end"),
            "chat template line 1 col 20: unexpected end of template, expected 'elif' or 'else' "
            "or 'endif'");
  EXPECT_EQ(parse_error("{% for x in l %}{% endif %}"),
            "chat template line 1 col 20: unknown tag 'endif'");
  EXPECT_EQ(parse_error("{{ 1 + }}"), "chat template line 1 col 8: unexpected '}}'");
  EXPECT_EQ(parse_error("x\n  {% include 'other.jinja' %}"),
            "chat template line 2 col 6: unsupported tag 'include': chat templates cannot load "
            "other templates");
  EXPECT_EQ(parse_error("{{ x | nosuch }}"),
            "chat template line 1 col 8: no filter named 'nosuch'");
  EXPECT_EQ(parse_error("{{ x | groupby('a') }}"),
            "chat template line 1 col 8: unsupported filter 'groupby'");
  EXPECT_EQ(parse_error("{{ x is nosuch }}"), "chat template line 1 col 9: no test named 'nosuch'");
  EXPECT_EQ(parse_error("{% break %}"), "chat template line 1 col 4: 'break' outside of a loop");
  EXPECT_EQ(parse_error("{{ ) }}"), "chat template line 1 col 4: unexpected ')'");
  EXPECT_EQ(parse_error("{{ '\\N{DASH}' }}"),
            "chat template line 1 col 4: unsupported \\N{...} escape in string literal");
  EXPECT_THAT(parse_error(std::string("{{ 'a\xff' }}")),
              HasSubstr("not valid UTF-8 (byte offset 5)"));
  EXPECT_THAT(parse_error("{{ " + std::string(200, '(') + "1" + std::string(200, ')') + " }}"),
              HasSubstr("nests more than"));
  // Inside an if, an unknown filter fails only if it runs (as in jinja2).
  EXPECT_EQ(Render("{% if false %}{{ x | nosuch }}{% endif %}ok"), "ok");
}

TEST(ChatTemplateErrors, RuntimeErrorsHavePositions) {
  EXPECT_EQ(RenderError("line\n{{ 1 / 0 }}"), "chat template line 2 col 6: division by zero");
  EXPECT_EQ(RenderError("{{ 'a' + 1 }}"),
            "chat template line 1 col 8: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(RenderError("{% set n = none %}{% set n.x = 1 %}"),
            "chat template line 1 col 22: cannot assign attribute on non-namespace object 'n'");
  EXPECT_EQ(
      RenderError("{% set l = [] %}{{ l.append(1) }}"),
      "chat template line 1 col 21: access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(RenderError("{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
            "chat template line 1 col 4: too many values to unpack (expected 2)");
  EXPECT_THAT(RenderError("{{ 2 ** 64 }}"), HasSubstr("integer overflow"));
  EXPECT_THAT(RenderError("{{ [1] | map('string') }}"), HasSubstr("cannot print a generator"));
}

TEST(ChatTemplateBounds, OutputLoopsRecursionWork) {
  ChatTemplateLimits small;
  small.max_output_bytes = 1000;
  EXPECT_THAT(RenderError("{% for i in range(2000) %}x{% endfor %}", nullptr, small),
              HasSubstr("output exceeds 1000 bytes"));
  EXPECT_THAT(RenderError("{{ 'x' * 5000 }}", nullptr, small),
              HasSubstr("output exceeds 1000 bytes"));
  EXPECT_THAT(RenderError("{% set s = 'x' * 600 %}{{ s ~ s }}", nullptr, small),
              HasSubstr("output exceeds 1000 bytes"));
  // Printing or serializing a list that holds one string many times is bounded as it is built.
  EXPECT_THAT(RenderError("{% set s = 'x' * 500 %}{{ [s] * 100 }}", nullptr, small),
              HasSubstr("output exceeds 1000 bytes"));
  EXPECT_THAT(RenderError("{% set s = 'x' * 500 %}{{ ([s] * 100) | tojson }}", nullptr, small),
              HasSubstr("output exceeds 1000 bytes"));
  EXPECT_THAT(RenderError("{{ ([1] * 2000000) | length }}"),
              HasSubstr("a list of 2000000 items is over the limit of 1048576"));
  EXPECT_THAT(RenderError("{{ [1] | batch(100000000, 0) | list }}"), HasSubstr("over the limit"));
  ChatTemplateLimits loops;
  loops.max_loop_iterations = 100;
  EXPECT_THAT(
      RenderError("{% for i in range(50) %}{% for j in range(50) %}{% endfor %}{% endfor %}",
                  nullptr, loops),
      HasSubstr("loops more than 100 times"));
  EXPECT_THAT(RenderError("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
              HasSubstr("macro calls nest more than 100 deep"));
  ChatTemplateLimits work;
  work.max_work = 100000;
  EXPECT_THAT(
      RenderError("{% for i in range(1000) %}{% set s = 'y' * 1000 %}{% endfor %}", nullptr, work),
      HasSubstr("work limit"));
  EXPECT_THAT(RenderError("{% set ns = namespace(x=[]) %}{% for i in range(300) %}"
                          "{% set ns.x = [ns.x] %}{% endfor %}"),
              HasSubstr("nest more than 256 levels"));
  // A namespace that holds itself renders with bounded recursion, and does not leak.
  EXPECT_THAT(RenderError("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
              HasSubstr("nests too deeply to print"));
}

TEST(ChatTemplateInputs, TransformersInputPreparation) {
  // Keys whose value is null are dropped; reasoning is copied to "thinking" (first) and
  // "reasoning_content" (last).
  ordered_json messages = ordered_json::parse(R"([
      {"role": "assistant", "content": null, "reasoning": "why", "tool_calls": null}])");
  ChatTemplate t = ChatTemplate::FromString(
      "{% for m in messages %}{{ m.content is defined }}|{{ m.keys() | list }}{% endfor %}");
  EXPECT_EQ(t.Render(messages, nullptr, false),
            "False|['thinking', 'role', 'reasoning', 'reasoning_content']");
  EXPECT_THAT(
      [&] {
        try {
          t.Render(ordered_json::array(), nullptr, false);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("empty conversation"));
  ChatTemplate tools = ChatTemplate::FromString("{{ tools | tojson }}|{{ enable_thinking }}");
  EXPECT_EQ(tools.Render(OneMessage(), ordered_json::parse(R"([{"name": "f", "x": 1.0}])"), true,
                         {{"enable_thinking", false}}),
            R"([{"name": "f", "x": 1.0}]|False)");
}

// A chat request's integers reach the template exact or not at all: one past the 64-bit range
// (which nlohmann would have made a float, printed as -9.223372036854776e+18) is refused by place.
TEST(ChatTemplateInputs, IntegersPastSixtyFourBitsAreRefused) {
  ChatTemplate t = ChatTemplate::FromString("{{ messages[0].x | tojson }}|{{ messages[0].x }}");
  const ordered_json edge = ParseChatJson(
      R"({"messages": [{"role": "user", "x": [-9223372036854775808, 9223372036854775807]}]})",
      "chat request");
  EXPECT_EQ(t.Render(edge["messages"], nullptr, false),
            "[-9223372036854775808, 9223372036854775807]|[-9223372036854775808, "
            "9223372036854775807]");
  for (const std::string& big : std::vector<std::string>{
           "-9223372036854775809", "9223372036854775808", "1" + std::string(30, '0')}) {
    const std::string text = R"({"messages": [{"role": "user", "x": {"y": )" + big + "}}]}";
    EXPECT_THAT(
        [&] {
          try {
            ParseChatJson(text, "chat request");
          } catch (const Error& e) {
            return std::string(e.what());
          }
          return std::string("taken");
        }(),
        HasSubstr(std::string("chat request: integer ") + big +
                  " at messages[0].x.y is too large (64-bit limit)"));
  }
}

// vLLM updates apply_chat_template's arguments with chat_template_kwargs, so an
// add_generation_prompt there wins; like the request's own switch, it must be a bool.
TEST(ChatTemplateInputs, AddGenerationPromptAmongTheKwargs) {
  ChatTemplate t = ChatTemplate::FromString("{{ add_generation_prompt }}");
  EXPECT_EQ(t.Render(OneMessage(), nullptr, false, {{"add_generation_prompt", true}}), "True");
  EXPECT_EQ(t.Render(OneMessage(), nullptr, true, {{"add_generation_prompt", false}}), "False");
  EXPECT_EQ(t.Render(OneMessage(), nullptr, true, nullptr), "True");
  for (const ordered_json& bad : {ordered_json("yes"), ordered_json(nullptr), ordered_json(1)}) {
    // The place and words the server and request lines give as they parse a request.
    EXPECT_THAT(RenderError("{{ add_generation_prompt }}", {{"add_generation_prompt", bad}}),
                HasSubstr("chat request: 'chat_template_kwargs.add_generation_prompt' must be a "
                          "boolean"));
  }
  ChatRequest cont;
  cont.messages = OneMessage();
  cont.continue_final_message = true;
  cont.kwargs = {{"add_generation_prompt", true}};
  EXPECT_THAT(
      [&] {
        try {
          ChatTemplate::FromString("{{ messages[0].content }}").Render(cont);
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string("taken");
      }(),
      HasSubstr("continue_final_message and add_generation_prompt are not compatible"));
}

TEST(ChatTemplateInputs, FromTokenizerDir) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "latent_chat_template_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream(dir / "tokenizer_config.json") << R"({
      "bos_token": {"__type": "AddedToken", "content": "<B>"}, "eos_token": "<E>",
      "unk_token": null, "image_token": "<img>",
      "chat_template": "{{ bos_token }}{{ eos_token }}{{ image_token }}{{ unk_token is defined }}"})";
  }
  EXPECT_EQ(ChatTemplate::FromTokenizerDir(dir.string()).Render(OneMessage(), nullptr, false),
            "<B><E><img>False");
  // chat_template.jinja wins over the config's template.
  { std::ofstream(dir / "chat_template.jinja") << "from file {{ eos_token }}\n"; }
  EXPECT_EQ(ChatTemplate::FromTokenizerDir(dir.string()).Render(OneMessage(), nullptr, false),
            "from file <E>");
  fs::remove_all(dir);
  EXPECT_THROW(ChatTemplate::FromTokenizerDir(dir.string()), Error);
}

}  // namespace
}  // namespace latent::tokenizer
