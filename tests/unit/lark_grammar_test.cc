// Lark grammars in structured_outputs.grammar (vLLM's grammar_is_likely_lark and
// convert_lark_to_ebnf): which text reads as Lark, the EBNF a Lark grammar becomes (line for line),
// the language XGrammar compiles from it over a vocabulary of single bytes, and the errors that
// name the line at fault.
#include "structured/lark_grammar.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "base/error.h"
#include "structured/output_spec.h"
#include "structured/structured_output.h"
#include "error_of.h"

namespace latent {
namespace {

using ::testing::HasSubstr;
using structured::GrammarIsLikelyLark;
using structured::LarkToEbnf;

using test::ErrorOf;

// vLLM's SQL grammar from its structured output tests (sample_sql_lark), which it expects to give
// "SELECT col_1 from table_1 where col_1 = 1" with the spaces taken out.
constexpr const char* kSqlLark = R"(
start: select_statement
select_statement: "SELECT" column "from" table "where" condition
column: "col_1" | "col_2"
table: "table_1" | "table_2"
condition: column "=" number
number: "1" | "2"
)";

// Token 0 is EOS; tokens 1..256 are the bytes 0..255, so a string is its bytes.
class ByteGrammar {
 public:
  ByteGrammar() : output_(Vocabulary()) {}

  // Whether the EBNF accepts exactly `text`: every byte, then EOS.
  bool Matches(const std::string& ebnf, const std::string& text) {
    auto c = output_.Grammar(ebnf)->Start();
    for (const char ch : text) {
      if (!c->Accept(static_cast<unsigned char>(ch) + 1)) return false;
    }
    return c->Accept(0) && c->IsTerminated();
  }

  structured::StructuredOutput& output() { return output_; }

 private:
  static structured::GrammarVocabulary Vocabulary() {
    structured::GrammarVocabulary v;
    v.token_bytes.push_back(std::nullopt);
    for (int byte = 0; byte < 256; ++byte) {
      v.token_bytes.push_back(std::string(1, static_cast<char>(byte)));
    }
    v.stop_token_ids = {0};
    return v;
  }

