#include "tokenizer/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tokenizer/chat_template/pystr.h"

namespace latent::tokenizer::jinja {

void Throw(const std::string& message) { throw TemplateError(message); }

namespace {
thread_local size_t g_max_items = SIZE_MAX;
thread_local size_t g_max_bytes = SIZE_MAX;
}  // namespace

ValueLimitsScope::ValueLimitsScope(size_t max_items, size_t max_bytes)
    : saved_items_(g_max_items), saved_bytes_(g_max_bytes) {
  g_max_items = max_items;
  g_max_bytes = max_bytes;
}

ValueLimitsScope::~ValueLimitsScope() {
  g_max_items = saved_items_;
  g_max_bytes = saved_bytes_;
}

void CheckItems(size_t n) {
  if (n > g_max_items) {
    Throw("a list of " + std::to_string(n) + " items is over the limit of " +
          std::to_string(g_max_items));
  }
}

void CheckBytes(size_t n) {
  if (n > g_max_bytes) {
    Throw("chat template output exceeds " + std::to_string(g_max_bytes) + " bytes");
  }
}

namespace {

int ChildDepth(const Value& v) {
  if (v.IsList()) return v.AsList().depth;
  if (v.IsDict()) return v.AsDict().depth;
  return 0;
}

void CheckDepth(int depth) {
  if (depth > kMaxValueDepth) {
    Throw("lists and dicts nest more than " + std::to_string(kMaxValueDepth) + " levels deep");
  }
}

// Bounds recursion through values that can refer to themselves (a namespace holding itself).
class ReprDepth {
 public:
  ReprDepth() {
    if (++depth_ > 2 * kMaxValueDepth) {
      --depth_;
      Throw("value nests too deeply to print");
    }
  }
  ~ReprDepth() { --depth_; }

 private:
  static thread_local int depth_;
};
thread_local int ReprDepth::depth_ = 0;

}  // namespace

Value Value::Undefined(std::string hint) {
  Value v;
  v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::Bool(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.b_ = b;
  return v;
}

Value Value::Int(int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.i_ = i;
  return v;
}

Value Value::Float(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.d_ = d;
  return v;
}

Value Value::String(std::string s) {
  Value v;
  v.kind_ = Kind::kString;
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::List(std::vector<Value> items, ListKind kind) {
  CheckItems(items.size());
  auto data = std::make_shared<ListData>();
  int depth = 0;
  for (const Value& item : items) depth = std::max(depth, ChildDepth(item));
  data->depth = depth + 1;
  CheckDepth(data->depth);
  data->items = std::move(items);
  data->kind = kind;
  return FromList(std::move(data));
}

Value Value::FromList(std::shared_ptr<const ListData> data) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::move(data);
  return v;
}

Value Value::Dict(DictData data) {
  int depth = 0;
  for (const auto& [k, item] : data.entries) depth = std::max(depth, ChildDepth(item));
  data.depth = depth + 1;
  CheckDepth(data.depth);
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<const DictData>(std::move(data));
  return v;
}

Value Value::FromObject(std::shared_ptr<Object> object) {
  Value v;
  v.kind_ = Kind::kObject;
  v.object_ = std::move(object);
  return v;
}

const void* Value::Identity() const {
  switch (kind_) {
    case Kind::kString:
      return s_.get();
    case Kind::kList:
      return list_.get();
    case Kind::kDict:
      return dict_.get();
    case Kind::kObject:
      return object_.get();
    default:
      return nullptr;
  }
}

std::string HashKey(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "U";  // jinja2's Undefined hashes by type, and all undefined values are equal
    case Kind::kNone:
      return "N";
    case Kind::kBool:
    case Kind::kInt:
      return "i" + std::to_string(v.AsInt());
    case Kind::kFloat: {
      double d = v.AsDouble();
      if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2e18) {
        return "i" + std::to_string(static_cast<int64_t>(d));
      }
      return "f" + FloatRepr(d);
    }
    case Kind::kString:
      return "s" + v.AsString();
    case Kind::kList:
      if (v.list_kind() == ListKind::kTuple) {
        std::string key = "t";
        for (const Value& item : v.Items()) {
          std::string part = HashKey(item);
          key += std::to_string(part.size()) + ":" + part;
        }
        return key;
      }
      break;
    default:
      break;
  }
  Throw("unhashable type: '" + TypeName(v) + "'");
}

const Value* DictData::Find(const Value& key) const {
  auto it = index.find(HashKey(key));
  return it == index.end() ? nullptr : &entries[it->second].second;
}

