#include "tokenizer/chat_template/builtins.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <set>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/pystr.h"

namespace latent::tokenizer::jinja {
namespace {

// Binds call arguments to named parameters the way Python does, for a function `fname`.
class Binder {
 public:
  Binder(std::string_view fname, const CallArgs& call,
         std::initializer_list<std::string_view> names)
      : fname_(fname), slots_(names.size(), nullptr) {
    if (call.args.size() > names.size()) {
      Throw(std::string(fname) + "() takes at most " + std::to_string(names.size()) +
            " argument(s) (" + std::to_string(call.args.size()) + " given)");
    }
    for (size_t i = 0; i < call.args.size(); ++i) slots_[i] = &call.args[i];
    for (const auto& [key, value] : call.kwargs) {
      size_t i = 0;
      for (std::string_view name : names) {
        if (name == key) break;
        ++i;
      }
      if (i == names.size()) {
        Throw(std::string(fname) + "() got an unexpected keyword argument '" + key + "'");
      }
      if (slots_[i]) {
        Throw(std::string(fname) + "() got multiple values for argument '" + key + "'");
      }
      slots_[i] = &value;
    }
  }

  bool Has(size_t i) const { return slots_[i] != nullptr; }
  // By value: `fallback` is often a temporary.
  Value Get(size_t i, const Value& fallback) const { return slots_[i] ? *slots_[i] : fallback; }
  const Value& Required(size_t i, std::string_view name) const {
    if (!slots_[i]) {
      Throw(fname_ + "() missing required argument '" + std::string(name) + "'");
    }
    return *slots_[i];
  }

 private:
  std::string fname_;
  std::vector<const Value*> slots_;
};

const Value kNone = Value::None();
const Value kFalse = Value::Bool(false);
const Value kUndefined;

std::optional<std::string> OptString(const Value& v, std::string_view what) {
  if (v.IsNone() || v.IsUndefined()) return std::nullopt;
  if (!v.IsString()) Throw(std::string(what) + " arg must be None or str");
  return v.AsString();
}

const std::string& ToStr(const Value& v, std::string_view what) {
  if (!v.IsString()) {
    Throw(std::string(what) + " must be str, not " + TypeName(v));
  }
  return v.AsString();
}

Value MakeString(Interpreter& interp, std::string s) {
  interp.CheckStringSize(s.size());
  return Value::String(std::move(s));
}

Value MakeList(Interpreter& interp, std::vector<Value> items, ListKind kind = ListKind::kList) {
  interp.Charge(items.size());
  return Value::List(std::move(items), kind);
}

// jinja2's make_attrgetter: "a.b.0" walks attributes and items.
Value GetPath(Interpreter& interp, const Value& item, const Value& attribute) {
  if (attribute.IsNone() || attribute.IsUndefined()) return item;
  if (!attribute.IsString()) return interp.GetItem(item, attribute);
  Value v = item;
  for (const std::string& part : Split(attribute.AsString(), std::string("."), -1)) {
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                               [](char c) { return c >= '0' && c <= '9'; });
    if (digits && part.size() < 18) {
      v = interp.GetItem(v, Value::Int(std::stoll(part)));
    } else {
      v = interp.GetItem(v, Value::String(part));
    }
  }
  return v;
}

Value IgnoreCase(const Value& v) { return v.IsString() ? Value::String(Lower(v.AsString())) : v; }

// Python's float(str): surrounding whitespace, underscores between digits, inf and nan.
std::optional<double> ParseFloat(const std::string& text) {
  std::string s = Strip(text, std::nullopt, true, true);
  std::string clean;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (i == 0 || i + 1 >= s.size() || !isdigit(static_cast<unsigned char>(s[i - 1])) ||
          !isdigit(static_cast<unsigned char>(s[i + 1]))) {
        return std::nullopt;
      }
      continue;
    }
    clean.push_back(s[i]);
  }
  if (clean.empty()) return std::nullopt;
  std::string lower = Lower(clean);
  std::string body = lower[0] == '+' || lower[0] == '-' ? lower.substr(1) : lower;
  if (body == "inf" || body == "infinity" || body == "nan") {
    double v = body == "nan" ? NAN : INFINITY;
    return lower[0] == '-' ? -v : v;
  }
  for (char c : body) {
    if (!(isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == '+' || c == '-')) {
      return std::nullopt;
    }
  }
  char* end = nullptr;
  double v = std::strtod(clean.c_str(), &end);
  if (end != clean.c_str() + clean.size()) return std::nullopt;
  return v;
}