  structured::StructuredOutput output_;
};

TEST(LarkGrammar, LikelyLarkUnlessALineDefinesWithEbnfsAssign) {
  EXPECT_TRUE(GrammarIsLikelyLark("rule: 'abc'"));
  EXPECT_FALSE(GrammarIsLikelyLark("rule ::= 'abc'"));
  EXPECT_TRUE(GrammarIsLikelyLark(kSqlLark));
  EXPECT_FALSE(GrammarIsLikelyLark("# a Lark-looking comment: x\nroot ::= \"a\" # c ::= d"));
  // `::=` in a comment or a string defines nothing.
  EXPECT_TRUE(GrammarIsLikelyLark("// root ::= x\nstart: \"::=\"\n# y ::= z"));
  // Neither: reads as Lark, and its conversion names the line.
  EXPECT_TRUE(GrammarIsLikelyLark("hello world"));
}

TEST(LarkGrammar, VllmsSqlGrammarConvertsLineForLineFromStartAsRoot) {
  EXPECT_EQ(LarkToEbnf(kSqlLark), R"(
root ::= select_statement
select_statement ::= "SELECT" column "from" table "where" condition
column ::= "col_1" | "col_2"
table ::= "table_1" | "table_2"
condition ::= column "=" number
number ::= "1" | "2"
)");
  ByteGrammar g;
  const std::string ebnf = LarkToEbnf(kSqlLark);
  EXPECT_TRUE(g.Matches(ebnf, "SELECTcol_1fromtable_1wherecol_1=1"));
  EXPECT_TRUE(g.Matches(ebnf, "SELECTcol_2fromtable_1wherecol_1=2"));
  EXPECT_FALSE(g.Matches(ebnf, "SELECT col_1 from table_1 where col_1 = 1"));
  EXPECT_FALSE(g.Matches(ebnf, "SELECTcol_3fromtable_1wherecol_1=1"));
  EXPECT_FALSE(g.Matches(ebnf, "SELECTcol_1fromtable_1wherecol_1="));
}

TEST(LarkGrammar, FirstRuleIsTheRootWithoutStartAndSingleQuotesBecomeDouble) {
  // vLLM's own docstring example.
  EXPECT_EQ(LarkToEbnf("rule: 'hello'"), R"(root ::= "hello")");
  // Alternatives on `|` lines, ?/! prefixes and priorities dropped, comments of both kinds, a
  // `root` that is not the start renamed, quotes and backslashes kept literal.
  EXPECT_EQ(LarkToEbnf("?pair: root \"=\" value  // a pair\n"
                       "!value.2: 'it\\'s' # quoted\n"
                       "    | \"\\\"\\\\\"\n"
                       "\n"
                       "root: \"k\""),
            "root ::= root-lark \"=\" value\n"
            "value ::= \"it's\"\n"
            "| \"\\\"\\\\\"\n"
            "\n"
            "root-lark ::= \"k\"");
  ByteGrammar g;
  const std::string ebnf = LarkToEbnf("?pair: root \"=\" value\n!value: 'it\\'s'\n | \"\\\"\"\n"
                                      "root: \"k\"");
  EXPECT_TRUE(g.Matches(ebnf, "k=it's"));
  EXPECT_TRUE(g.Matches(ebnf, "k=\""));
  EXPECT_FALSE(g.Matches(ebnf, "k=k"));
}

// What vLLM's conversion passes to XGrammar unchanged, which XGrammar refuses or reads otherwise:
// [optional] (a character class to XGrammar), regexes, ranges, ~ repeats, case-insensitive
// strings, aliases, and %import common.
TEST(LarkGrammar, LarksOwnConstructsKeepTheirMeaning) {
  const std::string lark = R"(start: "[" [item ("," item)*] "]"
item: NUMBER -> num
    | WORD
    | "x"i
    | /q[0-9]+/
    | "a".."c"~2..3
    | "#"~2
%import common.NUMBER
%import common (WORD)
%ignore " "
)";
  const std::string ebnf = LarkToEbnf(lark);
  ByteGrammar g;
  for (const char* ok : {"[]", "[1]", "[1,2.5e3,7]", "[abc]", "[X,x]", "[q12]", "[ab,cba]",
                         "[##]"}) {
    EXPECT_TRUE(g.Matches(ebnf, ok)) << ok << "\n" << ebnf;
  }
  // %ignore is dropped as vLLM drops it: no filler between items.
  for (const char* bad :
       {"[", "[1 ,2]", "[1,]", "[q1a]", "[-1]", "[abcd1]", "[#]", "[###]", "[,]"}) {
    EXPECT_FALSE(g.Matches(ebnf, bad)) << bad << "\n" << ebnf;
  }
  // Escapes decoded, then written as XGrammar reads them.
  EXPECT_EQ(LarkToEbnf(R"(start: "\n\x41\u00e9" /\/a\d/)"),
            "root ::= \"\\u000aA\u00e9\" Regex(\"/a\\\\d\", flags=\"\")");
}

// The JSON grammar of vLLM's grammars documentation (Lark's own example): a `?value` start rule
// with aliased alternatives, [optional] lists and two imports from Lark's common library.
TEST(LarkGrammar, VllmDocsJsonGrammarMatchesJson) {
  const std::string ebnf = LarkToEbnf(R"(
    ?value: dict
          | list
          | string
          | SIGNED_NUMBER      -> number
          | "true"             -> true
          | "false"            -> false
          | "null"             -> null

    list : "[" [value ("," value)*] "]"

    dict : "{" [pair ("," pair)*] "}"
    pair : string ":" value

    string : ESCAPED_STRING

    %import common.ESCAPED_STRING
    %import common.SIGNED_NUMBER
)");
  ByteGrammar g;
  for (const char* ok : {R"({"a":[1,-2.5e3,true,null],"b":"x\"y","c":{}})", "[]", "-7", "\"\""}) {
    EXPECT_TRUE(g.Matches(ebnf, ok)) << ok << "\n" << ebnf;
  }
  for (const char* bad : {R"({"a":})", "[1,]", "tru", R"("a\")", R"({'a':1})", "1a"}) {
    EXPECT_FALSE(g.Matches(ebnf, bad)) << bad << "\n" << ebnf;
  }
}

