#include "server/python_literal.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "tokenizer/utf8.h"

namespace latent::server {
namespace {

using OrderedJson = nlohmann::ordered_json;

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentifierChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// A recursive-descent reader over the text; every method returns nullopt (or false) on text that
// is not a literal it reads, leaving the whole value to the caller's string fallback.
class Reader {
 public:
  Reader(std::string_view text, int max_depth) : s_(text), max_depth_(max_depth) {}

  std::optional<OrderedJson> Whole() {
    std::optional<OrderedJson> v = Value(0);
    SkipSpace();
    if (!v || pos_ != s_.size()) return std::nullopt;
    return v;
  }

 private:
  void SkipSpace() {
    while (pos_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  char Peek() {
    SkipSpace();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }

  std::optional<OrderedJson> Value(int depth) {
    const char c = Peek();
    if (c == '[') return Sequence(depth, ']');
    if (c == '(') return Sequence(depth, ')');
    if (c == '{') return Dict(depth);
    if (c == '\'' || c == '"') return Strings();
    if (c == '+' || c == '-' || c == '.' || IsDigit(c)) return Number();
    const char next = pos_ + 1 < s_.size() ? s_[pos_ + 1] : '\0';
    if ((c == 'u' || c == 'U') && (next == '\'' || next == '"')) {
      ++pos_;
      return Strings();
    }
    size_t end = pos_;
    while (end < s_.size() && IsIdentifierChar(s_[end])) ++end;
    const std::string_view name = s_.substr(pos_, end - pos_);
    pos_ = end;
    if (name == "True") return OrderedJson(true);
    if (name == "False") return OrderedJson(false);
    if (name == "None") return OrderedJson(nullptr);
    return std::nullopt;
  }

  // A list (`close` ']') or a tuple (')'); "(x)" without a comma is x itself.
  std::optional<OrderedJson> Sequence(int depth, char close) {
    if (depth >= max_depth_) return std::nullopt;
    ++pos_;  // The opening bracket.
    OrderedJson items = OrderedJson::array();
    bool comma = false;
    while (!Eat(close)) {
      if (!items.empty() && !comma) return std::nullopt;
      std::optional<OrderedJson> item = Value(depth + 1);
      if (!item) return std::nullopt;
      items.push_back(std::move(*item));
      comma = Eat(',');
    }
    if (close == ')' && items.size() == 1 && !comma) return std::move(items[0]);
    return items;
  }

  std::optional<OrderedJson> Dict(int depth) {
    if (depth >= max_depth_) return std::nullopt;
    ++pos_;  // '{'
    OrderedJson object = OrderedJson::object();
    bool first = true, comma = false;
    while (!Eat('}')) {
      if (!first && !comma) return std::nullopt;
      first = false;
      std::optional<OrderedJson> key = Value(depth + 1);
      if (!key || !Eat(':')) return std::nullopt;  // No ':': a set, which json.dumps refuses.
      std::optional<std::string> name = KeyName(*key);
      std::optional<OrderedJson> value = Value(depth + 1);
      if (!name || !value) return std::nullopt;
      object[*name] = std::move(*value);  // A repeated key: its first place, its last value.
      comma = Eat(',');
    }
    return object;
  }

  // The string json.dumps writes for a dict key (a float's repr is not worth copying).
  static std::optional<std::string> KeyName(const OrderedJson& key) {
    if (key.is_string()) return key.get<std::string>();
    if (key.is_boolean()) return key.get<bool>() ? "true" : "false";
    if (key.is_null()) return "null";
    if (key.is_number_integer()) return key.dump();
    return std::nullopt;
  }

  // One or more adjacent str literals, joined.
  std::optional<OrderedJson> Strings() {
    std::string text;
    do {
      if (!String(text)) return std::nullopt;
    } while (Peek() == '\'' || Peek() == '"');
    return OrderedJson(std::move(text));
  }

  bool String(std::string& out) {
    const char quote = s_[pos_++];
    if (s_.substr(pos_, 2) == std::string_view(std::string(2, quote))) return false;  // '''...'''
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == quote) return true;
      if (c == '\n' || c == '\r') return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) return false;
      if (!Escape(out)) return false;
    }
    return false;
  }