// Python's int(str, base) for bases 2..36 and 0.
std::optional<int64_t> ParseInt(const std::string& text, int64_t base) {
  std::string s = Strip(text, std::nullopt, true, true);
  bool neg = false;
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  auto prefix = [&](char p) { return i + 1 < s.size() && s[i] == '0' && (s[i + 1] | 0x20) == p; };
  if (base == 0) {
    base = prefix('x') ? 16 : prefix('o') ? 8 : prefix('b') ? 2 : 10;
    if (base != 10) i += 2;
  } else if ((base == 16 && prefix('x')) || (base == 8 && prefix('o')) ||
             (base == 2 && prefix('b'))) {
    i += 2;
  }
  if (base < 2 || base > 36) Throw("int() base must be >= 2 and <= 36, or 0");
  if (i >= s.size()) return std::nullopt;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (!prev_digit) return std::nullopt;
      prev_digit = false;
      continue;
    }
    int d = isdigit(static_cast<unsigned char>(c))   ? c - '0'
            : isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                     : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) {
      Throw("integer too large (latent computes with 64-bit integers)");
    }
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  return neg ? -v : v;
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// Sorts with Python's sorted(): stable, and reverse keeps equal items in their order.
void SortValues(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return reverse ? Less(keys[b], keys[a]) : Less(keys[a], keys[b]);
  });
  std::vector<Value> sorted;
  sorted.reserve(items.size());
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
}

// ---------------------------------------------------------------------------------------------
// Filters.

Value FAbs(Interpreter&, const Value& v, CallArgs& args) {
  Binder("abs", args, {});
  if (IntLike(v)) {
    if (v.AsInt() == INT64_MIN) Throw("integer overflow");
    return Value::Int(std::llabs(v.AsInt()));
  }
  if (v.IsFloat()) return Value::Float(std::fabs(v.AsDouble()));
  Throw("bad operand type for abs(): '" + TypeName(v) + "'");
}

Value FAttr(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("attr", args, {"name"});
  const Value& name = b.Required(0, "name");
  if (!name.IsString()) Throw("attribute name must be a string");
  if (v.IsUndefined()) return Value::Undefined("'" + name.AsString() + "' is undefined");
  if (v.IsObject()) return v.AsObject().GetAttr(name.AsString());
  bool found = false;
  Value attr = StrAttribute(v, name.AsString(), &found);
  if (found) return attr;
  return Value::Undefined("'" + TypeName(v) + " object' has no attribute '" + name.AsString() +
                          "'");
}

Value FBatch(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("batch", args, {"linecount", "fill_with"});
  int64_t n = ToInt(b.Required(0, "linecount"), "linecount");
  if (n > 0) CheckItems(static_cast<size_t>(n));
  const Value& fill = b.Get(1, kNone);
  std::vector<Value> out, tmp;
  for (const Value& item : Iterate(v)) {
    if (static_cast<int64_t>(tmp.size()) == n) {
      out.push_back(Value::List(std::move(tmp)));
      tmp.clear();
    }
    tmp.push_back(item);
  }
  if (!tmp.empty()) {
    if (!fill.IsNone() && static_cast<int64_t>(tmp.size()) < n) {
      interp.Charge(n);
      tmp.resize(n, fill);
    }
    out.push_back(Value::List(std::move(tmp)));
  }
  return MakeList(interp, std::move(out), ListKind::kIterator);
}

Value FCapitalize(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("capitalize", args, {});
  return MakeString(interp, Capitalize(Str(v)));
}

Value FCenter(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("center", args, {"width"});
  int64_t width = ToInt(b.Get(0, Value::Int(80)), "width");
  interp.CheckStringSize(width > 0 ? static_cast<size_t>(width) : 0);
  return MakeString(interp, Pad(Str(v), width, " ", 0));
}

Value FLength(Interpreter&, const Value& v, CallArgs& args) {
  Binder("length", args, {});
  return Value::Int(Length(v));
}

Value FDefault(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("default", args, {"default_value", "boolean"});
  static const Value kEmpty = Value::String("");
  if (v.IsUndefined() || (Truthy(b.Get(1, kFalse)) && !Truthy(v))) return b.Get(0, kEmpty);
  return v;
}

Value FDictsort(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.IsDict()) Throw("dictsort expects a mapping, not " + TypeName(v));
  const bool case_sensitive = Truthy(b.Get(0, kFalse));
  static const Value kKey = Value::String("key");
  const Value& by = b.Get(1, kKey);
  int pos;
  if (by.IsString() && by.AsString() == "key") {
    pos = 0;
  } else if (by.IsString() && by.AsString() == "value") {
    pos = 1;
  } else {
    Throw("You can only sort by either \"key\" or \"value\"");
  }
  std::vector<Value> items, keys;
  for (const auto& [key, item] : v.AsDict().entries) {
    items.push_back(Value::Tuple({key, item}));
    const Value& k = pos == 0 ? key : item;
    keys.push_back(case_sensitive ? k : IgnoreCase(k));
  }
  SortValues(items, keys, Truthy(b.Get(2, kFalse)));
  return MakeList(interp, std::move(items));
}

Value FEscape(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("escape", args, {});
  return MakeString(interp, HtmlEscape(Str(v)));
}

Value FFirst(Interpreter&, const Value& v, CallArgs& args) {
  Binder("first", args, {});
  if (v.IsString()) {
    const std::string& s = v.AsString();
    if (s.empty()) return Value::Undefined("No first item, sequence was empty.");
    return Value::String(s.substr(0, CharLen(s)));
  }
  std::vector<Value> items = Iterate(v);
  if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
  return items.front();
}

