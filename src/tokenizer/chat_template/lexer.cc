#include "tokenizer/chat_template/lexer.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "base/error.h"
#include "tokenizer/chat_template/pystr.h"

namespace latent::tokenizer::jinja {

void FailAt(Pos pos, const std::string& message) {
  Fail("chat template line ", pos.line, " col ", pos.col, ": ", message);
}

namespace {

bool IsAsciiDigit(char c) { return c >= '0' && c <= '9'; }

class Lexer {
 public:
  explicit Lexer(const std::string& source) : src_(source) {}

  std::vector<Token> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t open = FindTagOpen(pos);
      if (open == std::string::npos) {
        Emit(TokenType::kData, src_.substr(pos), pos);
        break;
      }
      const char kind = src_[open + 1];
      char sign = 0;
      if (open + 2 < src_.size() && (src_[open + 2] == '-' || src_[open + 2] == '+')) {
        sign = src_[open + 2];
      }
      size_t raw_end = kind == '%' ? MatchRawBegin(open) : 0;
      std::string text = src_.substr(pos, open - pos);
      StripBeforeTag(text, sign, kind != '{', line_starting);
      Emit(TokenType::kData, std::move(text), pos);
      if (raw_end) {
        pos = LexRaw(raw_end, &line_starting);
      } else if (kind == '#') {
        pos = LexComment(open, sign ? open + 3 : open + 2, &line_starting);
      } else {
        pos = LexTag(open, kind == '{', sign ? open + 3 : open + 2, &line_starting);
      }
    }
    tokens_.push_back(Token{TokenType::kEof, "", PosAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  Pos PosAt(size_t offset) {
    // Tokens are made in source order, so the cursor only moves forward.
    while (cursor_ < offset && cursor_ < src_.size()) {
      if (src_[cursor_] == '\n') {
        ++cursor_pos_.line;
        cursor_pos_.col = 1;
        ++cursor_;
      } else {
        ++cursor_pos_.col;
        cursor_ += CharLen(std::string_view(src_).substr(cursor_));
      }
    }
    return cursor_pos_;
  }

  [[noreturn]] void FailHere(size_t offset, const std::string& message) {
    FailAt(PosAt(offset), message);
  }

  void Emit(TokenType type, std::string value, size_t offset) {
    if (type == TokenType::kData && value.empty()) return;
    tokens_.push_back(Token{type, std::move(value), PosAt(offset)});
  }

  size_t FindTagOpen(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // Length of the Unicode whitespace character at `i`, 0 if there is none.
  size_t SpaceAt(size_t i) const {
    if (i >= src_.size()) return 0;
    std::string_view rest = std::string_view(src_).substr(i);
    size_t len = CharLen(rest);
    return IsSpace(Decode(rest.substr(0, len))[0]) ? len : 0;
  }

  size_t SkipSpace(size_t i) const {
    while (size_t len = SpaceAt(i)) i += len;
    return i;
  }

  bool At(size_t i, std::string_view s) const {
    return std::string_view(src_).substr(i, s.size()) == s;
  }

  // `{%(-|+)?\s*raw\s*(-%}\s*|%})` at `open`: the offset after it, or 0.
  size_t MatchRawBegin(size_t open) const {
    size_t i = open + 2;
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    i = SkipSpace(i);
    if (!At(i, "raw")) return 0;
    i = SkipSpace(i + 3);
    if (At(i, "-%}")) return SkipSpace(i + 3);
    if (At(i, "%}")) return i + 2;
    return 0;
  }

  // Whitespace control for the text before a tag: `-` strips all trailing whitespace; otherwise
  // lstrip_blocks removes the indentation before a block or comment tag that starts its line.
  void StripBeforeTag(std::string& text, char sign, bool is_block, bool line_starting) const {
    if (sign == '-') {
      text = Strip(text, std::nullopt, false, true);
      return;
    }
    if (sign == '+' || !is_block) return;
    size_t nl = text.rfind('\n');
    size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return;
    if (l_pos == text.size()) return;  // `\s+` needs at least one character
    std::u32string rest = Decode(std::string_view(text).substr(l_pos));
    for (char32_t c : rest) {
      if (!IsSpace(c)) return;
    }
    text.resize(l_pos);
  }

  size_t LexRaw(size_t start, bool* line_starting) {
    // The raw begin tag itself decides line_starting for the text inside.
    *line_starting = start > 0 && src_[start - 1] == '\n';
    for (size_t i = src_.find("{%", start); i != std::string::npos; i = src_.find("{%", i + 1)) {
      size_t j = i + 2;
      char sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
      j = SkipSpace(j);
      if (!At(j, "endraw")) continue;
      j = SkipSpace(j + 6);
      size_t end;
      if (At(j, "+%}")) {
        end = j + 3;
      } else if (At(j, "-%}")) {
        end = SkipSpace(j + 3);
      } else if (At(j, "%}")) {
        end = j + 2;
        if (end < src_.size() && src_[end] == '\n') ++end;
      } else {
        continue;
      }
      std::string text = src_.substr(start, i - start);
      StripBeforeTag(text, sign, true, *line_starting);
      Emit(TokenType::kData, std::move(text), start);
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    FailHere(start, "missing end of raw directive ({% endraw %})");
  }

  size_t LexComment(size_t open, size_t from, bool* line_starting) {
    for (size_t i = src_.find("#}", from); i != std::string::npos; i = src_.find("#}", i + 1)) {
      size_t end;
      if (i > from && src_[i - 1] == '-') {
        end = SkipSpace(i + 2);
      } else {
        end = i + 2;
        if ((i == from || src_[i - 1] != '+') && end < src_.size() && src_[end] == '\n') ++end;
      }
      *line_starting = src_[end - 1] == '\n';
      return end;
    }
    FailHere(open, "missing end of comment tag (#})");
  }

  size_t LexTag(size_t open, bool variable, size_t i, bool* line_starting) {
    Emit(variable ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", open);
    std::vector<char> balance;
    while (true) {
      if (balance.empty()) {
        size_t end = 0;
        if (variable) {
          if (At(i, "-}}")) {
            end = SkipSpace(i + 3);
          } else if (At(i, "}}")) {
            end = i + 2;
          }
        } else {
          if (At(i, "+%}")) {
            end = i + 3;
          } else if (At(i, "-%}")) {
            end = SkipSpace(i + 3);
          } else if (At(i, "%}")) {
            end = i + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;
          }
        }
        if (end) {
          Emit(variable ? TokenType::kVariableEnd : TokenType::kBlockEnd, "", i);
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      if (i >= src_.size()) {
        FailHere(i, variable ? "unexpected end of template, expected '}}'"
                             : "unexpected end of template, expected '%}'");
      }
      if (size_t len = SpaceAt(i)) {
        i += len;
        continue;
      }
      const char c = src_[i];
      if (IsAsciiDigit(c)) {
        i = LexNumber(i);
      } else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                 static_cast<unsigned char>(c) >= 0x80) {
        size_t j = i;
        while (j < src_.size()) {
          const char d = src_[j];
          if (d == '_' || (d >= 'a' && d <= 'z') || (d >= 'A' && d <= 'Z') || IsAsciiDigit(d)) {
            ++j;
          } else if (static_cast<unsigned char>(d) >= 0x80 && !SpaceAt(j)) {
            j += CharLen(std::string_view(src_).substr(j));
          } else {
            break;
          }
        }
        if (j == i) FailHere(i, "unexpected character in tag");
        Emit(TokenType::kName, src_.substr(i, j - i), i);
        i = j;
      } else if (c == '\'' || c == '"') {
        i = LexString(i);
      } else {
        i = LexOperator(i, balance);
      }
    }
  }

  // `(\d+_)*\d+` at i: the end, or i when there are no digits.
  size_t Digits(size_t i) const {
    size_t j = i;
    while (j < src_.size() && IsAsciiDigit(src_[j])) {
      ++j;
      if (j + 1 < src_.size() && src_[j] == '_' && IsAsciiDigit(src_[j + 1])) ++j;
    }
    return j;
  }

  size_t Exponent(size_t i) const {
    if (i >= src_.size() || (src_[i] != 'e' && src_[i] != 'E')) return 0;
    size_t j = i + 1;
    if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
    size_t k = Digits(j);
    return k > j ? k : 0;
  }

  static std::string NoUnderscores(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c != '_') out.push_back(c);
    }
    return out;
  }

  size_t LexNumber(size_t i) {
    // Floats first, as jinja2 tries them first; not right after a '.' (`x.0.1`).
    if (i == 0 || src_[i - 1] != '.') {
      size_t int_end = Digits(i);
      size_t end = 0;
      if (int_end < src_.size() && src_[int_end] == '.') {
        size_t frac_end = Digits(int_end + 1);
        if (frac_end > int_end + 1) {
          size_t exp_end = Exponent(frac_end);
          end = exp_end ? exp_end : frac_end;
        }
      }
      if (!end) end = Exponent(int_end);
      if (end) {
        Token t{TokenType::kFloat, NoUnderscores(std::string_view(src_).substr(i, end - i)),
                PosAt(i)};
        t.float_value = std::strtod(t.value.c_str(), nullptr);
        tokens_.push_back(std::move(t));
        return end;
      }
    }
    int base = 10;
    size_t j = i;
    auto is_digit = [&](char c, int b) {
      if (b == 2) return c == '0' || c == '1';
      if (b == 8) return c >= '0' && c <= '7';
      if (b == 16) return IsAsciiDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      return IsAsciiDigit(c);
    };
    if (src_[i] == '0' && i + 1 < src_.size() &&
        (src_[i + 1] == 'b' || src_[i + 1] == 'B' || src_[i + 1] == 'o' || src_[i + 1] == 'O' ||
         src_[i + 1] == 'x' || src_[i + 1] == 'X')) {
      const char p = static_cast<char>(src_[i + 1] | 0x20);
      const int b = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      size_t k = i + 2;
      size_t last = k;
      while (true) {
        size_t m = k;
        if (m < src_.size() && src_[m] == '_') ++m;
        if (m < src_.size() && is_digit(src_[m], b)) {
          k = m + 1;
          last = k;
        } else {
          break;
        }
      }
      if (last > i + 2) {
        base = b;
        j = last;
      }
    }
    if (base == 10) {
      if (src_[i] == '0') {
        j = i + 1;
        while (true) {
          size_t m = j;
          if (m < src_.size() && src_[m] == '_') ++m;
          if (m < src_.size() && src_[m] == '0') {
            j = m + 1;
          } else {
            break;
          }
        }
      } else {
        j = i + 1;
        while (true) {
          size_t m = j;
          if (m < src_.size() && src_[m] == '_') ++m;
          if (m < src_.size() && IsAsciiDigit(src_[m])) {
            j = m + 1;
          } else {
            break;
          }
        }
      }
    }
    std::string digits = NoUnderscores(std::string_view(src_).substr(i, j - i));
    std::string body = base == 10 ? digits : digits.substr(2);
    errno = 0;
    char* endp = nullptr;
    long long v = std::strtoll(body.c_str(), &endp, base);
    if (errno == ERANGE) FailHere(i, "integer literal " + digits + " is too large (64-bit limit)");
    Token t{TokenType::kInteger, digits, PosAt(i)};
    t.int_value = v;
    tokens_.push_back(std::move(t));
    return j;
  }

  size_t LexString(size_t i) {
    const char quote = src_[i];
    size_t j = i + 1;
    while (j < src_.size() && src_[j] != quote) {
      if (src_[j] == '\\') {
        ++j;
        if (j >= src_.size()) break;
        j += CharLen(std::string_view(src_).substr(j));
      } else {
        ++j;
      }
    }
    if (j >= src_.size()) FailHere(i, std::string("unterminated string literal"));
    Token t{TokenType::kString, Unescape(i, std::string_view(src_).substr(i + 1, j - i - 1)),
            PosAt(i)};
    tokens_.push_back(std::move(t));
    return j + 1;
  }

  // jinja2 decodes string literals with Python's unicode-escape codec after replacing non-ASCII
  // characters with backslash escapes; this does the same in one pass.
  std::string Unescape(size_t at, std::string_view raw) {
    std::string ascii;
    for (char32_t c : Decode(raw)) {
      if (c < 0x80) {
        ascii.push_back(static_cast<char>(c));
      } else {
        char buf[16];
        if (c < 0x100) {
          std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(c));
        } else if (c < 0x10000) {
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
        } else {
          std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(c));
        }
        ascii += buf;
      }
    }
    std::string out;
    auto hex = [&](size_t k, int n, const char* what) -> char32_t {
      char32_t v = 0;
      for (int d = 0; d < n; ++d) {
        char h = k + d < ascii.size() ? ascii[k + d] : 0;
        int x = IsAsciiDigit(h)          ? h - '0'
                : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                         : -1;
        if (x < 0) FailHere(at, std::string("truncated ") + what + " escape in string literal");
        v = v * 16 + x;
      }
      return v;
    };
    auto put = [&](char32_t c) {
      if (c >= 0xD800 && c <= 0xDFFF) FailHere(at, "lone surrogate escape in string literal");
      if (c > 0x10FFFF) FailHere(at, "illegal Unicode character escape in string literal");
      AppendCodePoint(c, out);
    };
    for (size_t k = 0; k < ascii.size(); ++k) {
      const char c = ascii[k];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (k + 1 >= ascii.size()) FailHere(at, "\\ at end of string literal");
      const char n = ascii[++k];
      switch (n) {
        case '\n':
          break;
        case '\\':
        case '\'':
        case '"':
          out.push_back(n);
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          put(hex(k + 1, 2, "\\xXX"));
          k += 2;
          break;
        case 'u':
          put(hex(k + 1, 4, "\\uXXXX"));
          k += 4;
          break;
        case 'U':
          put(hex(k + 1, 8, "\\UXXXXXXXX"));
          k += 8;
          break;
        case 'N':
          FailHere(at, "unsupported \\N{...} escape in string literal");
        default:
          if (n >= '0' && n <= '7') {
            char32_t v = n - '0';
            for (int d = 0;
                 d < 2 && k + 1 < ascii.size() && ascii[k + 1] >= '0' && ascii[k + 1] <= '7'; ++d) {
              v = v * 8 + (ascii[++k] - '0');
            }
            put(v);
          } else {
            out.push_back('\\');
            out.push_back(n);
          }
      }
    }
    return out;
  }

  size_t LexOperator(size_t i, std::vector<char>& balance) {
    static const char* const kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : kTwo) {
      if (At(i, op)) {
        Emit(TokenType::kOperator, op, i);
        return i + 2;
      }
    }
    const char c = src_[i];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      std::string shown = src_.substr(i, CharLen(std::string_view(src_).substr(i)));
      FailHere(i, "unexpected character '" + shown + "' in tag");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) FailHere(i, std::string("unexpected '") + c + "'");
      if (balance.back() != c) {
        FailHere(i, std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      }
      balance.pop_back();
    }
    Emit(TokenType::kOperator, std::string(1, c), i);
    return i + 1;
  }

  const std::string& src_;
  std::vector<Token> tokens_;
  size_t cursor_ = 0;
  Pos cursor_pos_;
};

}  // namespace

std::vector<Token> Tokenize(const std::string& source) {
  // jinja2 turns \r\n and \r into \n and drops one trailing newline.
  std::string src;
  src.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      src.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      src.push_back(source[i]);
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return Lexer(src).Run();
}

}  // namespace latent::tokenizer::jinja