TEST(LarkGrammar, EmptyAlternativesOptionalsAndRepeatsMatch) {
  ByteGrammar g;
  const std::string ebnf = LarkToEbnf("start: a b c\na: \"1\" |\nb:\n  | \"2\"\n  | \"3\"\n"
                                      "c: [\"4\"]* \"!\"");
  // b's first alternative is the empty one before its first `|`, as in Lark.
  for (const char* ok : {"2!", "12!", "3444!", "134!", "!", "1!", "44!"}) {
    EXPECT_TRUE(g.Matches(ebnf, ok)) << ok << "\n" << ebnf;
  }
  for (const char* bad : {"23!", "24", "11!"}) EXPECT_FALSE(g.Matches(ebnf, bad)) << bad;
  EXPECT_EQ(LarkToEbnf("start:\n  | \"a\"\n  | \"b\""), "root ::=\n \"\" | \"a\"\n| \"b\"");
}

// [x]~n..m is x from 0 to m times (XGrammar takes no quantifier after (x)?).
TEST(LarkGrammar, RepeatedOptionalIsZeroToItsMostTimes) {
  ByteGrammar g;
  const std::string exact = LarkToEbnf("start: [\"b\"]~2 \"c\"");
  for (const char* ok : {"c", "bc", "bbc"}) EXPECT_TRUE(g.Matches(exact, ok)) << ok << exact;
  EXPECT_FALSE(g.Matches(exact, "bbbc"));
  const std::string ranged = LarkToEbnf("start: [\"a\" | \"b\"]~2..3");
  for (const char* ok : {"", "a", "ab", "bab"}) EXPECT_TRUE(g.Matches(ranged, ok)) << ok << ranged;
  EXPECT_FALSE(g.Matches(ranged, "abab"));
}

// Lark's escapes in strings: \x \u \U \n \f \t \r, \\ and the quote; any other backslash is
// kept as written (Lark's eval_escaping), where Python's own escapes would make "\b" a backspace.
TEST(LarkGrammar, StringEscapesAreLarks) {
  ByteGrammar g;
  const std::string ebnf = LarkToEbnf(R"(start: "\b\a\v\0" "a\'b" "a\db" "\t\x41\\" 'q\'')");
  EXPECT_EQ(ebnf, R"(root ::= "\\b\\a\\v\\0" "a\\'b" "a\\db" "\u0009A\\" "q'")");
  EXPECT_TRUE(g.Matches(ebnf, "\\b\\a\\v\\0a\\'ba\\db\tA\\q'")) << ebnf;
  EXPECT_FALSE(g.Matches(ebnf, "\b\a\v" + std::string(1, '\0') + "a'badb\tA\\q'"));
  // Lark turns each pair of backslashes into one after decoding, hex escapes' included.
  EXPECT_TRUE(g.Matches(LarkToEbnf(R"(start: "\x5c\x5c")"), "\\"));
  // NUL is a character like any other.
  const std::string nul = LarkToEbnf(R"(start: "a\x00b" /c\x00/)");
  EXPECT_TRUE(g.Matches(nul, std::string("a\0bc\0", 5))) << nul;
  EXPECT_FALSE(g.Matches(nul, "abc"));
  const auto error = [](const std::string& lark) { return ErrorOf([&] { LarkToEbnf(lark); }); };
  EXPECT_EQ(error("start: \"abc\\"),
            "structured_outputs.grammar line 1: string not closed with \"");
  EXPECT_EQ(error("start: \"\\x4\""),
            "structured_outputs.grammar line 1: the escape \\x takes 2 hex digits, got \\x4\"");
  EXPECT_EQ(error("start: \"\\ud800\""),
            "structured_outputs.grammar line 1: the escape \\ud800 is a UTF-16 surrogate, which "
            "no text holds");
}