Value FLast(Interpreter&, const Value& v, CallArgs& args) {
  Binder("last", args, {});
  if (v.IsList() && v.list_kind() == ListKind::kIterator) {
    Throw("'generator' object is not reversible");
  }
  if (v.IsString()) {
    std::vector<Value> chars = Iterate(v);
    if (chars.empty()) return Value::Undefined("No last item, sequence was empty.");
    return chars.back();
  }
  if (v.IsObject() || v.IsNone() || v.IsNumber()) {
    Throw("'" + TypeName(v) + "' object is not reversible");
  }
  std::vector<Value> items = Iterate(v);
  if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
  return items.back();
}

Value FFloat(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("float", args, {"default"});
  static const Value kZero = Value::Float(0.0);
  if (v.IsUndefined()) Throw(v.UndefinedHint());  // float(Undefined) raises
  if (v.IsNumber()) return Value::Float(v.AsDouble());
  if (v.IsString()) {
    if (auto d = ParseFloat(v.AsString())) return Value::Float(*d);
  }
  return b.Get(0, kZero);
}

Value FFormat(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!args.args.empty() && !args.kwargs.empty()) {
    Throw("can't handle positional and keyword arguments at the same time");
  }
  Value operand;
  if (!args.kwargs.empty()) {
    DictData d;
    for (const auto& [key, item] : args.kwargs) d.Set(Value::String(key), item);
    operand = Value::Dict(std::move(d));
  } else {
    operand = Value::Tuple(args.args);
  }
  return MakeString(interp, PercentFormat(Str(v), operand));
}

Value FIndent(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("indent", args, {"width", "first", "blank"});
  const Value& width = b.Get(0, Value::Int(4));
  std::string indention;
  if (width.IsString()) {
    indention = width.AsString();
  } else {
    int64_t n = ToInt(width, "width");
    interp.CheckStringSize(n > 0 ? static_cast<size_t>(n) : 0);
    indention = std::string(n > 0 ? n : 0, ' ');
  }
  // jinja2 appends "\n" to the value itself, which only works for strings.
  if (!v.IsString()) Throw("indent expects a string, not " + TypeName(v));
  std::string s = v.AsString() + "\n";
  std::vector<std::string> lines = SplitLines(s, false);
  std::string rv;
  if (Truthy(b.Get(2, kFalse))) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i) rv += "\n" + indention;
      rv += lines[i];
      interp.CheckStringSize(rv.size());
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      rv += "\n";
      if (!lines[i].empty()) rv += indention;
      rv += lines[i];
      interp.CheckStringSize(rv.size());
    }
  }
  if (Truthy(b.Get(1, kFalse))) rv = indention + rv;
  return MakeString(interp, std::move(rv));
}

Value FInt(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("int", args, {"default", "base"});
  static const Value kZero = Value::Int(0);
  static const Value kTen = Value::Int(10);
  if (v.IsUndefined()) Throw(v.UndefinedHint());  // int(Undefined) raises
  if (IntLike(v)) return Value::Int(v.AsInt());
  auto from_double = [&](double d) -> std::optional<Value> {
    if (!std::isfinite(d)) return std::nullopt;
    if (std::fabs(d) >= 9.2e18) Throw("integer too large (latent computes with 64-bit integers)");
    return Value::Int(static_cast<int64_t>(d));
  };
  if (v.IsFloat()) {
    if (auto r = from_double(v.AsDouble())) return *r;
    return b.Get(0, kZero);
  }
  if (v.IsString()) {
    if (auto i = ParseInt(v.AsString(), ToInt(b.Get(1, kTen), "base"))) return Value::Int(*i);
    if (auto d = ParseFloat(v.AsString())) {
      if (auto r = from_double(*d)) return *r;
    }
  }
  return b.Get(0, kZero);
}

Value FJoin(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("join", args, {"d", "attribute"});
  static const Value kEmpty = Value::String("");
  const std::string sep = Str(b.Get(0, kEmpty));
  const Value& attribute = b.Get(1, kNone);
  std::string out;
  bool first = true;
  for (const Value& item : Iterate(v)) {
    if (!first) out += sep;
    first = false;
    AppendStr(attribute.IsNone() ? item : GetPath(interp, item, attribute), out);
    interp.CheckStringSize(out.size());
  }
  return Value::String(std::move(out));
}

Value FList(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("list", args, {});
  return MakeList(interp, Iterate(v));
}

Value FLower(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("lower", args, {});
  return MakeString(interp, Lower(Str(v)));
}

Value FUpper(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("upper", args, {});
  return MakeString(interp, Upper(Str(v)));
}

