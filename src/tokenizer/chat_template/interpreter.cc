#include "tokenizer/chat_template/interpreter.h"

#include <cmath>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "base/error.h"
#include "tokenizer/chat_template/builtins.h"
#include "tokenizer/chat_template/pystr.h"

namespace latent::tokenizer::jinja {

size_t Frame::PlaceOf(const std::string& name) const {
  if (!index_.empty()) {
    auto it = index_.find(name);
    return it == index_.end() ? kAbsent : it->second;
  }
  for (size_t i = 0; i < vars_.size(); ++i) {
    if (vars_[i].first == name) return i;
  }
  return kAbsent;
}

const Value* Frame::Lookup(const std::string& name) const {
  for (const Frame* f = this; f; f = f->parent.get()) {
    const size_t at = f->PlaceOf(name);
    if (at != kAbsent) return &f->vars_[at].second;
  }
  return nullptr;
}

void Frame::Set(const std::string& name, Value value) {
  const size_t at = PlaceOf(name);
  if (at != kAbsent) {
    vars_[at].second = std::move(value);
    return;
  }
  vars_.emplace_back(name, std::move(value));
  if (!index_.empty()) {
    index_.emplace(name, vars_.size() - 1);
  } else if (vars_.size() > kIndexFrom) {
    for (size_t i = 0; i < vars_.size(); ++i) index_.emplace(vars_[i].first, i);
  }
}

std::string Namespace::Repr() const {
  return "<Namespace " + jinja::Repr(Value::Dict(attrs_)) + ">";
}

Value Namespace::GetAttr(const std::string& name) {
  const Value* v = attrs_.Find(Value::String(name));
  if (v) return *v;
  return Value::Undefined("'Namespace object' has no attribute '" + name + "'");
}

void Namespace::Set(const std::string& name, Value value) {
  if (!name.empty() && name[0] == '_') {
    Throw("chat templates cannot store underscore-prefixed attributes on a namespace, but got '" +
          name + "'");
  }
  attrs_.Set(Value::String(name), std::move(value));
}

namespace {

std::string UndefinedMessage(const Value& v) {
  return v.UndefinedHint().empty() ? "value is undefined" : v.UndefinedHint();
}

// What jinja2 names an object in "has no attribute" messages.
std::string ObjectTypeRepr(const Value& v) {
  if (v.IsNone()) return "None";
  return TypeName(v) + " object";
}

// Macros, and the caller of a {% call %} block.
class Macro : public Object {
 public:
  Macro(const Node* node, FramePtr closure, std::string name)
      : node_(node), closure_(std::move(closure)), name_(std::move(name)) {}

  std::string TypeName() const override { return "Macro"; }
  std::string Repr() const override { return "<Macro " + StrRepr(name_) + ">"; }
  bool IsCallable() const override { return true; }
  void Clear() override { closure_.reset(); }

  Value GetAttr(const std::string& name) override {
    if (name == "name") return Value::String(name_);
    if (name == "arguments") {
      std::vector<Value> params;
      for (const auto& p : node_->params) params.push_back(Value::String(p));
      return Value::Tuple(std::move(params));
    }
    if (name == "catch_kwargs") return Value::Bool(node_->uses_kwargs);
    if (name == "catch_varargs") return Value::Bool(node_->uses_varargs);
    if (name == "caller") return Value::Bool(node_->uses_caller);
    return Object::GetAttr(name);
  }

