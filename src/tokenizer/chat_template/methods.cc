// Methods of str, list and dict values; the global functions; Python's % and str.format
// formatting; slicing.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/pystr.h"

namespace latent::tokenizer::jinja {
namespace {

std::optional<int64_t> OptIndex(const CallArgs& args, size_t i) {
  if (i >= args.args.size() || args.args[i].IsNone()) return std::nullopt;
  const Value& v = args.args[i];
  if (!IntLike(v)) {
    Throw("slice indices must be integers or None or have an __index__ method");
  }
  return v.AsInt();
}

void ArgCount(const std::string& fname, const CallArgs& args, size_t min, size_t max) {
  if (!args.kwargs.empty()) Throw(fname + "() takes no keyword arguments");
  if (args.args.size() < min || args.args.size() > max) {
    Throw(fname + "() takes " + (min == max ? "exactly " : "from " + std::to_string(min) + " to ") +
          std::to_string(max) + " argument(s) (" + std::to_string(args.args.size()) + " given)");
  }
}

// Positional or keyword argument `name` at position i.
const Value* Arg(const CallArgs& args, size_t i, std::string_view name) {
  if (i < args.args.size()) return &args.args[i];
  for (const auto& [key, value] : args.kwargs) {
    if (key == name) return &value;
  }
  return nullptr;
}

void OnlyKeywords(const std::string& fname, const CallArgs& args, size_t max_positional,
                  std::initializer_list<std::string_view> names) {
  if (args.args.size() > max_positional) {
    Throw(fname + "() takes at most " + std::to_string(max_positional) + " arguments (" +
          std::to_string(args.args.size()) + " given)");
  }
  for (const auto& [key, value] : args.kwargs) {
    bool ok = false;
    for (std::string_view n : names) ok = ok || n == key;
    if (!ok) Throw(fname + "() got an unexpected keyword argument '" + key + "'");
  }
}

const std::string& StrArg(const Value& v, const std::string& fname) {
  if (!v.IsString()) Throw(fname + "() argument must be str, not " + TypeName(v));
  return v.AsString();
}

std::optional<std::string> OptStrArg(const Value* v, const std::string& fname) {
  if (!v || v->IsNone()) return std::nullopt;
  if (!v->IsString()) Throw(fname + " arg must be None or str");
  return v->AsString();
}

Value Strings(Interpreter& interp, const std::vector<std::string>& parts,
              ListKind kind = ListKind::kList) {
  std::vector<Value> items;
  for (const auto& p : parts) items.push_back(Value::String(p));
  interp.Charge(items.size());
  return Value::List(std::move(items), kind);
}

Value Str1(Interpreter& interp, std::string s) {
  interp.CheckStringSize(s.size());
  return Value::String(std::move(s));
}

// s[start:end] by code points with Python's clamping.
std::string SubStr(const std::string& s, std::optional<int64_t> start, std::optional<int64_t> end) {
  const int64_t n = static_cast<int64_t>(CodePointCount(s));
  int64_t b = start.value_or(0), e = end.value_or(n);
  if (b < 0) b = std::max<int64_t>(0, b + n);
  if (e < 0) e = std::max<int64_t>(0, e + n);
  b = std::min(b, n);
  e = std::min(e, n);
  if (b >= e) return "";
  size_t bb = ByteOffset(s, b);
  size_t ee = ByteOffset(s, e);
  return s.substr(bb, ee - bb);
}

bool AffixMatch(const std::string& s, const Value& affix, const CallArgs& args, bool suffix,
                const std::string& fname) {
  std::optional<int64_t> start = OptIndex(args, 1), end = OptIndex(args, 2);
  // Python: a start past the end never matches, even for an empty affix.
  if (start && *start > static_cast<int64_t>(CodePointCount(s))) return false;
  std::string sub = (start || end) ? SubStr(s, start, end) : s;
  std::vector<Value> candidates;
  if (affix.IsString()) {
    candidates.push_back(affix);
  } else if (affix.IsList() && affix.list_kind() == ListKind::kTuple) {
    candidates = affix.Items();
  } else {
    Throw(fname + " first arg must be str or a tuple of str, not " + TypeName(affix));
  }
  for (const Value& c : candidates) {
    const std::string& a = StrArg(c, fname);
    if (a.size() > sub.size()) continue;
    if (suffix ? sub.compare(sub.size() - a.size(), a.size(), a) == 0
               : sub.compare(0, a.size(), a) == 0) {
      return true;
    }
  }
  return false;
}

bool AllChars(const std::string& s, const std::function<bool(char32_t)>& pred) {
  if (s.empty()) return false;
  for (char32_t c : Decode(s)) {
    if (!pred(c)) return false;
  }
  return true;
}

std::string StrFormat(Interpreter& interp, const std::string& format, const CallArgs& args);

Value CallStrMethod(Interpreter& interp, const std::string& s, const std::string& name,
                    CallArgs& args) {
  const std::string fname = "str." + name;
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" ||
      name == "swapcase" || name == "casefold") {
    ArgCount(fname, args, 0, 0);
    if (name == "upper") return Str1(interp, Upper(s));
    if (name == "lower" || name == "casefold") return Str1(interp, Lower(s));
    if (name == "title") return Str1(interp, Title(s));
    if (name == "capitalize") return Str1(interp, Capitalize(s));
    return Str1(interp, SwapCase(s));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgCount(fname, args, 0, 1);
    auto chars = OptStrArg(args.args.empty() ? nullptr : &args.args[0], name);
    return Value::String(Strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    OnlyKeywords(fname, args, 2, {"sep", "maxsplit"});
    auto sep = OptStrArg(Arg(args, 0, "sep"), name);
    if (sep && sep->empty()) Throw("empty separator");
    const Value* m = Arg(args, 1, "maxsplit");
    int64_t maxsplit = m ? ToInt(*m, "maxsplit") : -1;
    interp.Charge(s.size());
    return Strings(interp, name == "split" ? Split(s, sep, maxsplit) : RSplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    OnlyKeywords(fname, args, 1, {"keepends"});
    const Value* k = Arg(args, 0, "keepends");
    return Strings(interp, SplitLines(s, k && Truthy(*k)));
  }
  if (name == "startswith" || name == "endswith") {
    ArgCount(fname, args, 1, 3);
    return Value::Bool(AffixMatch(s, args.args[0], args, name == "endswith", name));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    ArgCount(fname, args, 1, 3);
    const bool reverse = name[0] == 'r';
    int64_t at = Find(s, StrArg(args.args[0], name), OptIndex(args, 1), OptIndex(args, 2), reverse);
    if (at < 0 && (name == "index" || name == "rindex")) Throw("substring not found");
    return Value::Int(at);
  }
  if (name == "count") {
    ArgCount(fname, args, 1, 3);
    return Value::Int(Count(s, StrArg(args.args[0], name), OptIndex(args, 1), OptIndex(args, 2)));
  }
  if (name == "replace") {
    OnlyKeywords(fname, args, 3, {"count"});
    if (args.args.size() < 2) Throw("replace() takes at least 2 arguments");
    const std::string& old = StrArg(args.args[0], name);
    const std::string& repl = StrArg(args.args[1], name);
    const Value* c = Arg(args, 2, "count");
    const int64_t limit = c ? ToInt(*c, "count") : -1;
    const size_t occurrences = Count(s, old, std::nullopt, std::nullopt);
    const size_t n = limit < 0 ? occurrences : std::min<size_t>(occurrences, limit);
    if (repl.size() > old.size()) {
      const size_t grow = repl.size() - old.size();
      if (n > interp.limits().max_output_bytes / grow) {
        interp.CheckStringSize(interp.limits().max_output_bytes + 1);
      }
      interp.CheckStringSize(s.size() + n * grow);
    }
    return Str1(interp, Replace(s, old, repl, limit));
  }
  if (name == "join") {
    ArgCount(fname, args, 1, 1);
    std::string out;
    size_t i = 0;
    for (const Value& item : Iterate(args.args[0])) {
      if (!item.IsString()) {
        Throw("sequence item " + std::to_string(i) + ": expected str instance, " + TypeName(item) +
              " found");
      }
      if (i++) out += s;
      out += item.AsString();
      interp.CheckStringSize(out.size());
    }
    return Value::String(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    ArgCount(fname, args, 1, 2);
    int64_t width = ToInt(args.args[0], "width");
    std::string fill = " ";
    if (args.args.size() > 1) {
      fill = StrArg(args.args[1], name);
      if (CodePointCount(fill) != 1) {
        Throw("The fill character must be exactly one character long");
      }
    }
    interp.CheckStringSize(width > 0 ? static_cast<size_t>(width) * fill.size() : 0);
    return Value::String(Pad(s, width, fill, name == "center" ? 0 : name == "ljust" ? -1 : 1));
  }
  if (name == "zfill") {
    ArgCount(fname, args, 1, 1);
    int64_t width = ToInt(args.args[0], "width");
    interp.CheckStringSize(width > 0 ? static_cast<size_t>(width) : 0);
    int64_t len = static_cast<int64_t>(CodePointCount(s));
    if (width <= len) return Value::String(s);
    std::string sign, body = s;
    if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
      sign = s.substr(0, 1);
      body = s.substr(1);
    }
    return Value::String(sign + std::string(width - len, '0') + body);
  }
  if (name == "partition" || name == "rpartition") {
    ArgCount(fname, args, 1, 1);
    const std::string& sep = StrArg(args.args[0], name);
    if (sep.empty()) Throw("empty separator");
    size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    std::vector<Value> parts;
    if (at == std::string::npos) {
      if (name == "partition") {
        parts = {Value::String(s), Value::String(""), Value::String("")};
      } else {
        parts = {Value::String(""), Value::String(""), Value::String(s)};
      }
    } else {
      parts = {Value::String(s.substr(0, at)), Value::String(sep),
               Value::String(s.substr(at + sep.size()))};
    }
    return Value::Tuple(std::move(parts));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgCount(fname, args, 1, 1);
    const std::string& a = StrArg(args.args[0], name);
    if (name == "removeprefix") {
      return Value::String(s.compare(0, a.size(), a) == 0 ? s.substr(a.size()) : s);
    }
    if (a.size() <= s.size() && s.compare(s.size() - a.size(), a.size(), a) == 0) {
      return Value::String(s.substr(0, s.size() - a.size()));
    }
    return Value::String(s);
  }
  if (name == "format") return Str1(interp, StrFormat(interp, s, args));
  if (name.rfind("is", 0) == 0) {
    ArgCount(fname, args, 0, 0);
    if (name == "isalpha") return Value::Bool(AllChars(s, IsAlpha));
    if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") {
      return Value::Bool(AllChars(s, IsDigit));
    }
    if (name == "isalnum") {
      return Value::Bool(AllChars(s, [](char32_t c) { return IsAlpha(c) || IsDigit(c); }));
    }
    if (name == "isspace") return Value::Bool(AllChars(s, IsSpace));
    if (name == "isascii") {
      return Value::Bool(std::all_of(s.begin(), s.end(),
                                     [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
    }
    if (name == "islower" || name == "isupper") {
      bool cased = false;
      for (char32_t c : Decode(s)) {
        if (name == "islower" ? IsUpper(c) : IsLower(c)) return Value::Bool(false);
        if (IsUpper(c) || IsLower(c)) cased = true;
      }
      return Value::Bool(cased);
    }
    if (name == "istitle") return Value::Bool(!s.empty() && Title(s) == s && Lower(s) != s);
  }
  Throw("unsupported str method '" + name + "'");
}

Value CallListMethod(Interpreter& interp, const Value& self, const std::string& name,
                     CallArgs& args) {
  const std::string fname = TypeName(self) + "." + name;
  const auto& items = self.Items();
  if (name == "count") {
    ArgCount(fname, args, 1, 1);
    int64_t n = 0;
    for (const Value& item : items) n += Equals(item, args.args[0]);
    return Value::Int(n);
  }
  if (name == "index") {
    ArgCount(fname, args, 1, 3);
    const int64_t len = static_cast<int64_t>(items.size());
    int64_t b = OptIndex(args, 1).value_or(0), e = OptIndex(args, 2).value_or(len);
    if (b < 0) b = std::max<int64_t>(0, b + len);
    if (e < 0) e = std::max<int64_t>(0, e + len);
    for (int64_t i = b; i < std::min(e, len); ++i) {
      if (Equals(items[i], args.args[0])) return Value::Int(i);
    }
    Throw(Repr(args.args[0]) + " is not in " + TypeName(self));
  }
  if (name == "copy") {
    ArgCount(fname, args, 0, 0);
    interp.Charge(items.size());
    return Value::List(items, self.list_kind());
  }
  Throw("unsupported " + TypeName(self) + " method '" + name + "'");
}

Value CallDictMethod(Interpreter& interp, const Value& self, const std::string& name,
                     CallArgs& args) {
  const std::string fname = "dict." + name;
  const DictData& d = self.AsDict();
  if (name == "get") {
    ArgCount(fname, args, 1, 2);
    const Value* v = d.Find(args.args[0]);
    if (v) return *v;
    return args.args.size() > 1 ? args.args[1] : Value::None();
  }
  if (name == "items" || name == "keys" || name == "values") {
    ArgCount(fname, args, 0, 0);
    std::vector<Value> out;
    out.reserve(d.entries.size());
    for (const auto& [key, value] : d.entries) {
      out.push_back(name == "items" ? Value::Tuple({key, value}) : name == "keys" ? key : value);
    }
    interp.Charge(out.size());
    return Value::List(std::move(out), name == "items"  ? ListKind::kDictItems
                                       : name == "keys" ? ListKind::kDictKeys
                                                        : ListKind::kDictValues);
  }
  if (name == "copy") {
    ArgCount(fname, args, 0, 0);
    return self;
  }
  Throw("unsupported dict method '" + name + "'");
}

class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string TypeName() const override { return "builtin_function_or_method"; }
  std::string Repr() const override {
    return "<built-in method " + name_ + " of " + jinja::TypeName(self_) + " object>";
  }
  bool IsCallable() const override { return true; }
  void Clear() override { self_ = Value(); }
  Value Call(Interpreter& interp, CallArgs& args) override {
    if (self_.IsString()) return CallStrMethod(interp, self_.AsString(), name_, args);
    if (self_.IsList()) return CallListMethod(interp, self_, name_, args);
    if (self_.IsDict()) return CallDictMethod(interp, self_, name_, args);
    Throw("method called after the render ended");
  }

 private:
  Value self_;
  std::string name_;
};

bool OneOf(const std::string& name, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

Value StrAttribute(const Value& obj, const std::string& name, bool* found) {
  *found = false;
  bool method = false;
  if (obj.IsString()) {
    method = OneOf(
        name,
        {"capitalize",   "casefold",    "center",    "count",      "encode",       "endswith",
         "expandtabs",   "find",        "format",    "format_map", "index",        "isalnum",
         "isalpha",      "isascii",     "isdecimal", "isdigit",    "isidentifier", "islower",
         "isnumeric",    "isprintable", "isspace",   "istitle",    "isupper",      "join",
         "ljust",        "lower",       "lstrip",    "maketrans",  "partition",    "removeprefix",
         "removesuffix", "replace",     "rfind",     "rindex",     "rjust",        "rpartition",
         "rsplit",       "rstrip",      "split",     "splitlines", "startswith",   "strip",
         "swapcase",     "title",       "translate", "upper",      "zfill"});
  } else if (obj.IsList() && (obj.list_kind() == ListKind::kList)) {
    if (OneOf(name, {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"})) {
      *found = true;
      return Value::Undefined("access to attribute '" + name + "' of 'list' object is unsafe.");
    }
    method = OneOf(name, {"copy", "count", "index"});
  } else if (obj.IsList() && obj.list_kind() == ListKind::kTuple) {
    method = OneOf(name, {"count", "index"});
  } else if (obj.IsDict()) {
    if (OneOf(name, {"clear", "pop", "popitem", "setdefault", "update"})) {
      *found = true;
      return Value::Undefined("access to attribute '" + name + "' of 'dict' object is unsafe.");
    }
    method = OneOf(name, {"copy", "fromkeys", "get", "items", "keys", "values"});
  }
  if (!method) return Value();
  *found = true;
  return Value::FromObject(std::make_shared<BoundMethod>(obj, name));
}

// ---------------------------------------------------------------------------------------------
// Slicing.

Value SliceValue(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto index = [](const Value& v, bool* ok) -> std::optional<int64_t> {
    if (v.IsNone()) return std::nullopt;
    if (!IntLike(v)) {
      *ok = false;
      return std::nullopt;
    }
    return v.AsInt();
  };
  // jinja2 compiles a slice to a plain Python subscript, so every failure here raises.
  const bool sliceable = obj.IsString() || obj.IsSequence();
  if (!sliceable) {
    if (obj.IsDict()) Throw("unhashable type: 'slice'");
    Throw("'" + TypeName(obj) + "' object is not subscriptable");
  }
  bool ok = true;
  auto start = index(start_v, &ok), stop = index(stop_v, &ok), step_opt = index(step_v, &ok);
  if (!ok) Throw("slice indices must be integers or None or have an __index__ method");
  const int64_t step = step_opt.value_or(1);
  if (step == 0) Throw("slice step cannot be zero");
  std::u32string chars;
  int64_t len;
  if (obj.IsString()) {
    chars = Decode(obj.AsString());
    len = static_cast<int64_t>(chars.size());
  } else {
    len = static_cast<int64_t>(obj.Items().size());
  }
  int64_t b, e;
  if (step > 0) {
    b = start.value_or(0);
    e = stop.value_or(len);
    if (b < 0) b = std::max<int64_t>(0, b + len);
    if (b > len) b = len;
    if (e < 0) e = std::max<int64_t>(0, e + len);
    if (e > len) e = len;
  } else {
    b = start.value_or(len - 1);
    e = stop.value_or(-1 - len);  // "before the start"
    if (start) {
      if (b < 0) b = std::max<int64_t>(-1, b + len);
      if (b >= len) b = len - 1;
    }
    if (stop) {
      if (e < 0) e = std::max<int64_t>(-1, e + len);
      if (e >= len) e = len - 1;
    } else {
      e = -1;
    }
  }
  std::vector<int64_t> picks;
  if (step > 0) {
    for (int64_t i = b; i < e; i += step) picks.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += step) picks.push_back(i);
  }
  if (obj.IsString()) {
    std::u32string out;
    for (int64_t i : picks) out.push_back(chars[i]);
    return Value::String(Encode(out));
  }
  std::vector<Value> out;
  out.reserve(picks.size());
  for (int64_t i : picks) out.push_back(obj.Items()[i]);
  return Value::List(std::move(out),
                     obj.list_kind() == ListKind::kTuple ? ListKind::kTuple : ListKind::kList);
}

// ---------------------------------------------------------------------------------------------
// Formatting.

namespace {

struct Spec {
  char fill = ' ';
  std::string fill_str = " ";
  char align = 0;  // < > ^ =
  char sign = '-';
  bool alt = false;
  bool zero = false;
  int64_t width = -1;
  bool grouping = false;
  int64_t precision = -1;
  char type = 0;
};

std::string ApplyWidth(std::string body, const Spec& spec, char default_align) {
  const int64_t len = static_cast<int64_t>(CodePointCount(body));
  if (spec.width <= len) return body;
  if (spec.width > (int64_t{1} << 24)) Throw("format width too large");
  const int64_t pad = spec.width - len;
  char align = spec.align ? spec.align : default_align;
  std::string fill;
  auto rep = [&](int64_t n) {
    std::string s;
    for (int64_t i = 0; i < n; ++i) s += spec.fill_str;
    return s;
  };
  if (align == '<') return body + rep(pad);
  if (align == '>') return rep(pad) + body;
  if (align == '^') return rep(pad / 2) + body + rep(pad - pad / 2);
  // '=': padding after the sign.
  size_t sign_len = (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
  return body.substr(0, sign_len) + rep(pad) + body.substr(sign_len);
}

std::string Group(const std::string& digits) {
  std::string out;
  int n = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    if (n && n % 3 == 0) out.push_back(',');
    out.push_back(*it);
    ++n;
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::string FormatFloat(double d, char type, int64_t precision, bool alt) {
  if (std::string_view("eEfFgG").find(type) == std::string_view::npos) {
    Throw(std::string("Unknown format code '") + type + "' for object of type 'float'");
  }
  if (precision > 500) Throw("format precision too large");
  char fmt[16];
  std::snprintf(fmt, sizeof(fmt), "%%%s.%d%c", alt ? "#" : "", static_cast<int>(precision), type);
  char buf[1024];
  std::snprintf(buf, sizeof(buf), fmt, d);
  return buf;
}

std::string FormatValue(const Value& v, const std::string& spec_text) {
  if (spec_text.empty()) return Str(v);
  Spec spec;
  std::u32string u = Decode(spec_text);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (u.size() >= 2 && is_align(u[1])) {
    spec.fill_str = Encode(std::u32string(1, u[0]));
    spec.align = static_cast<char>(u[1]);
    i = 2;
  } else if (!u.empty() && is_align(u[0])) {
    spec.align = static_cast<char>(u[0]);
    i = 1;
  }
  if (i < u.size() && (u[i] == '+' || u[i] == '-' || u[i] == ' ')) spec.sign = u[i++];
  if (i < u.size() && u[i] == '#') {
    spec.alt = true;
    ++i;
  }
  if (i < u.size() && u[i] == '0') {
    spec.zero = true;
    ++i;
  }
  while (i < u.size() && u[i] >= '0' && u[i] <= '9') {
    spec.width = std::max<int64_t>(spec.width, 0) * 10 + (u[i++] - '0');
    if (spec.width > (int64_t{1} << 24)) Throw("format width too large");
  }
  if (i < u.size() && (u[i] == ',' || u[i] == '_')) {
    spec.grouping = true;
    ++i;
  }
  if (i < u.size() && u[i] == '.') {
    ++i;
    spec.precision = 0;
    while (i < u.size() && u[i] >= '0' && u[i] <= '9') {
      spec.precision = spec.precision * 10 + (u[i++] - '0');
      if (spec.precision > 1000) Throw("format precision too large");
    }
  }
  if (i < u.size()) spec.type = static_cast<char>(u[i++]);
  if (i != u.size()) Throw("Invalid format specifier '" + spec_text + "'");
  if (spec.zero && !spec.align) {
    spec.fill_str = "0";
    spec.align = '=';
  }
  if (v.IsString()) {
    if (spec.type && spec.type != 's') {
      Throw(std::string("Unknown format code '") + spec.type + "' for object of type 'str'");
    }
    std::string s = v.AsString();
    if (spec.precision >= 0) s = s.substr(0, ByteOffset(s, spec.precision));
    return ApplyWidth(s, spec, '<');
  }
  if (v.IsNumber()) {
    std::string body;
    const bool as_int = IntLike(v) && (spec.type == 0 || spec.type == 'd' || spec.type == 'x' ||
                                       spec.type == 'X' || spec.type == 'o' || spec.type == 'b' ||
                                       spec.type == 'c' || spec.type == 'n');
    if (as_int) {
      int64_t x = v.AsInt();
      uint64_t mag = x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
      std::string digits;
      if (spec.type == 'c') {
        if (x < 0 || x > 0x10FFFF || (x >= 0xD800 && x <= 0xDFFF)) {
          Throw("%c arg not in range(0x110000)");
        }
        return ApplyWidth(Encode(std::u32string(1, static_cast<char32_t>(x))), spec, '<');
      }
      int base = spec.type == 'x' || spec.type == 'X' ? 16
                 : spec.type == 'o'                   ? 8
                 : spec.type == 'b'                   ? 2
                                                      : 10;
      do {
        digits.push_back("0123456789abcdef"[mag % base]);
        mag /= base;
      } while (mag);
      std::reverse(digits.begin(), digits.end());
      if (spec.type == 'X') digits = Upper(digits);
      if (spec.grouping && base == 10) digits = Group(digits);
      if (spec.alt && base != 10) {
        digits = std::string("0") + (spec.type == 'X' ? 'X' : spec.type) + digits;
      }
      std::string sign = x < 0 ? "-" : spec.sign == '+' ? "+" : spec.sign == ' ' ? " " : "";
      body = sign + digits;
    } else {
      if (v.IsBool() && spec.type == 's')
        Throw("Unknown format code 's' for object of type 'bool'");
      double d = v.AsDouble();
      char type = spec.type;
      if (type == 's' || type == 'd' || type == 'x' || type == 'X' || type == 'o' || type == 'b' ||
          type == 'c') {
        Throw(std::string("Unknown format code '") + type + "' for object of type 'float'");
      }
      if (type == 0 && spec.precision < 0) {
        body = FloatRepr(d);
      } else if (type == 0) {
        body = FormatFloat(d, 'g', spec.precision == 0 ? 1 : spec.precision, spec.alt);
        if (body.find_first_of(".en") == std::string::npos) body += ".0";
      } else if (type == '%') {
        body = FormatFloat(d * 100, 'f', spec.precision < 0 ? 6 : spec.precision, spec.alt) + "%";
      } else if (type == 'n') {
        body = FormatFloat(d, 'g', spec.precision < 0 ? 6 : spec.precision, spec.alt);
      } else {
        body = FormatFloat(d, type, spec.precision < 0 ? 6 : spec.precision, spec.alt);
      }
      if (spec.grouping) {
        size_t start = body[0] == '-' ? 1 : 0;
        size_t end = body.find_first_not_of("0123456789", start);
        if (end == std::string::npos) end = body.size();
        body = body.substr(0, start) + Group(body.substr(start, end - start)) + body.substr(end);
      }
      if (body[0] != '-' && spec.sign != '-') body = std::string(1, spec.sign) + body;
    }
    return ApplyWidth(body, spec, '>');
  }
  Throw("unsupported format string passed to " + TypeName(v) + ".__format__");
}

std::string StrFormat(Interpreter& interp, const std::string& format, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  // Named fields through a map: `**d` can bring a dict's every key, and the format many fields.
  std::unordered_map<std::string_view, const Value*> named;
  for (const auto& [key, value] : args.kwargs) named[key] = &value;
  for (size_t i = 0; i < format.size();) {
    char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') {
        out.push_back('}');
        i += 2;
        continue;
      }
      Throw("Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      ++i;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out.push_back('{');
      i += 2;
      continue;
    }
    size_t end = format.find('}', i + 1);
    if (end == std::string::npos) Throw("Single '{' encountered in format string");
    std::string field = format.substr(i + 1, end - i - 1);
    if (field.find('{') != std::string::npos) Throw("nested format fields are not supported");
    i = end + 1;
    std::string spec, conv;
    size_t colon = field.find(':');
    if (colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    size_t bang = field.find('!');
    if (bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t name_end = field.find_first_of(".[");
    std::string first = field.substr(0, name_end);
    Value v;
    if (first.empty() || std::all_of(first.begin(), first.end(), ::isdigit)) {
      size_t idx = first.empty() ? auto_index++ : std::stoul(first.substr(0, 9));
      if (idx >= args.args.size())
        Throw("Replacement index " + std::to_string(idx) + " out of range");
      v = args.args[idx];
    } else {
      auto it = named.find(first);
      if (it == named.end()) Throw("KeyError: '" + first + "'");
      v = *it->second;
    }
    for (size_t k = name_end; k != std::string::npos && k < field.size();) {
      if (field[k] == '.') {
        size_t next = field.find_first_of(".[", k + 1);
        std::string attr =
            field.substr(k + 1, next == std::string::npos ? std::string::npos : next - k - 1);
        if (!attr.empty() && attr[0] == '_') Throw("access to private attributes is unsafe");
        v = interp.GetAttr(v, attr);
        k = next;
      } else {
        size_t close = field.find(']', k);
        if (close == std::string::npos) Throw("Missing ']' in format string");
        std::string key = field.substr(k + 1, close - k - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), ::isdigit);
        v = interp.GetItem(v,
                           digits ? Value::Int(std::stoll(key.substr(0, 18))) : Value::String(key));
        k = close + 1;
      }
    }
    if (conv == "r" || conv == "a") {
      v = Value::String(Repr(v));
    } else if (conv == "s") {
      v = Value::String(Str(v));
    } else if (!conv.empty()) {
      Throw("Unknown conversion specifier " + conv);
    }
    out += FormatValue(v, spec);
    interp.CheckStringSize(out.size());
  }
  return out;
}

// The function objects of the globals.
class Function : public Object {
 public:
  using Fn = std::function<Value(Interpreter&, CallArgs&)>;
  Function(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string TypeName() const override { return "function"; }
  std::string Repr() const override { return "<function " + name_ + ">"; }
  bool IsCallable() const override { return true; }
  Value Call(Interpreter& interp, CallArgs& args) override { return fn_(interp, args); }

 private:
  std::string name_;
  Fn fn_;
};

Value MakeFunction(std::string name, Function::Fn fn) {
  return Value::FromObject(std::make_shared<Function>(std::move(name), std::move(fn)));
}

DictData DictFromArgs(const CallArgs& args, const std::string& fname) {
  DictData d;
  if (args.args.size() > 1)
    Throw(fname + " expected at most 1 argument, got " + std::to_string(args.args.size()));
  if (args.args.size() == 1) {
    const Value& src = args.args[0];
    if (src.IsDict()) {
      d = src.AsDict();
    } else {
      for (const Value& pair : Iterate(src)) {
        std::vector<Value> kv = Iterate(pair);
        if (kv.size() != 2) {
          Throw("dictionary update sequence element has length " + std::to_string(kv.size()) +
                "; 2 is required");
        }
        d.Set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& [key, value] : args.kwargs) d.Set(Value::String(key), value);
  return d;
}

class DictFunction : public Object {
 public:
  std::string TypeName() const override { return "TemplateDict"; }
  bool IsCallable() const override { return true; }
  Value Call(Interpreter& interp, CallArgs& args) override {
    DictData d = DictFromArgs(args, "dict");
    interp.Charge(d.entries.size());
    return Value::Dict(std::move(d));
  }
  Value GetAttr(const std::string& name) override {
    if (name != "fromkeys") return Object::GetAttr(name);
    return MakeFunction("fromkeys", [](Interpreter& interp, CallArgs& args) {
      if (args.args.empty() || args.args.size() > 2 || !args.kwargs.empty()) {
        Throw("fromkeys expected 1 or 2 arguments");
      }
      DictData d;
      Value fill = args.args.size() > 1 ? args.args[1] : Value::None();
      for (const Value& key : Iterate(args.args[0])) d.Set(key, fill);
      interp.Charge(d.entries.size());
      return Value::Dict(std::move(d));
    });
  }
};

class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  std::string TypeName() const override { return "Cycler"; }
  void Clear() override { items_.clear(); }
  Value GetAttr(const std::string& name) override {
    if (name == "current") return items_.empty() ? Value::Undefined("empty cycler") : items_[pos_];
    if (name == "next" || name == "reset") {
      auto self = self_.lock();
      bool next = name == "next";
      return MakeFunction(name, [self, next](Interpreter&, CallArgs& args) {
        if (!args.args.empty() || !args.kwargs.empty()) Throw("takes no arguments");
        auto* c = static_cast<Cycler*>(self.get());
        if (!next) {
          c->pos_ = 0;
          return Value::None();
        }
        if (c->items_.empty()) Throw("empty cycler");
        Value v = c->items_[c->pos_];
        c->pos_ = (c->pos_ + 1) % c->items_.size();
        return v;
      });
    }
    return Object::GetAttr(name);
  }
  std::weak_ptr<Object> self_;

 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  std::string TypeName() const override { return "Joiner"; }
  bool IsCallable() const override { return true; }
  Value Call(Interpreter&, CallArgs& args) override {
    if (!args.args.empty() || !args.kwargs.empty()) Throw("joiner() takes no arguments");
    if (!used_) {
      used_ = true;
      return Value::String("");
    }
    return Value::String(sep_);
  }

 private:
  std::string sep_;
  bool used_ = false;
};

}  // namespace

std::string PercentFormat(const std::string& format, const Value& args) {
  std::vector<Value> items;
  const Value* mapping = nullptr;
  if (args.IsList() && args.list_kind() == ListKind::kTuple) {
    items = args.Items();
  } else {
    if (args.IsDict()) mapping = &args;
    items.push_back(args);
  }
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  auto take = [&]() -> Value {
    if (next >= items.size()) Throw("not enough arguments for format string");
    return items[next++];
  };
  for (size_t i = 0; i < format.size();) {
    if (format[i] != '%') {
      out.push_back(format[i++]);
      continue;
    }
    ++i;
    if (i >= format.size()) Throw("incomplete format");
    Value v;
    bool have_value = false;
    if (format[i] == '(') {
      size_t close = format.find(')', i);
      if (close == std::string::npos) Throw("incomplete format key");
      if (!mapping) Throw("format requires a mapping");
      const Value* found =
          mapping->AsDict().Find(Value::String(format.substr(i + 1, close - i - 1)));
      if (!found) Throw("KeyError: '" + format.substr(i + 1, close - i - 1) + "'");
      v = *found;
      have_value = true;
      used_mapping = true;
      i = close + 1;
    }
    Spec spec;
    std::string flags;
    while (i < format.size() &&
           std::string_view("-+ #0").find(format[i]) != std::string_view::npos) {
      flags.push_back(format[i++]);
    }
    auto number = [&](int64_t* out_n) {
      if (i < format.size() && format[i] == '*') {
        ++i;
        Value w = take();
        if (!IntLike(w)) Throw("* wants int");
        *out_n = w.AsInt();
        if (*out_n > (int64_t{1} << 24)) Throw("format width too large");
        return;
      }
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
        *out_n = std::max<int64_t>(*out_n, 0) * 10 + (format[i++] - '0');
        if (*out_n > (int64_t{1} << 24)) Throw("format width too large");
      }
    };
    number(&spec.width);
    if (i < format.size() && format[i] == '.') {
      ++i;
      spec.precision = 0;
      number(&spec.precision);
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) Throw("incomplete format");
    const char type = format[i++];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!have_value) v = take();
    const bool left = flags.find('-') != std::string::npos;
    const bool zero = flags.find('0') != std::string::npos && !left;
    std::string body;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        body = type == 's' ? Str(v) : Repr(v);
        if (spec.precision >= 0) body = body.substr(0, ByteOffset(body, spec.precision));
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        int64_t x;
        if (IntLike(v)) {
          x = v.AsInt();
        } else if (v.IsFloat() && (type == 'd' || type == 'i' || type == 'u')) {
          if (!std::isfinite(v.AsDouble())) Throw("cannot convert float to integer");
          if (std::fabs(v.AsDouble()) >= 9.2e18) {
            Throw("integer too large (latent computes with 64-bit integers)");
          }
          x = static_cast<int64_t>(v.AsDouble());
        } else {
          Throw(std::string("%") + type + " format: a number is required, not " + TypeName(v));
        }
        char fmt[32];
        std::snprintf(
            fmt, sizeof(fmt), "%%%s%s%s.%dll%c",
            flags.find('+') != std::string::npos   ? "+"
            : flags.find(' ') != std::string::npos ? " "
                                                   : "",
            flags.find('#') != std::string::npos ? "#" : "", "",
            static_cast<int>(spec.precision < 0 ? 1 : std::min<int64_t>(spec.precision, 500)),
            type == 'i' || type == 'u' ? 'd' : type);
        char buf[1024];
        std::snprintf(buf, sizeof(buf), fmt, static_cast<long long>(x));
        body = buf;
        if (type == 'o' && flags.find('#') != std::string::npos) {
          // Python writes 0o17 where C writes 017.
          size_t at = body.find_first_of("0123456789");
          if (at != std::string::npos) body.insert(at + 1, "o");
        }
        break;
      }
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G': {
        if (!v.IsNumber()) {
          Throw(std::string("must be real number, not ") + TypeName(v));
        }
        body = FormatFloat(v.AsDouble(), type, spec.precision < 0 ? 6 : spec.precision,
                           flags.find('#') != std::string::npos);
        if (flags.find('+') != std::string::npos && body[0] != '-') {
          body = "+" + body;
        } else if (flags.find(' ') != std::string::npos && body[0] != '-') {
          body = " " + body;
        }
        break;
      }
      case 'c':
        if (IntLike(v)) {
          if (v.AsInt() < 0 || v.AsInt() > 0x10FFFF ||
              (v.AsInt() >= 0xD800 && v.AsInt() <= 0xDFFF)) {
            Throw("%c arg not in range(0x110000)");
          }
          body = Encode(std::u32string(1, static_cast<char32_t>(v.AsInt())));
        } else if (v.IsString() && CodePointCount(v.AsString()) == 1) {
          body = v.AsString();
        } else {
          Throw("%c requires int or char");
        }
        break;
      default:
        Throw(std::string("unsupported format character '") + type + "'");
    }
    const int64_t len = static_cast<int64_t>(CodePointCount(body));
    if (spec.width > len) {
      const int64_t pad = spec.width - len;
      if (left) {
        body += std::string(pad, ' ');
      } else if (zero && type != 's' && type != 'r' && type != 'a' && type != 'c') {
        size_t sign =
            (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) ? 1 : 0;
        body.insert(sign, std::string(pad, '0'));
      } else {
        body.insert(0, std::string(pad, ' '));
      }
    }
    out += body;
  }
  // Python skips this check when the operand supports indexing (a dict, a list...).
  const bool indexable =
      mapping || args.IsUndefined() || (args.IsSequence() && args.list_kind() != ListKind::kTuple);
  if (!used_mapping && next < items.size() && !indexable) {
    Throw("not all arguments converted during string formatting");
  }
  return out;
}

std::vector<std::pair<std::string, Value>> Globals() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back(
      "range", MakeFunction("range", [](Interpreter& interp, CallArgs& args) {
        if (!args.kwargs.empty()) Throw("range() takes no keyword arguments");
        if (args.args.empty() || args.args.size() > 3) {
          Throw("range expected 1 to 3 arguments, got " + std::to_string(args.args.size()));
        }
        int64_t start = 0, stop, step = 1;
        if (args.args.size() == 1) {
          stop = ToInt(args.args[0], "range");
        } else {
          start = ToInt(args.args[0], "range");
          stop = ToInt(args.args[1], "range");
          if (args.args.size() == 3) step = ToInt(args.args[2], "range");
        }
        if (step == 0) Throw("range() arg 3 must not be zero");
        // Python's length of the range, computed without overflow.
        __int128 n = 0;
        if (step > 0 && start < stop) n = (static_cast<__int128>(stop) - start - 1) / step + 1;
        if (step < 0 && start > stop)
          n = (static_cast<__int128>(start) - stop - 1) / (-static_cast<__int128>(step)) + 1;
        if (n > 100000) {
          Throw("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        }
        interp.Charge(static_cast<uint64_t>(n));
        std::vector<Value> items;
        items.reserve(static_cast<size_t>(n));
        for (int64_t k = 0; k < static_cast<int64_t>(n); ++k)
          items.push_back(Value::Int(start + k * step));
        auto data = std::make_shared<ListData>();
        data->items = std::move(items);
        data->kind = ListKind::kRange;
        data->range_repr = "range(" + std::to_string(start) + ", " + std::to_string(stop) +
                           (step != 1 ? ", " + std::to_string(step) : "") + ")";
        return Value::FromList(std::move(data));
      }));
  g.emplace_back("dict", Value::FromObject(std::make_shared<DictFunction>()));
  g.emplace_back("namespace", MakeFunction("namespace", [](Interpreter& interp, CallArgs& args) {
                   DictData attrs = DictFromArgs(args, "namespace");
                   auto ns = std::make_shared<Namespace>();
                   for (auto& [key, value] : attrs.entries) {
                     if (!key.IsString()) Throw("namespace attribute names must be strings");
                     ns->Set(key.AsString(), value);
                   }
                   interp.Track(ns);
                   return Value::FromObject(ns);
                 }));
  g.emplace_back("raise_exception",
                 MakeFunction("raise_exception", [](Interpreter&, CallArgs& args) -> Value {
                   if (args.args.size() != 1 || !args.kwargs.empty()) {
                     Throw("raise_exception() takes exactly one argument");
                   }
                   Throw("raise_exception: " + Str(args.args[0]));
                 }));
  g.emplace_back("strftime_now",
                 MakeFunction("strftime_now", [](Interpreter& interp, CallArgs& args) {
                   if (args.args.size() != 1 || !args.kwargs.empty() || !args.args[0].IsString()) {
                     Throw("strftime_now() takes one format string");
                   }
                   std::time_t now = std::time(nullptr);
                   std::tm tm{};
                   localtime_r(&now, &tm);
                   const std::string& fmt = args.args[0].AsString();
                   if (fmt.size() > 1024) Throw("strftime_now format too long");
                   std::vector<char> buf(fmt.size() * 64 + 64);
                   size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
                   return Value::String(std::string(buf.data(), n));
                 }));
  g.emplace_back("cycler", MakeFunction("cycler", [](Interpreter& interp, CallArgs& args) {
                   if (!args.kwargs.empty()) Throw("cycler() takes no keyword arguments");
                   auto c = std::make_shared<Cycler>(args.args);
                   c->self_ = c;
                   interp.Track(c);
                   return Value::FromObject(c);
                 }));
  g.emplace_back("joiner", MakeFunction("joiner", [](Interpreter& interp, CallArgs& args) {
                   const Value* sep = Arg(args, 0, "sep");
                   if (args.args.size() > 1) Throw("joiner() takes at most 1 argument");
                   return Value::FromObject(std::make_shared<Joiner>(sep ? Str(*sep) : ", "));
                 }));
  g.emplace_back("lipsum", MakeFunction("lipsum", [](Interpreter&, CallArgs&) -> Value {
                   Throw("lipsum() is not supported");
                 }));
  return g;
}

}  // namespace latent::tokenizer::jinja
