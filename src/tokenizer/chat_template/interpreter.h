// Runs a parsed template: scopes as jinja2 has them (a for loop body and a macro get their own
// scope, if does not), undefined values that print as nothing but fail when used, namespaces,
// macros, loop variables, and bounds on output size, work and nesting.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/chat_template/value.h"

namespace latent::tokenizer::jinja {

using Limits = ChatTemplateLimits;

// One scope's variables, over its parent's. Small scopes are scanned; past kIndexFrom names they
// are found through an index, as chat_template_kwargs can put tens of thousands of names in one
// scope (setting each by a scan made a 50,000-key request take seconds to render).
class Frame {
 public:
  explicit Frame(std::shared_ptr<Frame> p) : parent(std::move(p)) {}
  // The innermost binding of `name`, or nullptr.
  const Value* Lookup(const std::string& name) const;
  // Binds `name` in this scope; an existing binding here is overwritten in place.
  void Set(const std::string& name, Value value);

  const std::shared_ptr<Frame> parent;

 private:
  static constexpr size_t kIndexFrom = 16;
  static constexpr size_t kAbsent = static_cast<size_t>(-1);
  // The place of `name` in this scope's vars_, or kAbsent.
  size_t PlaceOf(const std::string& name) const;

  std::vector<std::pair<std::string, Value>> vars_;  // in the order first set
  std::unordered_map<std::string, size_t> index_;    // name -> place in vars_, once indexed
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter {
 public:
  explicit Interpreter(const Limits& limits) : limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders the template body with these variables over the globals.
  std::string Render(const std::vector<NodePtr>& body,
                     std::vector<std::pair<std::string, Value>> variables);

  // For built-ins.
  Value Call(const Value& callee, CallArgs& args);
  Value CallFilter(const std::string& name, const Value& input, CallArgs& args);
  bool CallTest(const std::string& name, const Value& input, CallArgs& args);
  Value GetAttr(const Value& obj, const std::string& name);
  Value GetItem(const Value& obj, const Value& key);
  // Counts work (bytes or items produced) against max_work, and a string's size against
  // max_output_bytes; both throw TemplateError when over.
  void Charge(uint64_t units);
  void CheckStringSize(size_t bytes);
  // Keeps track of objects so that reference cycles among them are broken when the render ends.
  void Track(const std::shared_ptr<Object>& object);
  const Limits& limits() const { return limits_; }

  // The statements of a macro body or a loop; used by the objects that run them.
  enum class Flow { kNormal, kBreak, kContinue };
  Flow Exec(const std::vector<NodePtr>& body, const FramePtr& frame, std::string& out);
  Value Eval(const Node& node, const FramePtr& frame);
  void EnterCall();
  void LeaveCall() { --call_depth_; }
  std::string RunLoop(const Node& loop, const FramePtr& frame, const Value& iterable, int depth);

 private:
  Flow ExecNode(const Node& node, const FramePtr& frame, std::string& out);
  Value EvalNode(const Node& node, const FramePtr& frame);
  void Append(std::string& out, std::string_view text);
  void Assign(const Node& target, const Value& value, const FramePtr& frame);
  Value EvalCall(const Node& node, const FramePtr& frame, const Value* extra_caller);
  void EvalArgs(const Node& node, size_t first, const FramePtr& frame, CallArgs& args);
  Value ApplyFilter(const Node& node, const Value& input, const FramePtr& frame);
  void ExecFor(const Node& node, const FramePtr& frame, const Value& iterable, int depth,
               std::string& out);

  Limits limits_;
  int64_t iterations_ = 0;
  uint64_t work_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  std::vector<std::weak_ptr<Object>> tracked_;
  size_t tracked_compact_at_ = 1024;
};

// Namespaces: the one mutable object templates have (`set ns.attr = ...`).
class Namespace : public Object {
 public:
  std::string TypeName() const override { return "Namespace"; }
  std::string Repr() const override;
  Value GetAttr(const std::string& name) override;
  void Set(const std::string& name, Value value);
  void Clear() override { attrs_ = DictData(); }

 private:
  DictData attrs_;
};

}  // namespace latent::tokenizer::jinja
