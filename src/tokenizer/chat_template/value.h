// Values of the chat template interpreter, with Python semantics: what jinja2 computes with when
// transformers renders a chat template. Lists and dicts are immutable once built (the template
// sandbox forbids mutating them), so copies share their storage; namespaces, loops and callables
// are Objects with reference semantics.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace latent::tokenizer::jinja {

// An error in the template's computation, raised where there is no template position at hand;
// the interpreter catches it and adds the position of the expression being evaluated.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message) : std::runtime_error(message) {}
};

[[noreturn]] void Throw(const std::string& message);

class Value;
class Object;
class Interpreter;
struct ListData;
struct DictData;

enum class Kind : uint8_t {
  kUndefined,
  kNone,
  kBool,
  kInt,
  kFloat,
  kString,
  kList,  // list, tuple, or one of Python's iterator/view types; see ListKind
  kDict,
  kObject,
};

// What Python type a kList value stands for: they differ in how they print, whether they have a
// length, and whether tojson accepts them.
enum class ListKind : uint8_t {
  kList,
  kTuple,
  kIterator,  // generators and iterators (map, select, reverse...): always true, no len
  kDictKeys,
  kDictValues,
  kDictItems,
  kRange,
};

struct ListData {
  std::vector<Value> items;
  ListKind kind = ListKind::kList;
  std::string range_repr;  // "range(0, 3)" for kRange
  int depth = 1;           // nesting depth, bounded so that printing cannot overflow the stack
};

// Keys are hashable scalars (None, bools, numbers, strings) or tuples of them, compared with
// Python equality (1 == 1.0 == True); insertion order is kept.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  std::unordered_map<std::string, size_t> index;  // HashKey(key) -> entry
  int depth = 1;

  const Value* Find(const Value& key) const;
  // Inserts or, like Python, replaces the value of an equal key in place.
  void Set(Value key, Value value);
};

// The hash identity of a dict key or set member; throws TemplateError for unhashable values.
std::string HashKey(const Value& v);

class Value {
 public:
  Value() = default;  // undefined
  static Value Undefined(std::string hint = "");
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(std::vector<Value> items, ListKind kind = ListKind::kList);
  static Value Tuple(std::vector<Value> items) { return List(std::move(items), ListKind::kTuple); }
  static Value Dict(DictData data);
  static Value FromList(std::shared_ptr<const ListData> data);
  static Value FromObject(std::shared_ptr<Object> object);

  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsBool() const { return kind_ == Kind::kBool; }
  bool IsInt() const { return kind_ == Kind::kInt; }
  bool IsFloat() const { return kind_ == Kind::kFloat; }
  bool IsNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || IsBool(); }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsDict() const { return kind_ == Kind::kDict; }
  bool IsObject() const { return kind_ == Kind::kObject; }
  // A list or tuple proper (indexable, with a length), not an iterator or a dict view.
  bool IsSequence() const {
    return IsList() && (list_->kind == ListKind::kList || list_->kind == ListKind::kTuple ||
                        list_->kind == ListKind::kRange);
  }

  bool AsBool() const { return b_; }
  int64_t AsInt() const { return IsBool() ? (b_ ? 1 : 0) : i_; }  // bools are ints in Python
  double AsDouble() const { return IsFloat() ? d_ : static_cast<double>(AsInt()); }
  const std::string& AsString() const { return *s_; }
  const std::string& UndefinedHint() const { return *s_; }
  const ListData& AsList() const { return *list_; }
  const std::vector<Value>& Items() const { return list_->items; }
  ListKind list_kind() const { return list_->kind; }
  const DictData& AsDict() const { return *dict_; }
  Object& AsObject() const { return *object_; }
  const std::shared_ptr<Object>& ObjectPtr() const { return object_; }
  const std::shared_ptr<const ListData>& ListPtr() const { return list_; }
  const void* Identity() const;  // for `is sameas`

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;  // string, or the hint of an undefined value
  std::shared_ptr<const ListData> list_;
  std::shared_ptr<const DictData> dict_;
  std::shared_ptr<Object> object_;
};

// Arguments of a call: positional, then keyword in call order.
struct CallArgs {
  std::vector<Value> args;
  std::vector<std::pair<std::string, Value>> kwargs;
};

// Namespaces, loop contexts, macros and functions.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string TypeName() const = 0;  // Python's type name, for messages
  virtual std::string Repr() const;
  // Attribute lookup; an undefined value when there is none.
  virtual Value GetAttr(const std::string& name);
  virtual bool IsCallable() const { return false; }
  virtual Value Call(Interpreter& interp, CallArgs& args);
  // Drops the values this object holds, which breaks reference cycles when a render ends.
  virtual void Clear() {}
};

// Python truthiness.
bool Truthy(const Value& v);
// Python type name ("str", "int", "dict", "Undefined"...).
std::string TypeName(const Value& v);
// int or bool (Python's bool is an int).
bool IntLike(const Value& v);
// v as an integer; throws Python's "cannot be interpreted as an integer" naming `what`.
int64_t ToInt(const Value& v, std::string_view what);

// str(v) and repr(v), appended to `out`. Printing an iterator throws (Python would print an
// address). str of undefined is empty.
void AppendStr(const Value& v, std::string& out);
std::string Str(const Value& v);
std::string Repr(const Value& v);
// Python's repr of a float: shortest round-trip digits, "1e+16", "0.0001", "1.0", "inf".
std::string FloatRepr(double d);

// Python ==, and the order of <, for sorting and comparisons; Less throws TemplateError for
// values Python cannot order.
bool Equals(const Value& a, const Value& b);
bool Less(const Value& a, const Value& b);

// The items a for loop visits: list items, string characters, dict keys; nothing for undefined.
std::vector<Value> Iterate(const Value& v);
// Python len(); throws for values without one.
int64_t Length(const Value& v);
// `needle in haystack`.
bool Contains(const Value& haystack, const Value& needle);

struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;  // used when has_indent
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(v, ...) as Python writes it.
std::string JsonDumps(const Value& v, const JsonOptions& options);

// JSON input (request messages, tools) to values; objects keep their key order.
Value FromJson(const nlohmann::ordered_json& j);

// Bounds on how deeply lists and dicts nest, checked when they are built.
inline constexpr int kMaxValueDepth = 256;

// Per-thread bounds that value operations check while a render runs (unbounded otherwise): the
// items of a list built by the template, and the text that printing or tojson produces.
class ValueLimitsScope {
 public:
  ValueLimitsScope(size_t max_items, size_t max_bytes);
  ~ValueLimitsScope();
  ValueLimitsScope(const ValueLimitsScope&) = delete;
  ValueLimitsScope& operator=(const ValueLimitsScope&) = delete;

 private:
  size_t saved_items_, saved_bytes_;
};
// Throws TemplateError when a list of `n` items, or text of `n` bytes, is over the bounds.
void CheckItems(size_t n);
void CheckBytes(size_t n);

}  // namespace latent::tokenizer::jinja
