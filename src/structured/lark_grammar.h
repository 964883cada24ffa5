// Grammars written in Lark (https://lark-parser.readthedocs.io/en/latest/grammar.html) for
// structured_outputs.grammar, as vLLM's xgrammar backend takes them: a grammar is read as Lark
// when no line of it defines a rule with `::=` (vLLM's grammar_is_likely_lark, except that a
// `::=` inside a string or a comment does not count here), and is converted
// to XGrammar's EBNF (vLLM's convert_lark_to_ebnf) before it is compiled.
#pragma once

#include <string>
#include <string_view>

namespace latent::structured {

// Whether `grammar` is to be read as Lark: no line holds `::=` before its first comment (`#`,
// `//`) or quote. Text that is neither EBNF nor Lark reads as Lark, and its conversion fails
// naming the line; text with a `::=` is EBNF, and XGrammar's error names what is wrong.
bool GrammarIsLikelyLark(std::string_view grammar);

// XGrammar EBNF with the language of the Lark grammar `lark`, from its rule `start` or, as vLLM
// does when there is none, its first rule. Line N of the result holds what line N of `lark`
// defined (so an XGrammar error's line is the Lark line); the start rule is named `root` (a Lark
// rule named `root` that is not the start is renamed `root-lark`).
//
// Converted: `name: ...` rules and terminals with `?`/`!` prefixes and `.N` priorities (dropped),
// continuation lines starting with `|` (after `name:` alone on its line, the first `|` follows an
// empty alternative, as in Lark), "double" and 'single' quoted strings with Lark's escapes (\x
// \u \U \n \f \t \r \\ and the quote; any other backslash is kept as written), "x"i (letters
// outside ASCII as a class of their two cases), "a".."z", /regex/flags (i, s, u) as XGrammar's
// Regex() (Lark's \x \u \U decoded first), [optional] as (...)?, item~n and item~n..m as {n} and
// {n,m} ([x]~n..m as (x){0,m}), `-> alias` (dropped: it only names a parse tree node), `//` and
// `#` comments. `%ignore` lines are dropped as vLLM drops them: the ignored text is not allowed
// between items, so the output is one of the grammar's strings without the ignored filler.
// `%import common.X` brings X from Lark's common library (INT, NUMBER, WS, CNAME, ...).
//
// Throws latent::Error, its message starting "structured_outputs.grammar", naming the line for:
// no rule at all, a line that is none of the above, a rule defined twice, a reference to a rule
// that is not defined, a construct XGrammar cannot take (templates, %declare, regex flags m, x,
// l; in a regex the anchors and word boundaries \A \Z \z \G \b \B, octal escapes,
// backreferences, \N{...} and letters that are no escape of Python's re), a bad \x \u \U
// escape, unbalanced brackets.
std::string LarkToEbnf(std::string_view lark);

}  // namespace latent::structured
