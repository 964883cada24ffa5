#include "structured/lark_grammar.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "base/error.h"
#include "structured/output_spec.h"

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
int HexValue(char h) {
  return IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                              : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
}

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

// Letters outside ASCII and their other case: blocks of code points `first` to `last` whose lower
// case is `to_lower` away (every other one from `first` where the cases alternate). Latin-1,
// Latin Extended-A and Additional, Greek, Cyrillic, Armenian and fullwidth Latin; letters whose
// case maps to more than one code point (ß, İ) or to ASCII are left out.
struct CaseBlock {
  uint32_t first, last;
  int32_t to_lower;
  bool alternating;
};
constexpr CaseBlock kCaseBlocks[] = {
    {0x00C0, 0x00D6, 32, false}, {0x00D8, 0x00DE, 32, false}, {0x0100, 0x012E, 1, true},
    {0x0132, 0x0136, 1, true},   {0x0139, 0x0147, 1, true},   {0x014A, 0x0176, 1, true},
    {0x0178, 0x0178, -121, false}, {0x0179, 0x017D, 1, true}, {0x0386, 0x0386, 38, false},
    {0x0388, 0x038A, 37, false}, {0x038C, 0x038C, 64, false}, {0x038E, 0x038F, 63, false},
    {0x0391, 0x03A1, 32, false}, {0x03A3, 0x03AB, 32, false}, {0x0400, 0x040F, 80, false},
    {0x0410, 0x042F, 32, false}, {0x0460, 0x0480, 1, true},   {0x048A, 0x04BE, 1, true},
    {0x04C1, 0x04CD, 1, true},   {0x04D0, 0x04FE, 1, true},   {0x0531, 0x0556, 48, false},
    {0x1E00, 0x1E94, 1, true},   {0x1EA0, 0x1EFE, 1, true},   {0xFF21, 0xFF3A, 32, false},
};