void DictData::Set(Value key, Value value) {
  std::string h = HashKey(key);
  auto it = index.find(h);
  if (it != index.end()) {
    entries[it->second].second = std::move(value);
    return;
  }
  index.emplace(std::move(h), entries.size());
  entries.emplace_back(std::move(key), std::move(value));
}

std::string Object::Repr() const { return "<" + TypeName() + " object>"; }

Value Object::GetAttr(const std::string& name) {
  return Value::Undefined("'" + TypeName() + " object' has no attribute '" + name + "'");
}

Value Object::Call(Interpreter&, CallArgs&) {
  Throw("'" + TypeName() + "' object is not callable");
}

bool Truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return v.AsBool();
    case Kind::kInt:
      return v.AsInt() != 0;
    case Kind::kFloat:
      return v.AsDouble() != 0;
    case Kind::kString:
      return !v.AsString().empty();
    case Kind::kList:
      return v.list_kind() == ListKind::kIterator || !v.Items().empty();
    case Kind::kDict:
      return !v.AsDict().entries.empty();
    case Kind::kObject:
      return true;
  }
  return false;
}

bool IntLike(const Value& v) { return v.IsInt() || v.IsBool(); }

int64_t ToInt(const Value& v, std::string_view what) {
  if (!IntLike(v)) {
    Throw("'" + TypeName(v) + "' object cannot be interpreted as an integer (" + std::string(what) +
          ")");
  }
  return v.AsInt();
}

std::string TypeName(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      switch (v.list_kind()) {
        case ListKind::kList:
          return "list";
        case ListKind::kTuple:
          return "tuple";
        case ListKind::kIterator:
          return "generator";
        case ListKind::kDictKeys:
          return "dict_keys";
        case ListKind::kDictValues:
          return "dict_values";
        case ListKind::kDictItems:
          return "dict_items";
        case ListKind::kRange:
          return "range";
      }
      break;
    case Kind::kDict:
      return "dict";
    case Kind::kObject:
      return v.AsObject().TypeName();
  }
  return "object";
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+05"
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    i = 1;
  }
  size_t e = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e; ++k) {
    if (sci[k] != '.') digits.push_back(sci[k]);
  }
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(-decpt, '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(decpt - n, '0') + ".0";
    } else {
      out += digits.substr(0, decpt) + "." + digits.substr(decpt);
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    const int x = decpt - 1;
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", x < 0 ? '-' : '+', std::abs(x));
    out += ebuf;
  }
  return out;
}

namespace {

void AppendRepr(const Value& v, std::string& out);

void AppendSeq(const std::vector<Value>& items, const char* open, const char* close,
               std::string& out) {
  out += open;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    AppendRepr(items[i], out);
    CheckBytes(out.size());
  }
  out += close;
}

void AppendRepr(const Value& v, std::string& out) {
  ReprDepth guard;
  switch (v.kind()) {
    case Kind::kUndefined:
      out += "Undefined";
      return;
    case Kind::kString:
      out += StrRepr(v.AsString());
      return;
    case Kind::kList:
      switch (v.list_kind()) {
        case ListKind::kList:
          AppendSeq(v.Items(), "[", "]", out);
          return;
        case ListKind::kTuple:
          AppendSeq(v.Items(), "(", v.Items().size() == 1 ? ",)" : ")", out);
          return;
        case ListKind::kDictKeys:
          AppendSeq(v.Items(), "dict_keys([", "])", out);
          return;
        case ListKind::kDictValues:
          AppendSeq(v.Items(), "dict_values([", "])", out);
          return;
        case ListKind::kDictItems:
          AppendSeq(v.Items(), "dict_items([", "])", out);
          return;
        case ListKind::kRange:
          out += v.AsList().range_repr;
          return;
        case ListKind::kIterator:
          Throw(
              "cannot print a generator or iterator (Python prints its address); convert it "
              "with |list first");
      }
      return;
    case Kind::kDict: {
      out += "{";
      bool first = true;
      for (const auto& [key, item] : v.AsDict().entries) {
        if (!first) out += ", ";
        first = false;
        AppendRepr(key, out);
        out += ": ";
        AppendRepr(item, out);
        CheckBytes(out.size());
      }
      out += "}";
      return;
    }
    default:
      AppendStr(v, out);
  }
}

}  // namespace

void AppendStr(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return;
    case Kind::kNone:
      out += "None";
      return;
    case Kind::kBool:
      out += v.AsBool() ? "True" : "False";
      return;
    case Kind::kInt:
      out += std::to_string(v.AsInt());
      return;
    case Kind::kFloat:
      out += FloatRepr(v.AsDouble());
      return;
    case Kind::kString:
      out += v.AsString();
      return;
    case Kind::kList:
    case Kind::kDict:
      AppendRepr(v, out);
      return;
    case Kind::kObject: {
      ReprDepth guard;
      out += v.AsObject().Repr();
      return;
    }
  }
}