  Value Call(Interpreter& interp, CallArgs& call) override {
    const Node& n = *node_;
    if (!closure_) Throw("macro '" + name_ + "' called after the render ended");
    auto frame = std::make_shared<Frame>(closure_);
    const size_t nparams = n.params.size();
    // Positional arguments first, then keywords by name; what is left goes to varargs/kwargs.
    std::vector<bool> given(nparams, false);
    std::vector<Value> values(nparams);
    for (size_t i = 0; i < call.args.size() && i < nparams; ++i) {
      values[i] = call.args[i];
      given[i] = true;
    }
    std::vector<std::pair<std::string, Value>> extra_kwargs;
    bool found_caller = false;
    for (auto& [key, value] : call.kwargs) {
      bool matched = false;
      for (size_t i = call.args.size(); i < nparams; ++i) {
        if (n.params[i] == key) {
          if (given[i])
            Throw("macro '" + name_ + "' got multiple values for argument '" + key + "'");
          values[i] = value;
          given[i] = true;
          matched = true;
          if (key == "caller") found_caller = true;
          break;
        }
      }
      if (!matched) extra_kwargs.emplace_back(key, value);
    }
    for (size_t i = 0; i < nparams; ++i) {
      frame->Set(n.params[i], Value::Undefined("parameter '" + n.params[i] + "' was not provided"));
    }
    Value caller = Value::Undefined("no caller defined");
    if (n.uses_caller && !found_caller) {
      for (auto it = extra_kwargs.begin(); it != extra_kwargs.end(); ++it) {
        if (it->first == "caller") {
          caller = it->second;
          extra_kwargs.erase(it);
          break;
        }
      }
    }
    DictData kwargs;
    if (n.uses_kwargs) {
      for (auto& [key, value] : extra_kwargs) kwargs.Set(Value::String(key), value);
    } else if (!extra_kwargs.empty()) {
      if (extra_kwargs[0].first == "caller") {
        Throw("macro '" + name_ + "' was invoked with two values for the special caller argument");
      }
      Throw("macro '" + name_ + "' takes no keyword argument '" + extra_kwargs[0].first + "'");
    }
    std::vector<Value> varargs;
    if (call.args.size() > nparams) {
      if (!n.uses_varargs) {
        Throw("macro '" + name_ + "' takes not more than " + std::to_string(nparams) +
              " argument(s)");
      }
      varargs.assign(call.args.begin() + nparams, call.args.end());
    }
    // Defaults are evaluated in the macro's scope, so they can use the parameters before them.
    const size_t first_default = nparams - n.defaults.size();
    for (size_t i = 0; i < nparams; ++i) {
      if (given[i]) {
        frame->Set(n.params[i], values[i]);
      } else if (i >= first_default) {
        frame->Set(n.params[i], interp.Eval(*n.defaults[i - first_default], frame));
      }
    }
    if (n.uses_caller) frame->Set("caller", caller);
    if (n.uses_kwargs) frame->Set("kwargs", Value::Dict(std::move(kwargs)));
    if (n.uses_varargs) frame->Set("varargs", Value::Tuple(std::move(varargs)));
    interp.EnterCall();
    std::string out;
    try {
      interp.Exec(n.body, frame, out);
    } catch (...) {
      interp.LeaveCall();
      throw;
    }
    interp.LeaveCall();
    return Value::String(std::move(out));
  }

 private:
  const Node* node_;
  FramePtr closure_;
  std::string name_;
};

// A function of the loop object (cycle, changed).
class LoopFunction;

class Loop : public Object, public std::enable_shared_from_this<Loop> {
 public:
  Loop(Interpreter& interp, const Node* node, FramePtr frame, std::vector<Value> items, int depth)
      : interp_(interp),
        node_(node),
        frame_(std::move(frame)),
        items_(std::move(items)),
        depth_(depth) {}

  std::string TypeName() const override { return "LoopContext"; }
  std::string Repr() const override {
    return "<LoopContext " + std::to_string(index_ + 1) + "/" + std::to_string(items_.size()) + ">";
  }
  bool IsCallable() const override { return true; }
  void Clear() override {
    frame_.reset();
    items_.clear();
    last_changed_.reset();
  }
  void SetIndex(size_t i) { index_ = i; }
  size_t size() const { return items_.size(); }
  const Value& item(size_t i) const { return items_[i]; }

  Value GetAttr(const std::string& name) override;

  Value Call(Interpreter& interp, CallArgs& args) override {
    if (!node_->recursive) {
      Throw("the loop must have the 'recursive' marker to be called recursively");
    }
    if (args.args.size() != 1 || !args.kwargs.empty()) Throw("loop() takes exactly one argument");
    if (!frame_) Throw("loop called after the render ended");
    return Value::String(interp.RunLoop(*node_, frame_, args.args[0], depth_ + 1));
  }

  Value Cycle(CallArgs& args) {
    if (args.args.empty()) Throw("no items for cycling given");
    return args.args[index_ % args.args.size()];
  }

  Value Changed(CallArgs& args) {
    Value v = Value::Tuple(args.args);
    if (last_changed_ && Equals(*last_changed_, v)) return Value::Bool(false);
    last_changed_ = std::make_unique<Value>(std::move(v));
    return Value::Bool(true);
  }

 private:
  Interpreter& interp_;
  const Node* node_;
  FramePtr frame_;
  std::vector<Value> items_;
  int depth_;
  size_t index_ = 0;
  std::unique_ptr<Value> last_changed_;
};

class LoopFunction : public Object {
 public:
  LoopFunction(std::shared_ptr<Loop> loop, bool cycle) : loop_(std::move(loop)), cycle_(cycle) {}
  std::string TypeName() const override { return "method"; }
  std::string Repr() const override {
    return cycle_ ? "<bound method LoopContext.cycle>" : "<bound method LoopContext.changed>";
  }
  bool IsCallable() const override { return true; }
  void Clear() override { loop_.reset(); }
  Value Call(Interpreter&, CallArgs& args) override {
    if (!loop_) Throw("loop function called after the render ended");
    if (!args.kwargs.empty()) Throw("loop functions take no keyword arguments");
    return cycle_ ? loop_->Cycle(args) : loop_->Changed(args);
  }