// Python's re reads these escapes otherwise than XGrammar (an anchor as a letter, \x41B as one
// code point): Lark's \x, \u and \U are decoded first, and the others are refused.
TEST(LarkGrammar, RegexEscapesKeepPythonsMeaningOrAreRefused) {
  ByteGrammar g;
  EXPECT_TRUE(g.Matches(LarkToEbnf(R"(start: /\x41B\u0043[\x44]/)"), "ABCD"));
  // Lark decodes \x2e to '.' before Python's re reads it: any character.
  EXPECT_TRUE(g.Matches(LarkToEbnf(R"(start: /a\x2e/)"), "ab"));
  // In a class, \b is a backspace, in Python as in XGrammar.
  EXPECT_TRUE(g.Matches(LarkToEbnf(R"(start: /[\b]\d\.\/\\/)"), "\b1./\\"));
  const auto error = [](const std::string& lark) { return ErrorOf([&] { LarkToEbnf(lark); }); };
  for (const char* anchor : {R"(\A)", R"(\Z)", R"(\z)", R"(\G)", R"(\b)", R"(\B)"}) {
    EXPECT_EQ(error(std::string("start: /a") + anchor + "/"),
              std::string("structured_outputs.grammar line 1: the escape ") + anchor + " in /a" +
                  anchor + "/ (an anchor or word boundary) is not supported");
  }
  EXPECT_EQ(error(R"(start: /(a)\1/)"),
            R"(structured_outputs.grammar line 1: the escape \1 in /(a)\1/ (an octal escape or a )"
            "backreference) is not supported");
  EXPECT_EQ(error(R"(start: /\e/)"),
            R"(structured_outputs.grammar line 1: the escape \e in /\e/ is not an escape of )"
            "Python's re");
  EXPECT_THAT(error(R"(start: /\N{DASH}/)"), HasSubstr("(a character by its name) is not"));
  EXPECT_THAT(error(R"(start: /\x4/)"), HasSubstr(R"(the escape \x in /\x4/ needs 2 hex digits)"));
}

// Valid Lark: signed priorities, and one name imported twice from the same place.
TEST(LarkGrammar, SignedPrioritiesAndRepeatedImportsAreLark) {
  ByteGrammar g;
  const std::string ebnf = LarkToEbnf("start.2: B C INT\nB.-1: \"b\"\nC.+1: \"c\"\n"
                                      "%import common.INT\n%import common (INT)");
  EXPECT_TRUE(g.Matches(ebnf, "bc12")) << ebnf;
  const std::string clash = "start: INT\n%import common.INT\n%import common.WORD -> INT";
  EXPECT_EQ(ErrorOf([&] { LarkToEbnf(clash); }),
            "structured_outputs.grammar line 3: 'INT' is defined twice (first on line 2)");
  EXPECT_EQ(ErrorOf([] { LarkToEbnf("start: \"a\"~-1"); }),
            "structured_outputs.grammar line 1: '~' takes an item before it and a count after it "
            "(item~3, item~1..3)");
}

// XGrammar's flag i folds ASCII only: other letters become a class of both their cases.
TEST(LarkGrammar, CaseInsensitiveStringsFoldLettersBeyondAscii) {
  ByteGrammar g;
  const std::string ebnf = LarkToEbnf("start: \"éΩя.ž\"i");
  for (const char* ok : {"éΩя.ž", "ÉωЯ.Ž", "éωя.ž"}) {
    EXPECT_TRUE(g.Matches(ebnf, ok)) << ok << "\n" << ebnf;
  }
  EXPECT_FALSE(g.Matches(ebnf, "eΩя.ž"));
  EXPECT_FALSE(g.Matches(ebnf, "éΩяxž"));
  EXPECT_TRUE(g.Matches(LarkToEbnf("start: \"ÿ-x\"i"), "Ÿ-X"));
}