std::string Str(const Value& v) {
  if (v.IsString()) return v.AsString();
  std::string out;
  AppendStr(v, out);
  return out;
}

std::string Repr(const Value& v) {
  std::string out;
  AppendRepr(v, out);
  return out;
}

namespace {

bool NumEquals(const Value& a, const Value& b) {
  if (IntLike(a) && IntLike(b)) return a.AsInt() == b.AsInt();
  if (IntLike(a) || IntLike(b)) {
    const Value& i = IntLike(a) ? a : b;
    double f = IntLike(a) ? b.AsDouble() : a.AsDouble();
    if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18) {
      return static_cast<int64_t>(f) == i.AsInt();
    }
    return false;
  }
  return a.AsDouble() == b.AsDouble();
}

bool NumLess(const Value& a, const Value& b) {
  if (IntLike(a) && IntLike(b)) return a.AsInt() < b.AsInt();
  return a.AsDouble() < b.AsDouble();
}

bool SeqKind(const Value& v) {
  return v.IsList() && (v.list_kind() == ListKind::kList || v.list_kind() == ListKind::kTuple);
}

}  // namespace

bool Equals(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return NumEquals(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return a.AsString() == b.AsString();
    case Kind::kList: {
      if (a.list_kind() != b.list_kind()) return false;
      if (a.list_kind() == ListKind::kIterator) return a.ListPtr() == b.ListPtr();
      const auto& x = a.Items();
      const auto& y = b.Items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const DictData& x = a.AsDict();
      const DictData& y = b.AsDict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, item] : x.entries) {
        const Value* other = y.Find(key);
        if (!other || !Equals(item, *other)) return false;
      }
      return true;
    }
    case Kind::kObject:
      return a.ObjectPtr() == b.ObjectPtr();
    default:
      return false;
  }
}

bool Less(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return NumLess(a, b);
  if (a.IsString() && b.IsString()) return a.AsString() < b.AsString();
  if (SeqKind(a) && SeqKind(b) && a.list_kind() == b.list_kind()) {
    const auto& x = a.Items();
    const auto& y = b.Items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!Equals(x[i], y[i])) return Less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  Throw("'<' not supported between instances of '" + TypeName(a) + "' and '" + TypeName(b) + "'");
}

std::vector<Value> Iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return {};
    case Kind::kString: {
      std::vector<Value> out;
      const std::string& s = v.AsString();
      CheckItems(CodePointCount(s));
      for (size_t i = 0; i < s.size();) {
        size_t len = CharLen(std::string_view(s).substr(i));
        out.push_back(Value::String(s.substr(i, len)));
        i += len;
      }
      return out;
    }
    case Kind::kList:
      return v.Items();
    case Kind::kDict: {
      std::vector<Value> out;
      out.reserve(v.AsDict().entries.size());
      for (const auto& entry : v.AsDict().entries) out.push_back(entry.first);
      return out;
    }
    default:
      Throw("'" + TypeName(v) + "' object is not iterable");
  }
}

int64_t Length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
      return 0;
    case Kind::kString:
      return static_cast<int64_t>(CodePointCount(v.AsString()));
    case Kind::kList:
      if (v.list_kind() == ListKind::kIterator) break;
      return static_cast<int64_t>(v.Items().size());
    case Kind::kDict:
      return static_cast<int64_t>(v.AsDict().entries.size());
    default:
      break;
  }
  Throw("object of type '" + TypeName(v) + "' has no len()");
}

bool Contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Kind::kUndefined:
      return false;
    case Kind::kString:
      if (!needle.IsString()) {
        Throw("'in <string>' requires string as left operand, not " + TypeName(needle));
      }
      return haystack.AsString().find(needle.AsString()) != std::string::npos;
    case Kind::kList:
      for (const Value& item : haystack.Items()) {
        if (Equals(item, needle)) return true;
      }
      return false;
    case Kind::kDict:
      return haystack.AsDict().Find(needle) != nullptr;
    default:
      Throw("argument of type '" + TypeName(haystack) + "' is not iterable");
  }
}