Value FItems(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("items", args, {});
  if (v.IsUndefined()) return MakeList(interp, {}, ListKind::kIterator);
  if (!v.IsDict()) Throw("Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& [key, item] : v.AsDict().entries) items.push_back(Value::Tuple({key, item}));
  return MakeList(interp, std::move(items), ListKind::kIterator);
}

Value FMap(Interpreter& interp, const Value& v, CallArgs& args) {
  std::vector<Value> out;
  if (!Truthy(v)) return MakeList(interp, {}, ListKind::kIterator);
  if (args.args.empty()) {
    Value attribute, fallback = Value::None();
    bool has_attribute = false;
    for (const auto& [key, item] : args.kwargs) {
      if (key == "attribute") {
        attribute = item;
        has_attribute = true;
      } else if (key == "default") {
        fallback = item;
      } else {
        Throw("Unexpected keyword argument '" + key + "'");
      }
    }
    if (!has_attribute) Throw("map requires a filter argument");
    for (const Value& item : Iterate(v)) {
      Value r = GetPath(interp, item, attribute);
      if (r.IsUndefined() && !fallback.IsNone()) r = fallback;
      out.push_back(std::move(r));
    }
  } else {
    if (!args.args[0].IsString()) Throw("map filter name must be a string");
    std::string name = args.args[0].AsString();
    CallArgs rest;
    rest.args.assign(args.args.begin() + 1, args.args.end());
    rest.kwargs = args.kwargs;
    for (const Value& item : Iterate(v)) {
      CallArgs a = rest;
      out.push_back(interp.CallFilter(name, item, a));
    }
  }
  return MakeList(interp, std::move(out), ListKind::kIterator);
}

Value MinMax(Interpreter& interp, const Value& v, CallArgs& args, bool max) {
  Binder b(max ? "max" : "min", args, {"case_sensitive", "attribute"});
  std::vector<Value> items = Iterate(v);
  if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
  const bool case_sensitive = Truthy(b.Get(0, kFalse));
  const Value& attribute = b.Get(1, kNone);
  auto key = [&](const Value& item) {
    Value k = GetPath(interp, item, attribute);
    return case_sensitive ? k : IgnoreCase(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (max ? Less(best_key, k) : Less(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}

Value FMin(Interpreter& interp, const Value& v, CallArgs& args) {
  return MinMax(interp, v, args, false);
}
Value FMax(Interpreter& interp, const Value& v, CallArgs& args) {
  return MinMax(interp, v, args, true);
}

Value SelectOrReject(Interpreter& interp, const Value& v, CallArgs& args, bool select,
                     bool lookup_attr) {
  if (!Truthy(v)) return MakeList(interp, {}, ListKind::kIterator);
  size_t off = 0;
  Value attr;
  if (lookup_attr) {
    if (args.args.empty()) Throw("Missing parameter for attribute name");
    attr = args.args[0];
    off = 1;
  }
  std::optional<std::string> test;
  CallArgs test_args;
  if (args.args.size() > off) {
    if (!args.args[off].IsString()) Throw("test name must be a string");
    test = args.args[off].AsString();
    test_args.args.assign(args.args.begin() + off + 1, args.args.end());
    test_args.kwargs = args.kwargs;
  }
  std::vector<Value> out;
  for (const Value& item : Iterate(v)) {
    Value x = lookup_attr ? GetPath(interp, item, attr) : item;
    bool ok;
    if (test) {
      CallArgs a = test_args;
      ok = interp.CallTest(*test, x, a);
    } else {
      ok = Truthy(x);
    }
    if (ok == select) out.push_back(item);
  }
  return MakeList(interp, std::move(out), ListKind::kIterator);
}

Value FSelect(Interpreter& interp, const Value& v, CallArgs& args) {
  return SelectOrReject(interp, v, args, true, false);
}
Value FReject(Interpreter& interp, const Value& v, CallArgs& args) {
  return SelectOrReject(interp, v, args, false, false);
}
Value FSelectAttr(Interpreter& interp, const Value& v, CallArgs& args) {
  return SelectOrReject(interp, v, args, true, true);
}
Value FRejectAttr(Interpreter& interp, const Value& v, CallArgs& args) {
  return SelectOrReject(interp, v, args, false, true);
}

Value FReplace(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("replace", args, {"old", "new", "count"});
  const Value& count = b.Get(2, kNone);
  std::string old = Str(b.Required(0, "old"));
  std::string repl = Str(b.Required(1, "new"));
  std::string s = Str(v);
  const int64_t limit = count.IsNone() ? -1 : ToInt(count, "count");
  // Bound the result before building it.
  const size_t occurrences = Count(s, old, std::nullopt, std::nullopt);
  const size_t n = limit < 0 ? occurrences : std::min<size_t>(occurrences, limit);
  if (repl.size() > old.size()) {
    const size_t grow = repl.size() - old.size();
    if (n > interp.limits().max_output_bytes / grow) {
      interp.CheckStringSize(interp.limits().max_output_bytes + 1);
    }
    interp.CheckStringSize(s.size() + n * grow);
  }
  std::string out = Replace(s, old, repl, limit);
  return MakeString(interp, std::move(out));
}

Value FReverse(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("reverse", args, {});
  if (v.IsString()) {
    std::u32string u = Decode(v.AsString());
    std::reverse(u.begin(), u.end());
    return MakeString(interp, Encode(u));
  }
  if (v.IsNone() || v.IsNumber() || v.IsObject()) Throw("argument must be iterable");
  std::vector<Value> items = Iterate(v);
  std::reverse(items.begin(), items.end());
  // reversed() of a generator fails, and jinja2 falls back to a reversed list.
  const bool generator = v.IsList() && v.list_kind() == ListKind::kIterator;
  return MakeList(interp, std::move(items), generator ? ListKind::kList : ListKind::kIterator);
}

double RoundHalfEven(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits > 300) return x;
  if (digits >= 0) {
    char buf[1024];  // 309 integer digits, 300 decimals
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);
    return std::strtod(buf, nullptr);
  }
  double p = std::pow(10.0, static_cast<double>(-digits));
  double y = x / p;
  double r = std::nearbyint(y);  // default rounding mode: ties to even
  return r * p;
}

Value FRound(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("round", args, {"precision", "method"});
  static const Value kCommon = Value::String("common");
  int64_t precision = ToInt(b.Get(0, Value::Int(0)), "precision");
  const Value& method = b.Get(1, kCommon);
  if (!method.IsString() || (method.AsString() != "common" && method.AsString() != "ceil" &&
                             method.AsString() != "floor")) {
    Throw("method must be common, ceil or floor");
  }
  if (!v.IsNumber()) Throw("type " + TypeName(v) + " doesn't define __round__ method");
  if (method.AsString() == "common") {
    if (IntLike(v)) {
      if (precision >= 0) return Value::Int(v.AsInt());
      const double r = RoundHalfEven(v.AsDouble(), precision);
      if (!(std::fabs(r) < 9.2e18))
        Throw("integer too large (latent computes with 64-bit integers)");
      return Value::Int(static_cast<int64_t>(r));
    }
    return Value::Float(RoundHalfEven(v.AsDouble(), precision));
  }
  double p = std::pow(10.0, static_cast<double>(precision));
  double x = v.AsDouble() * p;
  x = method.AsString() == "ceil" ? std::ceil(x) : std::floor(x);
  return Value::Float(x / p);
}

Value FSafe(Interpreter&, const Value& v, CallArgs& args) {
  Binder("safe", args, {});
  return v.IsString() ? v : Value::String(Str(v));
}

Value FSlice(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("slice", args, {"slices", "fill_with"});
  int64_t slices = ToInt(b.Required(0, "slices"), "slices");
  if (slices <= 0) Throw("integer division or modulo by zero");
  CheckItems(static_cast<size_t>(slices));
  const Value& fill = b.Get(1, kNone);
  std::vector<Value> seq = Iterate(v);
  const int64_t length = static_cast<int64_t>(seq.size());
  const int64_t per = length / slices, extra = length % slices;
  interp.Charge(slices);
  std::vector<Value> out;
  int64_t offset = 0;
  for (int64_t n = 0; n < slices; ++n) {
    int64_t start = offset + n * per;
    if (n < extra) ++offset;
    int64_t end = offset + (n + 1) * per;
    std::vector<Value> tmp(seq.begin() + start, seq.begin() + end);
    if (!fill.IsNone() && n >= extra) tmp.push_back(fill);
    out.push_back(Value::List(std::move(tmp)));
  }
  return MakeList(interp, std::move(out), ListKind::kIterator);
}

Value FSort(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("sort", args, {"reverse", "case_sensitive", "attribute"});
  std::vector<Value> items = Iterate(v);
  const bool case_sensitive = Truthy(b.Get(1, kFalse));
  const Value& attribute = b.Get(2, kNone);
  std::vector<std::string> attrs;
  if (attribute.IsString()) {
    attrs = Split(attribute.AsString(), std::string(","), -1);
  }
  std::vector<Value> keys;
  for (const Value& item : items) {
    // make_multi_attrgetter: a list of keys, one per comma-separated attribute.
    std::vector<Value> parts;
    if (attrs.empty()) {
      Value k = attribute.IsNone() ? item : GetPath(interp, item, attribute);
      parts.push_back(case_sensitive ? k : IgnoreCase(k));
    } else {
      for (const auto& a : attrs) {
        Value k = GetPath(interp, item, Value::String(a));
        parts.push_back(case_sensitive ? k : IgnoreCase(k));
      }
    }
    keys.push_back(Value::List(std::move(parts)));
  }
  SortValues(items, keys, Truthy(b.Get(0, kFalse)));
  return MakeList(interp, std::move(items));
}

Value FString(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("string", args, {});
  if (v.IsString()) return v;
  return MakeString(interp, Str(v));
}

Value FStriptags(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("striptags", args, {});
  std::string s = Str(v), stripped;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 4, "<!--") == 0) {
      size_t end = s.find("-->", i + 4);
      if (end != std::string::npos) {
        i = end + 3;
        continue;
      }
    }
    if (s[i] == '<') {
      size_t end = s.find('>', i + 1);
      if (end != std::string::npos) {
        i = end + 1;
        continue;
      }
    }
    stripped.push_back(s[i++]);
  }
  static const std::pair<const char*, const char*> kEntities[] = {
      {"&amp;", "&"},  {"&lt;", "<"},  {"&gt;", ">"},         {"&quot;", "\""},
      {"&#34;", "\""}, {"&#39;", "'"}, {"&nbsp;", "\xc2\xa0"}};
  for (const auto& [from, to] : kEntities) stripped = Replace(stripped, from, to, -1);
  std::string out;
  for (const auto& word : Split(stripped, std::nullopt, -1)) {
    if (!out.empty()) out += " ";
    out += word;
  }
  return MakeString(interp, std::move(out));
}