 private:
  std::shared_ptr<Loop> loop_;
  bool cycle_;
};

Value Loop::GetAttr(const std::string& name) {
  const int64_t n = static_cast<int64_t>(items_.size());
  const int64_t i = static_cast<int64_t>(index_);
  if (name == "index") return Value::Int(i + 1);
  if (name == "index0") return Value::Int(i);
  if (name == "revindex") return Value::Int(n - i);
  if (name == "revindex0") return Value::Int(n - i - 1);
  if (name == "first") return Value::Bool(i == 0);
  if (name == "last") return Value::Bool(i == n - 1);
  if (name == "length") return Value::Int(n);
  if (name == "depth") return Value::Int(depth_ + 1);
  if (name == "depth0") return Value::Int(depth_);
  if (name == "previtem") {
    return i > 0 ? items_[i - 1] : Value::Undefined("there is no previous item");
  }
  if (name == "nextitem") {
    return i + 1 < n ? items_[i + 1] : Value::Undefined("there is no next item");
  }
  if (name == "cycle" || name == "changed") {
    auto fn = std::shared_ptr<Object>(new LoopFunction(shared_from_this(), name == "cycle"));
    interp_.Track(fn);
    return Value::FromObject(fn);
  }
  return Object::GetAttr(name);
}

}  // namespace

Interpreter::~Interpreter() {
  // Hold every object first, so that clearing one cannot free a long chain of others
  // recursively; then each is freed on its own, already empty.
  std::vector<std::shared_ptr<Object>> alive;
  alive.reserve(tracked_.size());
  for (auto& weak : tracked_) {
    if (auto object = weak.lock()) alive.push_back(std::move(object));
  }
  tracked_.clear();
  for (auto& object : alive) object->Clear();
}

void Interpreter::Track(const std::shared_ptr<Object>& object) {
  if (tracked_.size() >= tracked_compact_at_) {
    std::erase_if(tracked_, [](const std::weak_ptr<Object>& w) { return w.expired(); });
    tracked_compact_at_ = std::max<size_t>(1024, tracked_.size() * 2);
  }
  tracked_.push_back(object);
}

void Interpreter::Charge(uint64_t units) {
  work_ += units;
  if (work_ > limits_.max_work) {
    Throw("chat template exceeded its work limit (" + std::to_string(limits_.max_work) +
          " bytes and items produced)");
  }
}

void Interpreter::CheckStringSize(size_t bytes) {
  if (bytes > limits_.max_output_bytes) {
    Throw("chat template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  Charge(bytes);
}

void Interpreter::EnterCall() {
  if (++call_depth_ > limits_.max_call_depth) {
    --call_depth_;
    Throw("macro calls nest more than " + std::to_string(limits_.max_call_depth) +
          " deep (runaway recursion?)");
  }
}

void Interpreter::Append(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    Throw("chat template output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  Charge(text.size());
  out += text;
}

std::string Interpreter::Render(const std::vector<NodePtr>& body,
                                std::vector<std::pair<std::string, Value>> variables) {
  auto globals = std::make_shared<Frame>(nullptr);
  for (auto& [name, value] : Globals()) globals->Set(name, std::move(value));
  auto context = std::make_shared<Frame>(globals);
  for (auto& [name, value] : variables) context->Set(name, std::move(value));
  ValueLimitsScope value_limits(limits_.max_list_items, limits_.max_output_bytes);
  std::string out;
  try {
    Exec(body, context, out);
  } catch (const TemplateError& e) {
    // Raised outside any expression (a statement's own work, like unpacking a loop target).
    Fail("chat template: ", e.what());
  }
  return out;
}

Interpreter::Flow Interpreter::Exec(const std::vector<NodePtr>& body, const FramePtr& frame,
                                    std::string& out) {
  for (const auto& node : body) {
    Flow flow = ExecNode(*node, frame, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

namespace {

class NestGuard {
 public:
  NestGuard(int& depth, int max) : depth_(depth) {
    if (++depth_ > max) {
      --depth_;
      Throw("chat template nests too deeply while rendering (runaway recursion?)");
    }
  }
  ~NestGuard() { --depth_; }

 private:
  int& depth_;
};

constexpr int kMaxEvalDepth = 1000;

}  // namespace

Interpreter::Flow Interpreter::ExecNode(const Node& node, const FramePtr& frame, std::string& out) {
  try {
    NestGuard guard(eval_depth_, kMaxEvalDepth);
    switch (node.kind) {
      case NodeKind::kData:
        Append(out, node.name);
        return Flow::kNormal;
      case NodeKind::kOutput: {
        Value v = Eval(*node.a[0], frame);
        if (v.IsString()) {
          Append(out, v.AsString());
        } else {
          Append(out, Str(v));
        }
        return Flow::kNormal;
      }
      case NodeKind::kIf:
        return Truthy(Eval(*node.a[0], frame)) ? Exec(node.body, frame, out)
                                               : Exec(node.else_body, frame, out);
      case NodeKind::kFor:
        ExecFor(node, frame, Eval(*node.a[1], frame), 0, out);
        return Flow::kNormal;
      case NodeKind::kAssign:
        Assign(*node.a[0], Eval(*node.a[1], frame), frame);
        return Flow::kNormal;
      case NodeKind::kAssignBlock: {
        auto inner = std::make_shared<Frame>(frame);
        std::string text;
        Exec(node.body, inner, text);
        Value v = Value::String(std::move(text));
        if (node.a[1]) v = ApplyFilter(*node.a[1], v, frame);
        Assign(*node.a[0], v, frame);
        return Flow::kNormal;
      }
      case NodeKind::kMacro: {
        auto macro = std::shared_ptr<Object>(new Macro(&node, frame, node.name));
        Track(macro);
        frame->Set(node.name, Value::FromObject(macro));
        return Flow::kNormal;
      }
      case NodeKind::kCallBlock: {
        auto caller = std::shared_ptr<Object>(new Macro(&node, frame, "caller"));
        Track(caller);
        Value callerv = Value::FromObject(caller);
        Value result = EvalCall(*node.a[0], frame, &callerv);
        Append(out, Str(result));
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: {
        auto inner = std::make_shared<Frame>(frame);
        std::string text;
        Exec(node.body, inner, text);
        Append(out, Str(ApplyFilter(*node.a[0], Value::String(std::move(text)), frame)));
        return Flow::kNormal;
      }
      case NodeKind::kWith: {
        std::vector<Value> values;
        for (size_t i = 1; i < node.a.size(); i += 2) values.push_back(Eval(*node.a[i], frame));
        auto inner = std::make_shared<Frame>(frame);
        for (size_t i = 0; i < node.a.size(); i += 2) Assign(*node.a[i], values[i / 2], inner);
        return Exec(node.body, inner, out);
      }
      case NodeKind::kBreak:
        return Flow::kBreak;
      case NodeKind::kContinue:
        return Flow::kContinue;
      case NodeKind::kScope:
        return Exec(node.body, frame, out);
      default:
        Throw("internal error: expression used as a statement");
    }
  } catch (const TemplateError& e) {
    FailAt(node.pos, e.what());
  }
}

std::string Interpreter::RunLoop(const Node& loop, const FramePtr& frame, const Value& iterable,
                                 int depth) {
  std::string out;
  ExecFor(loop, frame, iterable, depth, out);
  return out;
}

void Interpreter::ExecFor(const Node& node, const FramePtr& frame, const Value& iterable, int depth,
                          std::string& out) {
  std::vector<Value> items = Iterate(iterable);
  Charge(items.size());
  const Node& target = *node.a[0];
  if (node.a[2]) {
    std::vector<Value> kept;
    for (Value& item : items) {
      if (++iterations_ > limits_.max_loop_iterations) {
        Throw("chat template loops more than " + std::to_string(limits_.max_loop_iterations) +
              " times");
      }
      auto f = std::make_shared<Frame>(frame);
      Assign(target, item, f);
      if (Truthy(Eval(*node.a[2], f))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Exec(node.else_body, std::make_shared<Frame>(frame), out);
    return;
  }
  auto loop = std::make_shared<Loop>(*this, &node, frame, std::move(items), depth);
  Track(loop);
  Value loopv = Value::FromObject(loop);
  for (size_t i = 0; i < loop->size(); ++i) {
    if (++iterations_ > limits_.max_loop_iterations) {
      Throw("chat template loops more than " + std::to_string(limits_.max_loop_iterations) +
            " times");
    }
    loop->SetIndex(i);
    auto f = std::make_shared<Frame>(frame);
    Assign(target, loop->item(i), f);
    f->Set("loop", loopv);
    Flow flow = Exec(node.body, f, out);
    if (flow == Flow::kBreak) break;
  }
}

void Interpreter::Assign(const Node& target, const Value& value, const FramePtr& frame) {
  switch (target.kind) {
    case NodeKind::kName:
      frame->Set(target.name, value);
      return;
    case NodeKind::kNsRef: {
      const Value* ns = frame->Lookup(target.name);
      if (!ns || !ns->IsObject() || !dynamic_cast<Namespace*>(&ns->AsObject())) {
        Throw("cannot assign attribute on non-namespace object '" + target.name + "'");
      }
      static_cast<Namespace&>(ns->AsObject()).Set(target.value.AsString(), value);
      return;
    }
    case NodeKind::kTuple: {
      std::vector<Value> items = Iterate(value);
      if (items.size() != target.a.size()) {
        if (items.size() > target.a.size()) {
          Throw("too many values to unpack (expected " + std::to_string(target.a.size()) + ")");
        }
        Throw("not enough values to unpack (expected " + std::to_string(target.a.size()) +
              ", got " + std::to_string(items.size()) + ")");
      }
      for (size_t i = 0; i < items.size(); ++i) Assign(*target.a[i], items[i], frame);
      return;
    }
    default:
      Throw("cannot assign to this expression");
  }
}

Value Interpreter::Eval(const Node& node, const FramePtr& frame) {
  try {
    NestGuard guard(eval_depth_, kMaxEvalDepth);
    return EvalNode(node, frame);
  } catch (const TemplateError& e) {
    FailAt(node.pos, e.what());
  }
}

namespace {

[[noreturn]] void ThrowUndefined(const Value& v) { Throw(UndefinedMessage(v)); }

void CheckDefined(const Value& a, const Value& b) {
  if (a.IsUndefined()) ThrowUndefined(a);
  if (b.IsUndefined()) ThrowUndefined(b);
}

[[noreturn]] void Unsupported(const char* op, const Value& a, const Value& b) {
  Throw(std::string("unsupported operand type(s) for ") + op + ": '" + TypeName(a) + "' and '" +
        TypeName(b) + "'");
}

int64_t CheckedInt(bool overflow, int64_t v) {
  if (overflow) Throw("integer overflow (latent computes with 64-bit integers)");
  return v;
}

int64_t AddInts(int64_t a, int64_t b) {
  int64_t r;
  const bool overflow = __builtin_add_overflow(a, b, &r);
  return CheckedInt(overflow, r);
}
int64_t SubInts(int64_t a, int64_t b) {
  int64_t r;
  const bool overflow = __builtin_sub_overflow(a, b, &r);
  return CheckedInt(overflow, r);
}
int64_t MulInts(int64_t a, int64_t b) {
  int64_t r;
  const bool overflow = __builtin_mul_overflow(a, b, &r);
  return CheckedInt(overflow, r);
}

double FloorDivDouble(double a, double b) {
  if (b == 0) Throw("float floor division by zero");
  double mod = std::fmod(a, b);
  double div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, a / b);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

double ModDouble(double a, double b) {
  if (b == 0) Throw("float modulo");
  double mod = std::fmod(a, b);
  if (mod != 0) {
    if ((b < 0) != (mod < 0)) mod += b;
  } else {
    mod = std::copysign(0.0, b);
  }
  return mod;
}

Value Repeat(Interpreter& interp, const Value& seq, int64_t times) {
  const bool empty = seq.IsString() ? seq.AsString().empty() : seq.Items().empty();
  if (times <= 0 || empty) {
    return seq.IsString() ? Value::String("") : Value::List({}, seq.list_kind());
  }
  if (seq.IsString()) {
    const std::string& s = seq.AsString();
    if (!s.empty() && static_cast<uint64_t>(times) > interp.limits().max_output_bytes / s.size()) {
      interp.CheckStringSize(interp.limits().max_output_bytes + 1);
    }
    interp.CheckStringSize(s.size() * times);
    std::string out;
    out.reserve(s.size() * times);
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::String(std::move(out));
  }
  const auto& items = seq.Items();
  if (!items.empty()) {
    if (static_cast<uint64_t>(times) > interp.limits().max_work / items.size()) {
      interp.Charge(interp.limits().max_work + 1);
    }
    CheckItems(items.size() * times);
    interp.Charge(items.size() * times);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::List(std::move(out), seq.list_kind());
}

bool ListLike(const Value& v) {
  return v.IsList() && (v.list_kind() == ListKind::kList || v.list_kind() == ListKind::kTuple);
}

Value Arith(Interpreter& interp, BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kMod && a.IsString()) {
    // str % args: Python formats with whatever the right side is, undefined included.
    std::string s = PercentFormat(a.AsString(), b);
    interp.CheckStringSize(s.size());
    return Value::String(std::move(s));
  }
  CheckDefined(a, b);
  const bool nums = a.IsNumber() && b.IsNumber();
  const bool ints = IntLike(a) && IntLike(b);
  switch (op) {
    case BinaryOp::kAdd:
      if (ints) return Value::Int(AddInts(a.AsInt(), b.AsInt()));
      if (nums) return Value::Float(a.AsDouble() + b.AsDouble());
      if (a.IsString() && b.IsString()) {
        interp.CheckStringSize(a.AsString().size() + b.AsString().size());
        return Value::String(a.AsString() + b.AsString());
      }
      if (ListLike(a) && ListLike(b) && a.list_kind() == b.list_kind()) {
        CheckItems(a.Items().size() + b.Items().size());
        interp.Charge(a.Items().size() + b.Items().size());
        std::vector<Value> items = a.Items();
        items.insert(items.end(), b.Items().begin(), b.Items().end());
        return Value::List(std::move(items), a.list_kind());
      }
      if (a.IsString()) {
        Throw("can only concatenate str (not \"" + TypeName(b) + "\") to str");
      }
      if (ListLike(a)) {
        Throw("can only concatenate " + TypeName(a) + " (not \"" + TypeName(b) + "\") to " +
              TypeName(a));
      }
      Unsupported("+", a, b);
    case BinaryOp::kSub:
      if (ints) return Value::Int(SubInts(a.AsInt(), b.AsInt()));
      if (nums) return Value::Float(a.AsDouble() - b.AsDouble());
      Unsupported("-", a, b);
    case BinaryOp::kMul:
      if (ints) return Value::Int(MulInts(a.AsInt(), b.AsInt()));
      if (nums) return Value::Float(a.AsDouble() * b.AsDouble());
      if ((a.IsString() || ListLike(a)) && IntLike(b)) return Repeat(interp, a, b.AsInt());
      if ((b.IsString() || ListLike(b)) && IntLike(a)) return Repeat(interp, b, a.AsInt());
      if ((a.IsString() || ListLike(a)) && b.IsNumber()) {
        Throw("can't multiply sequence by non-int of type '" + TypeName(b) + "'");
      }
      Unsupported("*", a, b);
    case BinaryOp::kDiv:
      if (nums) {
        if (b.AsDouble() == 0) Throw("division by zero");
        return Value::Float(a.AsDouble() / b.AsDouble());
      }
      Unsupported("/", a, b);
    case BinaryOp::kFloorDiv:
      if (ints) {
        if (b.AsInt() == 0) Throw("integer division or modulo by zero");
        if (a.AsInt() == std::numeric_limits<int64_t>::min() && b.AsInt() == -1) {
          CheckedInt(true, 0);
        }
        int64_t q = a.AsInt() / b.AsInt();
        if ((a.AsInt() % b.AsInt() != 0) && ((a.AsInt() < 0) != (b.AsInt() < 0))) --q;
        return Value::Int(q);
      }
      if (nums) return Value::Float(FloorDivDouble(a.AsDouble(), b.AsDouble()));
      Unsupported("//", a, b);
    case BinaryOp::kMod:
      if (ints) {
        if (b.AsInt() == 0) Throw("integer division or modulo by zero");
        if (b.AsInt() == -1) return Value::Int(0);
        int64_t m = a.AsInt() % b.AsInt();
        if (m != 0 && ((m < 0) != (b.AsInt() < 0))) m += b.AsInt();
        return Value::Int(m);
      }
      if (nums) return Value::Float(ModDouble(a.AsDouble(), b.AsDouble()));
      if (a.IsString()) {
        std::string s = PercentFormat(a.AsString(), b);
        interp.CheckStringSize(s.size());
        return Value::String(std::move(s));
      }
      Unsupported("%", a, b);
    case BinaryOp::kPow:
      if (ints && b.AsInt() >= 0) {
        int64_t base = a.AsInt(), e = b.AsInt(), result = 1;
        while (e > 0) {
          if (e & 1) result = MulInts(result, base);
          e >>= 1;
          if (e) base = MulInts(base, base);
        }
        return Value::Int(result);
      }
      if (nums) {
        if (a.AsDouble() == 0 && b.AsDouble() < 0) {
          Throw("0.0 cannot be raised to a negative power");
        }
        double x = std::pow(a.AsDouble(), b.AsDouble());
        if (std::isnan(x) && !std::isnan(a.AsDouble()) && !std::isnan(b.AsDouble())) {
          Throw("negative number cannot be raised to a fractional power (complex result)");
        }
        return Value::Float(x);
      }
      Unsupported("** or pow()", a, b);
    default:
      Throw("internal error: bad arithmetic operator");
  }
}

bool CompareValues(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return Equals(a, b);
    case CompareOp::kNe:
      return !Equals(a, b);
    case CompareOp::kIn:
      return Contains(b, a);
    case CompareOp::kNotIn:
      return !Contains(b, a);
    default:
      break;
  }
  CheckDefined(a, b);
  switch (op) {
    case CompareOp::kLt:
      return Less(a, b);
    case CompareOp::kGt:
      return Less(b, a);
    case CompareOp::kLe:
      return Less(a, b) || Equals(a, b);
    case CompareOp::kGe:
      return Less(b, a) || Equals(a, b);
    default:
      return false;
  }
}

}  // namespace

Value Interpreter::EvalNode(const Node& node, const FramePtr& frame) {
  switch (node.kind) {
    case NodeKind::kConst:
      return node.value;
    case NodeKind::kName: {
      const Value* v = frame->Lookup(node.name);
      if (v) return *v;
      return Value::Undefined("'" + node.name + "' is undefined");
    }
    case NodeKind::kGetattr:
      return GetAttr(Eval(*node.a[0], frame), node.name);
    case NodeKind::kGetitem: {
      Value obj = Eval(*node.a[0], frame);
      const Node& index = *node.a[1];
      if (index.kind == NodeKind::kSlice) {
        if (obj.IsUndefined()) ThrowUndefined(obj);
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          parts[i] = index.a[i] ? Eval(*index.a[i], frame) : Value::None();
        }
        Value sliced = SliceValue(obj, parts[0], parts[1], parts[2]);
        if (sliced.IsString()) {
          Charge(sliced.AsString().size());
        } else if (sliced.IsList()) {
          Charge(sliced.Items().size());
        }
        return sliced;
      }
      return GetItem(obj, Eval(index, frame));
    }
    case NodeKind::kCall:
      return EvalCall(node, frame, nullptr);
    case NodeKind::kFilter:
      return ApplyFilter(node, node.a[0] ? Eval(*node.a[0], frame) : Value(), frame);
    case NodeKind::kTest: {
      Value input = Eval(*node.a[0], frame);
      CallArgs args;
      EvalArgs(node, 1, frame, args);
      if (!node.builtin) Throw("no test named '" + node.name + "'");
      return Value::Bool(static_cast<const TestDef*>(node.builtin)->fn(*this, input, args));
    }
    case NodeKind::kNeg:
    case NodeKind::kPos: {
      Value v = Eval(*node.a[0], frame);
      if (v.IsUndefined()) ThrowUndefined(v);
      if (!v.IsNumber()) {
        Throw(std::string("bad operand type for unary ") +
              (node.kind == NodeKind::kNeg ? "-" : "+") + ": '" + TypeName(v) + "'");
      }
      if (node.kind == NodeKind::kPos) return v.IsBool() ? Value::Int(v.AsInt()) : v;
      if (v.IsFloat()) return Value::Float(-v.AsDouble());
      if (v.AsInt() == std::numeric_limits<int64_t>::min()) CheckedInt(true, 0);
      return Value::Int(-v.AsInt());
    }
    case NodeKind::kNot:
      return Value::Bool(!Truthy(Eval(*node.a[0], frame)));
    case NodeKind::kBinary: {
      Value left = Eval(*node.a[0], frame);
      if (node.op == BinaryOp::kAnd) return Truthy(left) ? Eval(*node.a[1], frame) : left;
      if (node.op == BinaryOp::kOr) return Truthy(left) ? left : Eval(*node.a[1], frame);
      Value right = Eval(*node.a[1], frame);
      return Arith(*this, node.op, left, right);
    }
    case NodeKind::kConcat: {
      std::string s;
      for (const auto& part : node.a) {
        Value v = Eval(*part, frame);
        std::string piece = Str(v);
        CheckStringSize(s.size() + piece.size());
        s += piece;
      }
      return Value::String(std::move(s));
    }
    case NodeKind::kCompare: {
      Value left = Eval(*node.a[0], frame);
      for (size_t i = 0; i < node.ops.size(); ++i) {
        Value right = Eval(*node.a[i + 1], frame);
        if (!CompareValues(node.ops[i], left, right)) return Value::Bool(false);
        left = std::move(right);
      }
      return Value::Bool(true);
    }
    case NodeKind::kCondExpr:
      if (Truthy(Eval(*node.a[0], frame))) return Eval(*node.a[1], frame);
      if (node.a[2]) return Eval(*node.a[2], frame);
      return Value::Undefined("the inline if-expression on line " + std::to_string(node.pos.line) +
                              " evaluated to false and no else section was defined");
    case NodeKind::kList:
    case NodeKind::kTuple: {
      std::vector<Value> items;
      items.reserve(node.a.size());
      for (const auto& item : node.a) items.push_back(Eval(*item, frame));
      Charge(items.size());
      return Value::List(std::move(items),
                         node.kind == NodeKind::kList ? ListKind::kList : ListKind::kTuple);
    }
    case NodeKind::kDict: {
      DictData dict;
      for (size_t i = 0; i + 1 < node.a.size(); i += 2) {
        Value key = Eval(*node.a[i], frame);
        dict.Set(std::move(key), Eval(*node.a[i + 1], frame));
      }
      Charge(dict.entries.size());
      return Value::Dict(std::move(dict));
    }
    case NodeKind::kNsRef:
      Throw("namespace reference used as a value");
    default:
      Throw("internal error: statement used as an expression");
  }
}

void Interpreter::EvalArgs(const Node& node, size_t first, const FramePtr& frame, CallArgs& args) {
  for (size_t i = first; i < node.a.size(); ++i) args.args.push_back(Eval(*node.a[i], frame));
  for (const auto& [key, value] : node.kwargs) args.kwargs.emplace_back(key, Eval(*value, frame));
  if (node.dyn_args) {
    Value extra = Eval(*node.dyn_args, frame);
    for (Value& v : Iterate(extra)) args.args.push_back(std::move(v));
  }
  if (node.dyn_kwargs) {
    Value extra = Eval(*node.dyn_kwargs, frame);
    if (!extra.IsDict()) Throw("argument after ** must be a mapping, not " + TypeName(extra));
    for (const auto& [key, value] : extra.AsDict().entries) {
      if (!key.IsString()) Throw("keywords must be strings");
      args.kwargs.emplace_back(key.AsString(), value);
    }
  }
  // Python rejects a keyword given twice. Through a set: `**d` can bring a dict's every key.
  if (args.kwargs.size() > 1) {
    std::unordered_set<std::string_view> seen;
    for (const auto& [key, value] : args.kwargs) {
      if (!seen.insert(key).second) {
        Throw("got multiple values for keyword argument '" + key + "'");
      }
    }
  }
}

Value Interpreter::EvalCall(const Node& node, const FramePtr& frame, const Value* extra_caller) {
  Value callee = Eval(*node.a[0], frame);
  CallArgs args;
  EvalArgs(node, 1, frame, args);
  if (extra_caller) args.kwargs.emplace_back("caller", *extra_caller);
  return Call(callee, args);
}

Value Interpreter::Call(const Value& callee, CallArgs& args) {
  if (callee.IsUndefined()) ThrowUndefined(callee);
  if (callee.IsObject() && callee.AsObject().IsCallable()) {
    std::shared_ptr<Object> keep = callee.ObjectPtr();
    return keep->Call(*this, args);
  }
  Throw("'" + TypeName(callee) + "' object is not callable");
}

Value Interpreter::ApplyFilter(const Node& node, const Value& input, const FramePtr& frame) {
  CallArgs args;
  EvalArgs(node, 1, frame, args);
  if (!node.builtin) Throw("no filter named '" + node.name + "'");
  return static_cast<const FilterDef*>(node.builtin)->fn(*this, input, args);
}

Value Interpreter::CallFilter(const std::string& name, const Value& input, CallArgs& args) {
  const FilterDef* def = FindFilter(name);
  if (!def) Throw("no filter named '" + name + "'");
  return def->fn(*this, input, args);
}

bool Interpreter::CallTest(const std::string& name, const Value& input, CallArgs& args) {
  const TestDef* def = FindTest(name);
  if (!def) Throw("no test named '" + name + "'");
  return def->fn(*this, input, args);
}

Value Interpreter::GetAttr(const Value& obj, const std::string& name) {
  if (obj.IsUndefined()) ThrowUndefined(obj);
  if (obj.IsObject()) return obj.AsObject().GetAttr(name);
  bool found = false;
  Value attr = StrAttribute(obj, name, &found);
  if (found) return attr;
  if (obj.IsDict()) {
    if (const Value* v = obj.AsDict().Find(Value::String(name))) return *v;
  }
  return Value::Undefined("'" + ObjectTypeRepr(obj) + "' has no attribute '" + name + "'");
}

Value Interpreter::GetItem(const Value& obj, const Value& key) {
  if (obj.IsUndefined()) ThrowUndefined(obj);
  if (obj.IsDict()) {
    bool hashable = true;
    try {
      HashKey(key);
    } catch (const TemplateError&) {
      hashable = false;
    }
    if (hashable) {
      if (const Value* v = obj.AsDict().Find(key)) return *v;
    }
  } else if ((obj.IsSequence() || obj.IsString()) && IntLike(key)) {
    const int64_t n = Length(obj);
    int64_t i = key.AsInt();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.IsList()) return obj.Items()[i];
      const std::string& s = obj.AsString();
      const size_t at = ByteOffset(s, i);
      return Value::String(s.substr(at, CharLen(std::string_view(s).substr(at))));
    }
  }
  if (key.IsString()) {
    if (obj.IsObject()) {
      Value v = obj.AsObject().GetAttr(key.AsString());
      if (!v.IsUndefined()) return v;
    } else {
      bool found = false;
      Value attr = StrAttribute(obj, key.AsString(), &found);
      if (found) return attr;
    }
  }
  return Value::Undefined("'" + ObjectTypeRepr(obj) + "' has no attribute " + Repr(key));
}

}  // namespace latent::tokenizer::jinja