TEST(LarkGrammar, BadGrammarsAreRefusedNamingTheLine) {
  const auto error = [](const std::string& lark) { return ErrorOf([&] { LarkToEbnf(lark); }); };
  // A rule used and never defined.
  EXPECT_EQ(error("start: colour \"!\"\n\ncolor: \"red\""),
            "structured_outputs.grammar line 1: rule 'colour' is not defined");
  EXPECT_EQ(error("start: a\na: \"x\"\n  | NUMBER"),
            "structured_outputs.grammar line 3: rule 'NUMBER' is not defined");
  // No rule to start from.
  for (const char* none : {"// only a comment\n%ignore \" \"", "   \n", "%import common.WS"}) {
    EXPECT_THAT(error(none), HasSubstr("structured_outputs.grammar has no `::=` (so it is read as "
                                       "Lark) and defines no Lark rule"))
        << none;
  }
  // Text that is neither Lark nor EBNF.
  EXPECT_EQ(error("hello world"),
            "structured_outputs.grammar line 1: expected a rule (`name: ...`), an alternative "
            "(`| ...`), %import or %ignore");
  EXPECT_THAT(error("start: \"a\"\n  \"b\""), HasSubstr("line 2: expected a rule"));
  EXPECT_EQ(error("start: a\na: \"x\"\na: \"y\""),
            "structured_outputs.grammar line 3: 'a' is defined twice (first on line 2)");
  EXPECT_EQ(error("| \"a\"\nstart: \"b\""),
            "structured_outputs.grammar line 1: '|' continues no rule");
  EXPECT_EQ(error("start: (\"a\"\n  | \"b\""),
            "structured_outputs.grammar line 1: '(' is not closed");
  EXPECT_EQ(error("start: \"a\"]"), "structured_outputs.grammar line 1: ']' closes no '['");
  EXPECT_EQ(error("start: \"a"), "structured_outputs.grammar line 1: string not closed with \"");
  EXPECT_EQ(error("start: /a/m"),
            "structured_outputs.grammar line 1: regular expression flag 'm' is not supported");
  EXPECT_EQ(error("start: sep{\"a\"}\nsep{x}: x"),
            "structured_outputs.grammar line 2: rule templates ('sep{...}') are not supported");
  EXPECT_EQ(error("start: A\n%declare A"),
            "structured_outputs.grammar line 2: %declare is not supported (only %import common "
            "and %ignore are)");
  EXPECT_THAT(error("start: X\n%import .mine.X"),
              HasSubstr("line 2: only Lark's common library can be imported"));
  EXPECT_EQ(error("start: X\n%import common.X"),
            "structured_outputs.grammar line 2: common.X is not in Lark's common library");
  EXPECT_EQ(error("start: \"b\"..\"a\""),
            "structured_outputs.grammar line 1: a range \"a\"..\"z\" takes one character on each "
            "side, the first not above the second");
  EXPECT_EQ(error("start: \"a\"~12345678901"),
            "structured_outputs.grammar line 1: '~' counts up to 999999999, got 12345678901");
  EXPECT_EQ(error("start: \"a\" ; \"b\""),
            "structured_outputs.grammar line 1: unexpected character ';'");
}

// A regex XGrammar cannot take (the one thing the conversion hands it unchecked) is named with
// the rule that holds it. Names XGrammar reads as its macros are renamed.
TEST(LarkGrammar, XGrammarsRegexErrorsNameTheRuleAndMacroNamesAreRenamed) {
  ByteGrammar g;
  EXPECT_THAT(ErrorOf([&] { g.output().Grammar(LarkToEbnf("start: a\n\na: /(?<=x)y/")); }),
              HasSubstr("rule a with regex (?<=x)y"));
  const std::string ebnf = LarkToEbnf("start: Regex Token\nRegex: \"r\"\nToken: /t/");
  EXPECT_EQ(ebnf, "root ::= Regex-lark Token-lark\nRegex-lark ::= \"r\"\n"
                  "Token-lark ::= Regex(\"t\", flags=\"\")");
  EXPECT_TRUE(g.Matches(ebnf, "rt"));
}

TEST(LarkGrammar, StructuredOutputsGrammarTakesLarkAsVllmDoes) {
  const auto parse = [](const std::string& grammar) {
    return structured::ParseStructuredOutputs(nlohmann::ordered_json{{"grammar", grammar}});
  };
  structured::OutputSpec spec = parse(kSqlLark);
  EXPECT_EQ(spec.kind, structured::OutputSpec::Kind::kGrammar);
  EXPECT_EQ(spec.text, LarkToEbnf(kSqlLark));
  // EBNF is kept as it is, and its errors stay XGrammar's.
  EXPECT_EQ(parse("root ::= \"a\" | b\nb ::= \"c\"").text, "root ::= \"a\" | b\nb ::= \"c\"");
  EXPECT_EQ(ErrorOf([&] { parse("start: a"); }),
            "structured_outputs.grammar line 1: rule 'a' is not defined");
  EXPECT_THAT(ErrorOf([&] { parse("hello world"); }),
              HasSubstr("structured_outputs.grammar line 1: expected a rule"));
}

}  // namespace
}  // namespace latent