  // The escape after a backslash, as a Python str reads it.
  bool Escape(std::string& out) {
    const char e = s_[pos_++];
    switch (e) {
      case '\n': return true;  // A line continuation.
      case '\\': out += '\\'; return true;
      case '\'': out += '\''; return true;
      case '"': out += '"'; return true;
      case 'a': out += '\a'; return true;
      case 'b': out += '\b'; return true;
      case 'f': out += '\f'; return true;
      case 'n': out += '\n'; return true;
      case 'r': out += '\r'; return true;
      case 't': out += '\t'; return true;
      case 'v': out += '\v'; return true;
      case 'x': return CodePoint(2, out);
      case 'u': return CodePoint(4, out);
      case 'U': return CodePoint(8, out);
      case 'N': return false;  // \N{name}: the name table is not worth carrying.
      default: break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t cp = e - '0';
      for (int i = 0; i < 2 && pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '7'; ++i) {
        cp = cp * 8 + (s_[pos_++] - '0');
      }
      tokenizer::AppendUtf8(cp, out);
      return true;
    }
    out += '\\';  // An unknown escape keeps its backslash.
    out += e;
    return true;
  }

  bool CodePoint(int digits, std::string& out) {
    uint32_t cp = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= s_.size() || HexValue(s_[pos_]) < 0) return false;
      cp = cp * 16 + HexValue(s_[pos_++]);
    }
    // A lone surrogate is a Python str but no UTF-8 text; past 0x10FFFF is no code point.
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    tokenizer::AppendUtf8(cp, out);
    return true;
  }

  // Digits of `base` with single '_' between them; false on none or a misplaced '_'.
  bool Digits(int base, std::string& out) {
    bool any = false, underscore = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '_') {
        if (!any || underscore) return false;
        underscore = true;
      } else if (HexValue(c) >= 0 && HexValue(c) < base && (base == 16 || IsDigit(c))) {
        out += c;
        any = true;
        underscore = false;
      } else {
        break;
      }
      ++pos_;
    }
    return any && !underscore;
  }

  std::optional<OrderedJson> Number() {
    bool negative = false;
    if (s_[pos_] == '+' || s_[pos_] == '-') {
      negative = s_[pos_++] == '-';
      SkipSpace();
    }
    std::optional<OrderedJson> n = Unsigned();
    if (!n || (pos_ < s_.size() && IsIdentifierChar(s_[pos_]))) return std::nullopt;  // 1j, 1abc
    if (!negative) return n;
    if (n->is_number_float()) return OrderedJson(-n->get<double>());
    return OrderedJson(-n->get<int64_t>());
  }

  std::optional<OrderedJson> Unsigned() {
    if (pos_ + 1 < s_.size() && s_[pos_] == '0') {
      const char k = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[pos_ + 1])));
      const int base = k == 'x' ? 16 : k == 'o' ? 8 : k == 'b' ? 2 : 0;
      if (base != 0) {
        pos_ += 2;
        if (pos_ < s_.size() && s_[pos_] == '_') ++pos_;  // 0x_ff is valid Python.
        std::string digits;
        if (!Digits(base, digits)) return std::nullopt;
        return Int(digits, base);
      }
    }
    std::string whole, fraction, exponent;
    const bool has_whole = pos_ < s_.size() && IsDigit(s_[pos_]);
    if (has_whole && !Digits(10, whole)) return std::nullopt;
    bool is_float = false;
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      is_float = true;
      if (pos_ < s_.size() && IsDigit(s_[pos_]) && !Digits(10, fraction)) return std::nullopt;
    }
    if (!has_whole && fraction.empty()) return std::nullopt;
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      is_float = true;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) exponent += s_[pos_++];
      if (!Digits(10, exponent)) return std::nullopt;
    }
    if (!is_float) {
      // Python 3 refuses leading zeros on a nonzero int ("007"), as an old octal spelling.
      if (whole[0] == '0' && whole.find_first_not_of('0') != std::string::npos) {
        return std::nullopt;
      }
      return Int(whole, 10);
    }
    const std::string text = (whole.empty() ? "0" : whole) + "." +
                             (fraction.empty() ? "0" : fraction) +
                             (exponent.empty() ? "" : "e" + exponent);
    const OrderedJson f = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (f.is_discarded() || !std::isfinite(f.get<double>())) return std::nullopt;  // 1e999: inf
    return OrderedJson(f.get<double>());
  }

  static std::optional<OrderedJson> Int(const std::string& digits, int base) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v, base);
    if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
    return OrderedJson(v);
  }

  std::string_view s_;
  size_t pos_ = 0;
  const int max_depth_;
};

}  // namespace

std::optional<OrderedJson> ParsePythonLiteral(std::string_view text, int max_depth) {
  return Reader(text, max_depth).Whole();
}

}  // namespace latent::server
