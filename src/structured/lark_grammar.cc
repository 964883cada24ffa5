#include "structured/lark_grammar.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "base/error.h"

namespace latent::structured {
namespace {

// Lark's common library (lark/grammars/common.lark) in XGrammar EBNF, for `%import common.X`.
// The names carry a `common-` prefix, which no Lark name can have, so they never meet the
// grammar's own.
const std::map<std::string, std::string, std::less<>>& CommonLibrary() {
  static const std::map<std::string, std::string, std::less<>> library = {
      {"DIGIT", R"([0-9])"},
      {"HEXDIGIT", R"([a-fA-F0-9])"},
      {"INT", R"([0-9]+)"},
      {"SIGNED_INT", R"([+\-]? common-INT)"},
      {"DECIMAL", R"(common-INT "." common-INT? | "." common-INT)"},
      {"_EXP", R"([eE] common-SIGNED_INT)"},
      {"FLOAT", R"(common-INT common-_EXP | common-DECIMAL common-_EXP?)"},
      {"SIGNED_FLOAT", R"([+\-]? common-FLOAT)"},
      {"NUMBER", R"(common-FLOAT | common-INT)"},
      {"SIGNED_NUMBER", R"([+\-]? common-NUMBER)"},
      // Lark's /.*?/ up to the first quote after an even run of backslashes, on one line.
      {"ESCAPED_STRING", R"("\"" ([^"\\\n] | "\\" [^\n])* "\"")"},
      {"LCASE_LETTER", R"([a-z])"},
      {"UCASE_LETTER", R"([A-Z])"},
      {"LETTER", R"([a-zA-Z])"},
      {"WORD", R"([a-zA-Z]+)"},
      {"CNAME", R"([a-zA-Z_] [a-zA-Z0-9_]*)"},
      {"WS_INLINE", R"([ \t]+)"},
      {"WS", R"([ \t\u000c\r\n]+)"},
      {"CR", R"("\r")"},
      {"LF", R"("\n")"},
      {"NEWLINE", R"(("\r"? "\n")+)"},
      {"SH_COMMENT", R"("#" [^\n]*)"},
      {"CPP_COMMENT", R"("//" [^\n]*)"},
      {"SQL_COMMENT", R"("--" [^\n]*)"},
      {"C_COMMENT", R"("/*" ([^*] | "*"+ [^*/])* "*"+ "/")"},
  };
  return library;
}

// One lexical item of a Lark line.
struct Token {
  enum class Kind : uint8_t { kName, kString, kRegex, kNumber, kOp, kDirective };
  Kind kind;
  std::string text;    // kName, kNumber, kOp ("|", "..", "->", ...), kDirective (without '%');
                       // kString: its bytes, escapes decoded; kRegex: the pattern.
  std::string flags;   // kString: "i" or ""; kRegex: its flags.
};

bool IsNameStart(char c) { return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The code points of UTF-8 `text` (a byte that starts no valid sequence counts as one).
std::vector<uint32_t> CodePoints(std::string_view text) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const size_t len = b < 0x80        ? 1
                       : (b >> 5) == 6  ? 2
                       : (b >> 4) == 14 ? 3
                       : (b >> 3) == 30 ? 4
                                        : 1;
    if (len == 1 || i + len > text.size()) {
      out.push_back(b);
      ++i;
      continue;
    }
    uint32_t cp = b & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

// `text` as an XGrammar string literal: quotes and backslashes escaped, control characters as
// \u with its fixed 4 digits (XGrammar's \x would take every hex digit that follows).
std::string EbnfString(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", byte);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// One code point inside an XGrammar character class.
std::string ClassChar(uint32_t cp) {
  if (cp == '\\' || cp == ']' || cp == '[' || cp == '^' || cp == '-') {
    return std::string("\\") + static_cast<char>(cp);
  }
  if (cp < 0x20 || cp == 0x7f) {
    char escaped[8];
    std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(cp));
    return escaped;
  }
  std::string out;
  AppendUtf8(cp, &out);
  return out;
}

class Converter {
 public:
  explicit Converter(std::string_view lark) {
    size_t begin = 0;
    while (begin <= lark.size()) {
      size_t end = lark.find('\n', begin);
      if (end == std::string_view::npos) end = lark.size();
      std::string_view line = lark.substr(begin, end - begin);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      lines_.push_back(line);
      begin = end + 1;
    }
  }

  std::string Run() {
    std::vector<std::vector<Token>> tokens;
    for (size_t i = 0; i < lines_.size(); ++i) tokens.push_back(Tokenize(i + 1, lines_[i]));
    CollectDefinitions(tokens);
    out_.assign(lines_.size(), "");
    for (size_t i = 0; i < lines_.size(); ++i) ConvertLine(i + 1, tokens[i], &out_[i]);
    EndRule();
    for (const auto& [name, line] : references_) {
      if (names_.count(name) == 0) Fail(Where(line), "rule '", name, "' is not defined");
    }
    std::string ebnf;
    for (size_t i = 0; i < out_.size(); ++i) ebnf += (i ? "\n" : "") + out_[i];
    if (!imports_.empty()) {
      for (const auto& [name, body] : CommonLibrary()) ebnf += "\ncommon-" + name + " ::= " + body;
    }
    return ebnf;
  }

 private:
  static std::string Where(size_t line) {
    return StrCat("structured_outputs.grammar line ", line, ": ");
  }

  // ---- Lexing ----

  std::vector<Token> Tokenize(size_t number, std::string_view line) {
    std::vector<Token> out;
    size_t i = 0;
    const auto at = [&](size_t k) { return k < line.size() ? line[k] : '\0'; };
    while (i < line.size()) {
      const char c = line[i];
      if (c == ' ' || c == '\t') {
        ++i;
      } else if (c == '#' || (c == '/' && at(i + 1) == '/')) {
        break;  // A comment to the end of the line (vLLM takes `#` as well as Lark's `//`).
      } else if (c == '"' || c == '\'') {
        Token t{Token::Kind::kString, String(number, line, &i), ""};
        if (at(i) == 'i' && !IsNameChar(at(i + 1))) {
          t.flags = "i";
          ++i;
        }
        out.push_back(std::move(t));
      } else if (c == '/') {
        out.push_back(Regex(number, line, &i));
      } else if (IsNameStart(c)) {
        const size_t start = i;
        while (IsNameChar(at(i))) ++i;
        out.push_back({Token::Kind::kName, std::string(line.substr(start, i - start)), ""});
      } else if (IsDigit(c)) {
        const size_t start = i;
        while (IsDigit(at(i))) ++i;
        out.push_back({Token::Kind::kNumber, std::string(line.substr(start, i - start)), ""});
      } else if (c == '%') {
        const size_t start = ++i;
        while (IsNameChar(at(i))) ++i;
        out.push_back({Token::Kind::kDirective, std::string(line.substr(start, i - start)), ""});
      } else if ((c == '.' && at(i + 1) == '.') || (c == '-' && at(i + 1) == '>')) {
        out.push_back({Token::Kind::kOp, std::string(line.substr(i, 2)), ""});
        i += 2;
      } else if (std::string_view("|()[]*+?~:!.{},").find(c) != std::string_view::npos) {
        out.push_back({Token::Kind::kOp, std::string(1, c), ""});
        ++i;
      } else {
        Fail(Where(number), "unexpected character '", std::string(1, c), "'");
      }
    }
    return out;
  }

  // A quoted string from line[*i] (its quote), escapes decoded as Python decodes them.
  static std::string String(size_t number, std::string_view line, size_t* i) {
    const char quote = line[*i];
    std::string out;
    size_t k = *i + 1;
    const auto hex = [&](size_t digits) {
      if (k + digits > line.size()) Fail(Where(number), "a \\x, \\u or \\U escape is cut short");
      uint32_t cp = 0;
      for (size_t d = 0; d < digits; ++d) {
        const char h = line[k + d];
        const int v = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                                           : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (v < 0) Fail(Where(number), "'", std::string(1, h), "' is not a hex digit in an escape");
        cp = cp * 16 + static_cast<uint32_t>(v);
      }
      if (cp > 0x10FFFF) Fail(Where(number), "escape beyond U+10FFFF");
      k += digits;
      AppendUtf8(cp, &out);
    };
    while (true) {
      if (k >= line.size()) Fail(Where(number), "string not closed with ", std::string(1, quote));
      const char c = line[k];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++k;
        continue;
      }
      const char e = k + 1 < line.size() ? line[k + 1] : '\0';
      k += 2;
      switch (e) {
        case '\\': case '"': case '\'': out += e; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case '0': out += '\0'; break;
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          Fail(Where(number), "unknown escape \\", std::string(1, e), " in a string");
      }
    }
    *i = k + 1;
    return out;
  }

  // A /regex/flags from line[*i] (its slash). `\/` stands for `/`.
  static Token Regex(size_t number, std::string_view line, size_t* i) {
    Token t{Token::Kind::kRegex, "", ""};
    size_t k = *i + 1;
    while (true) {
      if (k >= line.size()) Fail(Where(number), "regular expression not closed with /");
      if (line[k] == '/') break;
      if (line[k] == '\\' && k + 1 < line.size()) {
        if (line[k + 1] != '/') t.text += '\\';
        t.text += line[k + 1];
        k += 2;
      } else {
        t.text += line[k++];
      }
    }
    ++k;
    while (k < line.size() && IsNameChar(line[k])) {
      const char f = line[k++];
      if (f == 'i' || f == 's') {
        if (t.flags.find(f) == std::string::npos) t.flags += f;
      } else if (f != 'u') {  // XGrammar's regexes are over code points already.
        Fail(Where(number), "regular expression flag '", std::string(1, f), "' is not supported");
      }
    }
    *i = k;
    return t;
  }

  // ---- Definitions ----

  // Where a line's definition's name is (the token after a `?`/`!` prefix), or nullopt when the
  // line does not define a rule.
  static std::optional<size_t> DefinitionName(const std::vector<Token>& t) {
    size_t k = 0;
    if (k < t.size() && t[k].kind == Token::Kind::kOp && (t[k].text == "?" || t[k].text == "!")) {
      ++k;
    }
    if (k >= t.size() || t[k].kind != Token::Kind::kName) return std::nullopt;
    size_t after = k + 1;
    if (after < t.size() && t[after].kind == Token::Kind::kOp && t[after].text == "{") {
      return k;  // A template: refused where the line is converted.
    }
    if (after + 1 < t.size() && t[after].text == "." && t[after + 1].kind == Token::Kind::kNumber) {
      after += 2;  // A priority.
    }
    if (after < t.size() && t[after].kind == Token::Kind::kOp && t[after].text == ":") return k;
    return std::nullopt;
  }

  void CollectDefinitions(const std::vector<std::vector<Token>>& tokens) {
    std::map<std::string, size_t> defined;  // name -> line
    std::string first;
    for (size_t i = 0; i < tokens.size(); ++i) {
      const std::vector<Token>& t = tokens[i];
      const auto define = [&](const std::string& name) {
        auto [it, fresh] = defined.emplace(name, i + 1);
        if (!fresh) {
          Fail(Where(i + 1), "'", name, "' is defined twice (first on line ", it->second, ")");
        }
      };
      if (!t.empty() && t[0].kind == Token::Kind::kDirective && t[0].text == "import") {
        for (const auto& [name, target] : Imports(i + 1, t)) {
          define(name);
          imports_[name] = target;
        }
        continue;
      }
      const std::optional<size_t> k = DefinitionName(t);
      if (!k) continue;
      if (t[*k + 1].text == "{") {
        Fail(Where(i + 1), "rule templates ('", t[*k].text, "{...}') are not supported");
      }
      define(t[*k].text);
      if (first.empty()) first = t[*k].text;
    }
    // XGrammar reads these names as its macros (Regex(...)); `-lark` is a suffix no Lark name has.
    static const std::set<std::string, std::less<>> kMacros = {
        "TagDispatch", "Token", "ExcludeToken", "TokenTagDispatch", "Regex", "Substring"};
    for (const auto& [name, line] : defined) {
      names_[name] = kMacros.count(name) ? name + "-lark" : name;
    }
    if (first.empty()) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        if (!tokens[i].empty() && tokens[i][0].kind != Token::Kind::kDirective) {
          Fail(Where(i + 1), "expected a rule (`name: ...`), an alternative (`| ...`), %import ",
               "or %ignore");
        }
      }
      Fail("structured_outputs.grammar has no `::=` (so it is read as Lark) and defines no Lark ",
           "rule: it needs one such as `start: \"a\" | \"b\"`");
    }
    // The start rule: `start`, or (as vLLM does) the first rule.
    const std::string start = defined.count("start") ? "start" : first;
    if (names_.count("root") && start != "root") names_["root"] = "root-lark";
    names_[start] = "root";
    for (const auto& [name, target] : imports_) names_[name] = "common-" + target;
  }

  // The names an `%import common...` line binds, each to its name in the common library.
  static std::vector<std::pair<std::string, std::string>> Imports(size_t number,
                                                                  const std::vector<Token>& t) {
    const auto refuse = [&]() {
      Fail(Where(number), "only Lark's common library can be imported: `%import common.NAME`, ",
           "`%import common.NAME -> ALIAS` or `%import common (NAME, ...)`");
    };
    const auto is = [&](size_t k, Token::Kind kind, std::string_view text = {}) {
      return k < t.size() && t[k].kind == kind && (text.empty() || t[k].text == text);
    };
    if (!is(1, Token::Kind::kName, "common")) refuse();
    std::vector<std::pair<std::string, std::string>> out;
    const auto bind = [&](const std::string& target, const std::string& name) {
      if (CommonLibrary().count(target) == 0) {
        Fail(Where(number), "common.", target, " is not in Lark's common library");
      }
      out.emplace_back(name, target);
    };
    if (is(2, Token::Kind::kOp, ".") && is(3, Token::Kind::kName)) {
      if (t.size() == 4) {
        bind(t[3].text, t[3].text);
      } else if (t.size() == 6 && is(4, Token::Kind::kOp, "->") && is(5, Token::Kind::kName)) {
        bind(t[3].text, t[5].text);
      } else {
        refuse();
      }
    } else if (is(2, Token::Kind::kOp, "(") && is(t.size() - 1, Token::Kind::kOp, ")")) {
      for (size_t k = 3; k + 1 < t.size(); k += 2) {
        if (!is(k, Token::Kind::kName)) refuse();
        if (k + 2 < t.size() && !is(k + 1, Token::Kind::kOp, ",")) refuse();
        bind(t[k].text, t[k].text);
      }
      if (out.empty()) refuse();
    } else {
      refuse();
    }
    return out;
  }

  // ---- Conversion, line by line ----

  // Converts line `number`'s tokens `t` into `out` (line number - 1 of the EBNF).
  void ConvertLine(size_t number, const std::vector<Token>& t, std::string* out_line) {
    if (t.empty()) return;
    if (t[0].kind == Token::Kind::kDirective) {
      const std::string& d = t[0].text;
      if (d == "ignore" || d == "import") {
        // %ignore: dropped as vLLM drops it (%import: bound in CollectDefinitions). Either ends the
        // rule above, so a `|` line after it continues no rule, as in Lark.
        EndRule();
        return;
      }
      Fail(Where(number), "%", d, " is not supported (only %import common and %ignore are)");
    }
    std::string& out = *out_line;
    size_t k = 0;
    if (t[0].kind == Token::Kind::kOp && t[0].text == "|") {
      if (!in_rule_) Fail(Where(number), "'|' continues no rule");
      k = 1;
      if (rule_is_empty_) {
        // `name:` with its alternatives on the lines below: the first `|` opens the first one.
      } else {
        CloseAlternative(&out);
        out += "|";
        alternative_empty_ = true;
      }
    } else if (const std::optional<size_t> name = DefinitionName(t)) {
      EndRule();
      in_rule_ = true;
      rule_is_empty_ = true;
      alternative_empty_ = true;
      out += names_.at(t[*name].text) + " ::=";
      k = *name + 1;
      if (t[k].text == ".") k += 2;
      k += 1;  // ':'
    } else {
      Fail(Where(number), "expected a rule (`name: ...`), an alternative (`| ...`), %import or ",
           "%ignore");
    }
    for (; k < t.size(); ++k) ConvertToken(number, t, &k, &out);
    rule_last_line_ = number;
  }

  // Ends the rule being converted, if any: an empty last alternative is the empty string, and
  // its brackets must be closed (on the rule's last line).
  void EndRule() {
    if (!in_rule_) return;
    if (!open_.empty()) {
      Fail(Where(open_.back().second), "'", open_.back().first, "' is not closed");
    }
    CloseAlternative(&out_[rule_last_line_ - 1]);
    in_rule_ = false;
  }

  void CloseAlternative(std::string* out) {
    if (alternative_empty_) *out += " \"\"";
  }

  void Item(std::string* out, const std::string& text) {
    *out += " " + text;
    after_optional_ = false;
    alternative_empty_ = false;
    rule_is_empty_ = false;
  }

  void ConvertToken(size_t number, const std::vector<Token>& t, size_t* k, std::string* out) {
    const Token& tok = t[*k];
    const auto next_is = [&](std::string_view op) {
      return *k + 1 < t.size() && t[*k + 1].kind == Token::Kind::kOp && t[*k + 1].text == op;
    };
    switch (tok.kind) {
      case Token::Kind::kName:
        references_.emplace_back(tok.text, number);
        Item(out, names_.count(tok.text) ? names_.at(tok.text) : tok.text);
        return;
      case Token::Kind::kString:
        if (next_is("..")) {
          if (*k + 2 >= t.size() || t[*k + 2].kind != Token::Kind::kString) {
            Fail(Where(number), "'..' needs a string after it (\"a\"..\"z\")");
          }
          const std::vector<uint32_t> lo = CodePoints(tok.text), hi = CodePoints(t[*k + 2].text);
          if (lo.size() != 1 || hi.size() != 1 || lo[0] > hi[0]) {
            Fail(Where(number), "a range \"a\"..\"z\" takes one character on each side, the ",
                 "first not above the second");
          }
          Item(out, "[" + ClassChar(lo[0]) + "-" + ClassChar(hi[0]) + "]");
          *k += 2;
        } else if (tok.flags == "i") {
          constexpr std::string_view kSpecial = "\\^$.|?*+()[]{}";  // to a regex
          std::string pattern;
          for (const char c : tok.text) {
            if (kSpecial.find(c) != std::string_view::npos) pattern += '\\';
            pattern += c;
          }
          Item(out, "Regex(" + EbnfString(pattern) + ", flags=\"i\")");
        } else {
          Item(out, EbnfString(tok.text));
        }
        return;
      case Token::Kind::kRegex:
        Item(out, "Regex(" + EbnfString(tok.text) + ", flags=\"" + tok.flags + "\")");
        return;
      case Token::Kind::kNumber:
      case Token::Kind::kDirective:
        Fail(Where(number), "unexpected '", tok.kind == Token::Kind::kDirective ? "%" : "",
             tok.text, "'");
      case Token::Kind::kOp:
        break;
    }
    const std::string& op = tok.text;
    const bool after_optional = after_optional_;
    after_optional_ = false;
    if (op == "|") {
      CloseAlternative(out);
      *out += " |";
      alternative_empty_ = true;
    } else if (op == "(" || op == "[") {
      open_.emplace_back(op, number);
      *out += " (";
      alternative_empty_ = true;
    } else if (op == ")" || op == "]") {
      const std::string opener = op == ")" ? "(" : "[";
      if (open_.empty() || open_.back().first != opener) {
        Fail(Where(number), "'", op, "' closes no '", opener, "'");
      }
      open_.pop_back();
      CloseAlternative(out);
      *out += op == ")" ? ")" : ")?";
      alternative_empty_ = false;
      after_optional_ = op == "]";
      return;
    } else if (op == "*" || op == "+" || op == "?") {
      if (alternative_empty_) Fail(Where(number), "'", op, "' follows nothing");
      if (after_optional) {
        // [x]* and [x]+ are (x)*, [x]? is [x]: XGrammar takes one quantifier to an item.
        if (op != "?") out->back() = '*';
      } else {
        *out += op;
      }
    } else if (op == "~") {
      const auto number_at = [&](size_t j) {
        if (j >= t.size() || t[j].kind != Token::Kind::kNumber) return false;
        if (t[j].text.size() > 9) {
          Fail(Where(number), "'~' counts up to 999999999, got ", t[j].text);
        }
        return true;
      };
      if (alternative_empty_ || !number_at(*k + 1)) {
        Fail(Where(number), "'~' takes an item before it and a count after it (item~3, item~1..3)");
      }
      std::string range = "{" + t[*k + 1].text;
      *k += 1;
      if (next_is("..")) {
        if (!number_at(*k + 2)) Fail(Where(number), "'~n..' needs a number after '..'");
        if (std::stoull(t[*k + 2].text) < std::stoull(range.substr(1))) {
          Fail(Where(number), "'~", range.substr(1), "..", t[*k + 2].text, "' counts down");
        }
        range += "," + t[*k + 2].text;
        *k += 2;
      }
      *out += range + "}";
    } else if (op == "->") {
      // An alias names the parse tree's node; the language is the same without it.
      if (*k + 1 >= t.size() || t[*k + 1].kind != Token::Kind::kName) {
        Fail(Where(number), "'->' needs a name after it");
      }
      *k += 1;
    } else {
      Fail(Where(number), "unexpected '", op, "'");
    }
  }

  std::vector<std::string_view> lines_;
  std::map<std::string, std::string> names_;    // Lark name -> EBNF name, for every defined name.
  std::map<std::string, std::string> imports_;  // Imported name -> its common library name.
  std::vector<std::pair<std::string, size_t>> references_;  // (name, line) in order of use.
  std::vector<std::pair<std::string, size_t>> open_;        // Open brackets: ("(" or "[", line).
  bool in_rule_ = false;
  bool rule_is_empty_ = true;       // No item or '|' of the rule yet.
  bool alternative_empty_ = true;   // No item in the alternative being converted yet.
  bool after_optional_ = false;     // The last thing converted was a Lark [optional].
  size_t rule_last_line_ = 0;       // The last line (from 1) of the rule being converted.
  std::vector<std::string> out_;    // The EBNF, line by line.
};

}  // namespace

bool GrammarIsLikelyLark(std::string_view grammar) {
  size_t begin = 0;
  while (begin <= grammar.size()) {
    size_t end = grammar.find('\n', begin);
    if (end == std::string_view::npos) end = grammar.size();
    const std::string_view line = grammar.substr(begin, end - begin);
    const size_t define = line.find("::=");
    const size_t before =
        std::min({line.find('#'), line.find("//"), line.find('"'), line.find('\'')});
    if (define != std::string_view::npos && define < before) return false;
    begin = end + 1;
  }
  return true;
}

std::string LarkToEbnf(std::string_view lark) { return Converter(lark).Run(); }

}  // namespace latent::structured