// `cp` and its other case, if kCaseBlocks has it.
std::vector<uint32_t> CaseVariants(uint32_t cp) {
  const auto upper_in = [](const CaseBlock& b, int64_t upper) {
    return upper >= b.first && upper <= b.last && (!b.alternating || (upper - b.first) % 2 == 0);
  };
  for (const CaseBlock& b : kCaseBlocks) {
    if (upper_in(b, cp)) return {cp, static_cast<uint32_t>(int64_t{cp} + b.to_lower)};
    if (upper_in(b, int64_t{cp} - b.to_lower)) {
      return {static_cast<uint32_t>(int64_t{cp} - b.to_lower), cp};
    }
  }
  return {cp};
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
      } else if (IsDigit(c) || (c == '-' && IsDigit(at(i + 1)))) {
        const size_t start = i++;  // A '-' signs a priority (`B.-1: ...`).
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

  // A quoted string from line[*i] (its quote), escapes decoded as Lark's eval_escaping decodes
  // them: \x, \u, \U, \n, \f, \t and \r stand for their characters, \\ for a backslash and \" (and
  // in a 'single' quoted string, which Lark has not, \') for the quote; any other backslash stays
  // as written, so "\d" is the two characters \d and "\b" is no backspace.
  static std::string String(size_t number, std::string_view line, size_t* i) {
    const char quote = line[*i];
    // Lark's text before its last step: \\ is two backslashes here, and every pair of
    // backslashes becomes one at the end (so "\x5c\x5c" is one backslash in Lark as well).
    std::string out;
    size_t k = *i + 1;
    const auto hex = [&](char e, size_t digits) {
      const std::string_view escape = line.substr(k - 2, digits + 2);
      if (k + digits > line.size()) Fail(Where(number), "the escape ", escape, " is cut short");
      uint32_t cp = 0;
      for (size_t d = 0; d < digits; ++d) {
        const int v = HexValue(line[k + d]);
        if (v < 0) Fail(Where(number), "the escape \\", std::string(1, e), " takes ", digits,
                        " hex digits, got ", escape);
        cp = cp * 16 + static_cast<uint32_t>(v);
      }
      if (cp > 0x10FFFF) Fail(Where(number), "the escape ", escape, " is beyond U+10FFFF");
      if (cp >= 0xD800 && cp <= 0xDFFF) {
        Fail(Where(number), "the escape ", escape, " is a UTF-16 surrogate, which no text holds");
      }
      k += digits;
      AppendUtf8(cp, &out);
    };
    while (true) {
      if (k >= line.size()) Fail(Where(number), "string not closed with ", std::string(1, quote));
      const char c = line[k];
      if (c == quote) break;
      if (c != '\\' || k + 1 >= line.size()) {
        out += c;
        ++k;
        continue;
      }
      const char e = line[k + 1];
      k += 2;
      switch (e) {
        case '\\': out += "\\\\"; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'f': out += '\f'; break;
        case 'x': hex(e, 2); break;
        case 'u': hex(e, 4); break;
        case 'U': hex(e, 8); break;
        default:
          if (e == '"' || e == quote) {
            out += e;
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    *i = k + 1;
    std::string collapsed;
    for (size_t j = 0; j < out.size(); ++j) {
      collapsed += out[j];
      if (out[j] == '\\' && j + 1 < out.size() && out[j + 1] == '\\') ++j;
    }
    return collapsed;
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
    t.text = RegexForXGrammar(number, t.text);
    *i = k;
    return t;
  }

  // The pattern of a /regex/ as XGrammar's Regex() must read it to keep its meaning in Lark.
  // Lark decodes \x, \u and \U before Python's re sees the pattern (so /\x2e/ is `.`, any
  // character), where XGrammar's \x would take every hex digit that follows. Escapes Python's re
  // reads otherwise than XGrammar are refused: anchors and word boundaries (\A \Z \z \G \b
  // \B), which XGrammar takes for letters or cannot take, octal escapes and backreferences, and
  // letters that are no escape to Python's re (Lark refuses those; XGrammar reads \e and \c as
  // escapes and the others as the letter).
  static std::string RegexForXGrammar(size_t number, std::string_view p) {
    const auto refuse = [&](std::string_view escape, std::string_view why) {
      Fail(Where(number), "the escape ", escape, " in /", p, "/ ", why);
    };
    std::string out;
    bool in_class = false;
    size_t class_first = 0;  // Where the class's first member is: a ']' there is a member.
    for (size_t k = 0; k < p.size();) {
      const char c = p[k];
      if (c != '\\') {
        if (!in_class && c == '[') {
          in_class = true;
          class_first = k + 1 + (k + 1 < p.size() && p[k + 1] == '^');
        } else if (in_class && c == ']' && k != class_first) {
          in_class = false;
        }
        out += c;
        ++k;
        continue;
      }
      if (k + 1 >= p.size()) Fail(Where(number), "/", p, "/ ends in a lone backslash");
      const char e = p[k + 1];
      const std::string_view escape = p.substr(k, 2);
      if (e == 'x' || e == 'u' || e == 'U') {
        const size_t digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        uint32_t cp = 0;
        for (size_t d = 0; d < digits; ++d) {
          const int v = k + 2 + d < p.size() ? HexValue(p[k + 2 + d]) : -1;
          if (v < 0) refuse(escape, StrCat("needs ", digits, " hex digits"));
          cp = cp * 16 + static_cast<uint32_t>(v);
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
          refuse(p.substr(k, digits + 2), "is no character");
        }
        if (cp < 0x20 || cp == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned>(cp));
          out += escaped;  // The control character itself, written as XGrammar reads it.
        } else {
          AppendUtf8(cp, &out);
        }
        k += digits + 2;
        continue;
      }
      const bool letter = (e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z');
      if (std::string_view("AZzGbB").find(e) != std::string_view::npos && !(in_class && e == 'b')) {
        refuse(escape, "(an anchor or word boundary) is not supported");
      } else if (IsDigit(e) && !(e == '0' && !(k + 2 < p.size() && IsDigit(p[k + 2])))) {
        refuse(escape, "(an octal escape or a backreference) is not supported");
      } else if (e == 'N') {
        refuse(escape, "(a character by its name) is not supported");
      } else if (letter && std::string_view("dDwWsSafnrtv").find(e) == std::string_view::npos &&
                 e != 'b') {
        refuse(escape, "is not an escape of Python's re");
      }
      out += escape;
      k += 2;
    }
    return out;
  }

  // ---- Definitions ----

  // How many tokens from t[k] spell a priority (`.2`, `.-1`, `.+1`): 0 when none does.
  static size_t PrioritySize(const std::vector<Token>& t, size_t k) {
    if (k >= t.size() || t[k].kind != Token::Kind::kOp || t[k].text != ".") return 0;
    const bool plus = k + 1 < t.size() && t[k + 1].kind == Token::Kind::kOp && t[k + 1].text == "+";
    const size_t number = k + 1 + plus;
    return number < t.size() && t[number].kind == Token::Kind::kNumber ? number + 1 - k : 0;
  }

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
    after += PrioritySize(t, after);
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
          const auto imported = imports_.find(name);
          if (imported != imports_.end() && imported->second == target) continue;  // As Lark.
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
      // After `name:` with nothing on its line, the empty string is the first alternative, as
      // in Lark.
      CloseAlternative(&out);
      out += out.empty() ? "|" : " |";
      alternative_empty_ = true;
    } else if (const std::optional<size_t> name = DefinitionName(t)) {
      EndRule();
      in_rule_ = true;
      alternative_empty_ = true;
      out += names_.at(t[*name].text) + " ::=";
      k = *name + 1;
      k += PrioritySize(t, k);
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
          // XGrammar's flag i folds ASCII letters; other letters are a class of their cases.
          constexpr std::string_view kSpecial = "\\^$.|?*+()[]{}";  // to a regex
          std::string pattern;
          for (const uint32_t cp : CodePoints(tok.text)) {
            const std::vector<uint32_t> cases = cp < 0x80 ? std::vector{cp} : CaseVariants(cp);
            if (cases.size() > 1) {
              pattern += '[';
              for (const uint32_t variant : cases) AppendUtf8(variant, &pattern);
              pattern += ']';
              continue;
            }
            if (cp < 0x80 && kSpecial.find(static_cast<char>(cp)) != std::string_view::npos) {
              pattern += '\\';
            }
            AppendUtf8(cp, &pattern);
          }
          Item(out, "Regex(" + EbnfStringLiteral(pattern) + ", flags=\"i\")");
        } else {
          Item(out, EbnfStringLiteral(tok.text));
        }
        return;
      case Token::Kind::kRegex:
        Item(out, "Regex(" + EbnfStringLiteral(tok.text) + ", flags=\"" + tok.flags + "\")");
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
        if (j >= t.size() || t[j].kind != Token::Kind::kNumber || !IsDigit(t[j].text[0])) {
          return false;
        }
        if (t[j].text.size() > 9) {
          Fail(Where(number), "'~' counts up to 999999999, got ", t[j].text);
        }
        return true;
      };
      if (alternative_empty_ || !number_at(*k + 1)) {
        Fail(Where(number), "'~' takes an item before it and a count after it (item~3, item~1..3)");
      }
      const std::string low = t[*k + 1].text;
      std::string high = low;
      *k += 1;
      const bool ranged = next_is("..");
      if (ranged) {
        if (!number_at(*k + 2)) Fail(Where(number), "'~n..' needs a number after '..'");
        high = t[*k + 2].text;
        if (std::stoull(high) < std::stoull(low)) {
          Fail(Where(number), "'~", low, "..", high, "' counts down");
        }
        *k += 2;
      }
      if (after_optional) {
        // [x]~n..m is n to m times x or nothing, which is x from 0 to m times: XGrammar takes
        // one quantifier to an item, so (x)? becomes (x){0,m}.
        out->pop_back();
        *out += "{0," + high + "}";
      } else {
        *out += "{" + low + (ranged ? "," + high : "") + "}";
      }
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