namespace {

void JsonString(std::string_view s, bool ensure_ascii, std::string& out) {
  static const char kHex[] = "0123456789abcdef";
  auto u4 = [&](uint32_t c) {
    out += "\\u";
    for (int i = 3; i >= 0; --i) out.push_back(kHex[(c >> (4 * i)) & 0xF]);
  };
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      switch (b) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (b < 0x20 || (ensure_ascii && b == 0x7F)) {
            u4(b);
          } else {
            out.push_back(static_cast<char>(b));
          }
      }
      ++i;
      continue;
    }
    size_t len = CharLen(s.substr(i));
    if (!ensure_ascii) {
      out += s.substr(i, len);
    } else {
      char32_t c = Decode(s.substr(i, len))[0];
      if (c >= 0x10000) {
        c -= 0x10000;
        u4(0xD800 + (c >> 10));
        u4(0xDC00 + (c & 0x3FF));
      } else {
        u4(c);
      }
    }
    i += len;
  }
  out.push_back('"');
}

void JsonValue(const Value& v, const JsonOptions& opt, int level, std::string& out);

void JsonNewline(const JsonOptions& opt, int level, std::string& out) {
  out.push_back('\n');
  for (int i = 0; i < level; ++i) out += opt.indent;
}

std::string JsonKey(const Value& key) {
  switch (key.kind()) {
    case Kind::kString:
      return key.AsString();
    case Kind::kNone:
      return "null";
    case Kind::kBool:
      return key.AsBool() ? "true" : "false";
    case Kind::kInt:
      return std::to_string(key.AsInt());
    case Kind::kFloat: {
      double d = key.AsDouble();
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
      return FloatRepr(d);
    }
    default:
      Throw("keys must be str, int, float, bool or None, not " + TypeName(key));
  }
}

void JsonValue(const Value& v, const JsonOptions& opt, int level, std::string& out) {
  switch (v.kind()) {
    case Kind::kNone:
      out += "null";
      return;
    case Kind::kBool:
      out += v.AsBool() ? "true" : "false";
      return;
    case Kind::kInt:
      out += std::to_string(v.AsInt());
      return;
    case Kind::kFloat: {
      double d = v.AsDouble();
      if (std::isnan(d)) {
        out += "NaN";
      } else if (std::isinf(d)) {
        out += d < 0 ? "-Infinity" : "Infinity";
      } else {
        out += FloatRepr(d);
      }
      return;
    }
    case Kind::kString:
      JsonString(v.AsString(), opt.ensure_ascii, out);
      return;
    case Kind::kList: {
      if (v.list_kind() != ListKind::kList && v.list_kind() != ListKind::kTuple) break;
      const auto& items = v.Items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += opt.item_separator;
        if (opt.has_indent) JsonNewline(opt, level + 1, out);
        JsonValue(items[i], opt, level + 1, out);
        CheckBytes(out.size());
      }
      if (opt.has_indent) JsonNewline(opt, level, out);
      out.push_back(']');
      return;
    }
    case Kind::kDict: {
      const auto& entries = v.AsDict().entries;
      if (entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<Value, Value>*> order;
      for (const auto& entry : entries) order.push_back(&entry);
      if (opt.sort_keys) {
        std::stable_sort(order.begin(), order.end(),
                         [](const auto* a, const auto* b) { return Less(a->first, b->first); });
      }
      out.push_back('{');
      for (size_t i = 0; i < order.size(); ++i) {
        std::string key = JsonKey(order[i]->first);
        if (i) out += opt.item_separator;
        if (opt.has_indent) JsonNewline(opt, level + 1, out);
        JsonString(key, opt.ensure_ascii, out);
        out += opt.key_separator;
        JsonValue(order[i]->second, opt, level + 1, out);
        CheckBytes(out.size());
      }
      if (opt.has_indent) JsonNewline(opt, level, out);
      out.push_back('}');
      return;
    }
    default:
      break;
  }
  Throw("Object of type " + TypeName(v) + " is not JSON serializable");
}

Value FromJsonAt(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxValueDepth) {
    Throw("JSON input nests more than " + std::to_string(kMaxValueDepth) + " levels deep");
  }
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::Bool(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::Int(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        Throw("integer " + std::to_string(u) + " in the JSON input is too large (64-bit limit)");
      }
      return Value::Int(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::Float(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::String(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(FromJsonAt(item, depth + 1));
      return Value::List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData dict;
      for (const auto& [key, item] : j.items()) {
        dict.Set(Value::String(key), FromJsonAt(item, depth + 1));
      }
      return Value::Dict(std::move(dict));
    }
    default:
      Throw("unsupported JSON value (binary or discarded)");
  }
}

}  // namespace

std::string JsonDumps(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonValue(v, options, 0, out);
  return out;
}

Value FromJson(const nlohmann::ordered_json& j) { return FromJsonAt(j, 0); }

}  // namespace latent::tokenizer::jinja