Value FSum(Interpreter& interp, const Value& v, CallArgs& args);

Value FTitle(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder("title", args, {});
  // jinja2 splits before runs of -, whitespace, (, {, [ and <, and capitalizes each piece.
  std::u32string u = Decode(Str(v));
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || IsSpace(c);
  };
  std::string out;
  size_t i = 0;
  while (i < u.size()) {
    size_t j = i;
    const bool sep = is_sep(u[i]);
    while (j < u.size() && is_sep(u[j]) == sep) ++j;
    std::string piece = Encode(std::u32string_view(u).substr(i, j - i));
    if (sep) {
      out += piece;
    } else {
      // item[0].upper() + item[1:].lower()
      const size_t first = CharLen(piece);
      out += Upper(piece.substr(0, first)) + Lower(piece.substr(first));
    }
    i = j;
  }
  return MakeString(interp, std::move(out));
}

Value FToJson(Interpreter& interp, const Value& v, CallArgs& args) {
  // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
  // sort_keys=False).
  Binder b("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions opt;
  opt.ensure_ascii = Truthy(b.Get(0, kFalse));
  const Value& indent = b.Get(1, kNone);
  if (!indent.IsNone()) {
    opt.has_indent = true;
    if (indent.IsString()) {
      opt.indent = indent.AsString();
    } else {
      int64_t n = ToInt(indent, "indent");
      opt.indent = std::string(n > 0 ? std::min<int64_t>(n, 1024) : 0, ' ');
    }
    opt.item_separator = ",";
  }
  const Value& separators = b.Get(2, kNone);
  if (!separators.IsNone()) {
    std::vector<Value> seps = Iterate(separators);
    if (seps.size() != 2) Throw("separators must be an (item_separator, key_separator) pair");
    opt.item_separator = ToStr(seps[0], "item_separator");
    opt.key_separator = ToStr(seps[1], "key_separator");
  }
  opt.sort_keys = Truthy(b.Get(3, kFalse));
  return MakeString(interp, JsonDumps(v, opt));
}

Value FTrim(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("trim", args, {"chars"});
  return MakeString(interp, Strip(Str(v), OptString(b.Get(0, kNone), "strip"), true, true));
}

Value FTruncate(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("truncate", args, {"length", "killwords", "end", "leeway"});
  static const Value kDots = Value::String("...");
  if (!v.IsString()) {
    // jinja2 measures the value itself: numbers have no len(), short sequences pass through.
    const int64_t n = Length(v);
    const Value& leeway_arg = b.Get(3, kNone);
    if (n <= ToInt(b.Get(0, Value::Int(255)), "length") +
                 (leeway_arg.IsNone() ? 5 : ToInt(leeway_arg, "leeway"))) {
      return v;
    }
    Throw("truncate expects a string, not " + TypeName(v));
  }
  const std::string s = Str(v);
  const int64_t length = ToInt(b.Get(0, Value::Int(255)), "length");
  const std::string end = Str(b.Get(2, kDots));
  const Value& leeway_v = b.Get(3, kNone);
  const int64_t leeway = leeway_v.IsNone() ? 5 : ToInt(leeway_v, "leeway");
  const int64_t end_len = static_cast<int64_t>(CodePointCount(end));
  if (length < end_len) Throw("expected length >= " + std::to_string(end_len));
  if (leeway < 0) Throw("expected leeway >= 0");
  if (static_cast<int64_t>(CodePointCount(s)) <= length + leeway) return Value::String(s);
  std::string head = s.substr(0, ByteOffset(s, length - end_len));
  if (Truthy(b.Get(1, kFalse))) return MakeString(interp, head + end);
  return MakeString(interp, RSplit(head, std::string(" "), 1)[0] + end);
}

Value FUnique(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = Truthy(b.Get(0, kFalse));
  const Value& attribute = b.Get(1, kNone);
  std::set<std::string> seen;
  std::vector<Value> out;
  for (const Value& item : Iterate(v)) {
    Value k = GetPath(interp, item, attribute);
    if (!case_sensitive) k = IgnoreCase(k);
    if (seen.insert(HashKey(k)).second) out.push_back(item);
  }
  return MakeList(interp, std::move(out), ListKind::kIterator);
}

Value FWordcount(Interpreter&, const Value& v, CallArgs& args) {
  Binder("wordcount", args, {});
  int64_t n = 0;
  bool in_word = false;
  for (char32_t c : Decode(Str(v))) {
    bool w = c == '_' || IsAlpha(c) || IsDigit(c) || (c >= 0x80 && !IsSpace(c) && c != 0xA0);
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value::Int(n);
}

Value Add(Interpreter& interp, const Value& a, const Value& b) {
  if (IntLike(a) && IntLike(b)) {
    int64_t r;
    if (__builtin_add_overflow(a.AsInt(), b.AsInt(), &r)) Throw("integer overflow");
    return Value::Int(r);
  }
  if (a.IsNumber() && b.IsNumber()) return Value::Float(a.AsDouble() + b.AsDouble());
  if (a.IsList() && b.IsList() && a.list_kind() == b.list_kind() &&
      (a.list_kind() == ListKind::kList || a.list_kind() == ListKind::kTuple)) {
    std::vector<Value> items = a.Items();
    items.insert(items.end(), b.Items().begin(), b.Items().end());
    return MakeList(interp, std::move(items), a.list_kind());
  }
  if (a.IsString() && b.IsString()) Throw("sum() can't sum strings [use ''.join(seq) instead]");
  Throw("unsupported operand type(s) for +: '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

Value FSum(Interpreter& interp, const Value& v, CallArgs& args) {
  Binder b("sum", args, {"attribute", "start"});
  const Value& attribute = b.Get(0, kNone);
  Value total = b.Get(1, Value::Int(0));
  for (const Value& item : Iterate(v)) {
    total = Add(interp, total, attribute.IsNone() ? item : GetPath(interp, item, attribute));
  }
  return total;
}

constexpr FilterDef kFilters[] = {
    {"abs", FAbs},           {"attr", FAttr},
    {"batch", FBatch},       {"capitalize", FCapitalize},
    {"center", FCenter},     {"count", FLength},
    {"d", FDefault},         {"default", FDefault},
    {"dictsort", FDictsort}, {"e", FEscape},
    {"escape", FEscape},     {"first", FFirst},
    {"float", FFloat},       {"forceescape", FEscape},
    {"format", FFormat},     {"indent", FIndent},
    {"int", FInt},           {"items", FItems},
    {"join", FJoin},         {"last", FLast},
    {"length", FLength},     {"list", FList},
    {"lower", FLower},       {"map", FMap},
    {"max", FMax},           {"min", FMin},
    {"reject", FReject},     {"rejectattr", FRejectAttr},
    {"replace", FReplace},   {"reverse", FReverse},
    {"round", FRound},       {"safe", FSafe},
    {"select", FSelect},     {"selectattr", FSelectAttr},
    {"slice", FSlice},       {"sort", FSort},
    {"string", FString},     {"striptags", FStriptags},
    {"sum", FSum},           {"title", FTitle},
    {"tojson", FToJson},     {"trim", FTrim},
    {"truncate", FTruncate}, {"unique", FUnique},
    {"upper", FUpper},       {"wordcount", FWordcount},
};

// ---------------------------------------------------------------------------------------------
// Tests.

bool TDefined(Interpreter&, const Value& v, CallArgs& args) {
  Binder("defined", args, {});
  return !v.IsUndefined();
}
bool TUndefined(Interpreter&, const Value& v, CallArgs& args) {
  Binder("undefined", args, {});
  return v.IsUndefined();
}
bool TNone(Interpreter&, const Value& v, CallArgs& args) {
  Binder("none", args, {});
  return v.IsNone();
}
bool TBoolean(Interpreter&, const Value& v, CallArgs& args) {
  Binder("boolean", args, {});
  return v.IsBool();
}
bool TFalse(Interpreter&, const Value& v, CallArgs& args) {
  Binder("false", args, {});
  return v.IsBool() && !v.AsBool();
}
bool TTrue(Interpreter&, const Value& v, CallArgs& args) {
  Binder("true", args, {});
  return v.IsBool() && v.AsBool();
}
bool TInteger(Interpreter&, const Value& v, CallArgs& args) {
  Binder("integer", args, {});
  return v.IsInt();
}
bool TFloat(Interpreter&, const Value& v, CallArgs& args) {
  Binder("float", args, {});
  return v.IsFloat();
}
bool TNumber(Interpreter&, const Value& v, CallArgs& args) {
  Binder("number", args, {});
  return v.IsNumber();
}
bool TString(Interpreter&, const Value& v, CallArgs& args) {
  Binder("string", args, {});
  return v.IsString();
}
bool TMapping(Interpreter&, const Value& v, CallArgs& args) {
  Binder("mapping", args, {});
  return v.IsDict();
}
bool TSequence(Interpreter&, const Value& v, CallArgs& args) {
  Binder("sequence", args, {});
  return v.IsUndefined() || v.IsString() || v.IsDict() || v.IsSequence();
}
bool TIterable(Interpreter&, const Value& v, CallArgs& args) {
  Binder("iterable", args, {});
  return v.IsUndefined() || v.IsString() || v.IsList() || v.IsDict() ||
         (v.IsObject() && v.AsObject().TypeName() == "LoopContext");
}
bool TCallable(Interpreter&, const Value& v, CallArgs& args) {
  Binder("callable", args, {});
  // jinja2's Undefined defines __call__ (to fail), so it counts as callable.
  return v.IsUndefined() || (v.IsObject() && v.AsObject().IsCallable());
}
bool TLower(Interpreter&, const Value& v, CallArgs& args) {
  Binder("lower", args, {});
  bool cased = false;
  for (char32_t c : Decode(Str(v))) {
    if (IsUpper(c)) return false;
    if (IsLower(c)) cased = true;
  }
  return cased;
}
bool TUpper(Interpreter&, const Value& v, CallArgs& args) {
  Binder("upper", args, {});
  bool cased = false;
  for (char32_t c : Decode(Str(v))) {
    if (IsLower(c)) return false;
    if (IsUpper(c)) cased = true;
  }
  return cased;
}

Value ModOf(const Value& v, const Value& n) {
  if (v.IsUndefined()) Throw(v.UndefinedHint());
  if (!v.IsNumber() || !n.IsNumber()) {
    Throw("unsupported operand type(s) for %: '" + TypeName(v) + "' and '" + TypeName(n) + "'");
  }
  if (IntLike(v) && IntLike(n)) {
    if (n.AsInt() == 0) Throw("integer division or modulo by zero");
    if (n.AsInt() == -1) return Value::Int(0);
    int64_t m = v.AsInt() % n.AsInt();  // Python's modulo takes the divisor's sign
    if (m != 0 && ((m < 0) != (n.AsInt() < 0))) m += n.AsInt();
    return Value::Int(m);
  }
  if (n.AsDouble() == 0) Throw("float modulo");
  double m = std::fmod(v.AsDouble(), n.AsDouble());
  if (m != 0 && ((m < 0) != (n.AsDouble() < 0))) m += n.AsDouble();
  return Value::Float(m);
}

bool TOdd(Interpreter&, const Value& v, CallArgs& args) {
  Binder("odd", args, {});
  return Equals(ModOf(v, Value::Int(2)), Value::Int(1));
}
bool TEven(Interpreter&, const Value& v, CallArgs& args) {
  Binder("even", args, {});
  return Equals(ModOf(v, Value::Int(2)), Value::Int(0));
}
bool TDivisibleBy(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("divisibleby", args, {"num"});
  return Equals(ModOf(v, b.Required(0, "num")), Value::Int(0));
}
bool TEq(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("eq", args, {"b"});
  return Equals(v, b.Required(0, "b"));
}
bool TNe(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("ne", args, {"b"});
  return !Equals(v, b.Required(0, "b"));
}
void CheckOrderable(const Value& a, const Value& b) {
  if (a.IsUndefined()) Throw(a.UndefinedHint());
  if (b.IsUndefined()) Throw(b.UndefinedHint());
}
bool TLt(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("lt", args, {"b"});
  CheckOrderable(v, b.Required(0, "b"));
  return Less(v, b.Required(0, "b"));
}
bool TGt(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("gt", args, {"b"});
  CheckOrderable(v, b.Required(0, "b"));
  return Less(b.Required(0, "b"), v);
}
bool TLe(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("le", args, {"b"});
  CheckOrderable(v, b.Required(0, "b"));
  return Less(v, b.Required(0, "b")) || Equals(v, b.Required(0, "b"));
}
bool TGe(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("ge", args, {"b"});
  CheckOrderable(v, b.Required(0, "b"));
  return Less(b.Required(0, "b"), v) || Equals(v, b.Required(0, "b"));
}
bool TIn(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("in", args, {"seq"});
  return Contains(b.Required(0, "seq"), v);
}
bool TSameAs(Interpreter&, const Value& v, CallArgs& args) {
  Binder b("sameas", args, {"other"});
  const Value& o = b.Required(0, "other");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return v.AsBool() == o.AsBool();
    case Kind::kInt:
      // CPython caches small ints.
      return v.AsInt() == o.AsInt() && v.AsInt() >= -5 && v.AsInt() <= 256;
    case Kind::kFloat:
      return false;
    default:
      return v.Identity() == o.Identity();
  }
}
bool TEscaped(Interpreter&, const Value&, CallArgs& args) {
  Binder("escaped", args, {});
  return false;
}
bool TFilter(Interpreter&, const Value& v, CallArgs& args) {
  Binder("filter", args, {});
  return v.IsString() && FindFilter(v.AsString()) != nullptr;
}
bool TTest(Interpreter&, const Value& v, CallArgs& args) {
  Binder("test", args, {});
  return v.IsString() && FindTest(v.AsString()) != nullptr;
}

constexpr TestDef kTests[] = {
    {"!=", TNe},
    {"<", TLt},
    {"<=", TLe},
    {"==", TEq},
    {">", TGt},
    {">=", TGe},
    {"boolean", TBoolean},
    {"callable", TCallable},
    {"defined", TDefined},
    {"divisibleby", TDivisibleBy},
    {"eq", TEq},
    {"equalto", TEq},
    {"escaped", TEscaped},
    {"even", TEven},
    {"false", TFalse},
    {"filter", TFilter},
    {"float", TFloat},
    {"ge", TGe},
    {"greaterthan", TGt},
    {"gt", TGt},
    {"in", TIn},
    {"integer", TInteger},
    {"iterable", TIterable},
    {"le", TLe},
    {"lessthan", TLt},
    {"lower", TLower},
    {"lt", TLt},
    {"mapping", TMapping},
    {"ne", TNe},
    {"none", TNone},
    {"number", TNumber},
    {"odd", TOdd},
    {"sameas", TSameAs},
    {"sequence", TSequence},
    {"string", TString},
    {"test", TTest},
    {"true", TTrue},
    {"undefined", TUndefined},
    {"upper", TUpper},
};

}  // namespace

const FilterDef* FindFilter(std::string_view name) {
  for (const auto& def : kFilters) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

const TestDef* FindTest(std::string_view name) {
  for (const auto& def : kTests) {
    if (def.name == name) return &def;
  }
  return nullptr;
}

bool IsUnsupportedFilter(std::string_view name) {
  static constexpr std::string_view kUnsupported[] = {"filesizeformat", "groupby",   "pprint",
                                                      "random",         "urlencode", "urlize",
                                                      "wordwrap",       "xmlattr"};
  for (std::string_view n : kUnsupported) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace latent::tokenizer::jinja
