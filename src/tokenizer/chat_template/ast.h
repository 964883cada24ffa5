// The parsed template: one node type for expressions and statements, each with its position.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/chat_template/lexer.h"
#include "tokenizer/chat_template/value.h"

namespace latent::tokenizer::jinja {

enum class NodeKind : uint8_t {
  // Expressions.
  kConst,     // value
  kName,      // name
  kGetattr,   // a[0].name
  kGetitem,   // a[0][a[1]]
  kSlice,     // a[0]:a[1]:a[2] (null parts absent); only as a kGetitem index
  kCall,      // a[0](a[1:], kwargs, *dyn_args, **dyn_kwargs)
  kFilter,    // a[0] | name(a[1:], kwargs); a[0] null in a filter block
  kTest,      // a[0] is name(a[1:], kwargs)
  kNeg,       // -a[0]
  kPos,       // +a[0]
  kNot,       // not a[0]
  kBinary,    // a[0] op a[1]: + - * / // % ** and or
  kConcat,    // a[0] ~ a[1] ~ ...
  kCompare,   // a[0] ops[0] a[1] ops[1] a[2] ...
  kCondExpr,  // a[1] if a[0] else a[2] (a[2] may be null)
  kList,      // [a...]
  kTuple,     // (a...)
  kDict,      // {a[0]: a[1], a[2]: a[3], ...}
  kNsRef,     // name.attr as an assignment target
  // Statements.
  kData,         // literal text in `name`
  kOutput,       // {{ a[0] }}
  kFor,          // for a[0] in a[1] [if a[2]]: body [else: else_body]
  kIf,           // if a[0]: body else: else_body (elif nests an kIf in else_body)
  kAssign,       // set a[0] = a[1]
  kAssignBlock,  // set a[0] [| filter a[1]]: body
  kMacro,        // macro name(params = defaults): body
  kCallBlock,    // call(params = defaults) a[0]: body
  kFilterBlock,  // filter a[0]: body
  kWith,         // with params = a...: body
  kBreak,
  kContinue,
  kScope,  // a body run in place ({% generation %})
};

enum class BinaryOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kAnd, kOr };
enum class CompareOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
  NodeKind kind;
  Pos pos;
  std::string name;
  Value value;
  std::vector<NodePtr> a;
  std::vector<std::pair<std::string, NodePtr>> kwargs;
  NodePtr dyn_args, dyn_kwargs;
  std::vector<CompareOp> ops;
  BinaryOp op = BinaryOp::kAdd;
  std::vector<NodePtr> body;
  std::vector<NodePtr> else_body;
  // Macros and call blocks: parameter names, and defaults for the last defaults.size() of them.
  std::vector<std::string> params;
  std::vector<NodePtr> defaults;
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;
  bool recursive = false;         // for ... recursive
  const void* builtin = nullptr;  // the filter or test a kFilter/kTest calls, resolved at parse
  int depth = 1;                  // height of an expression tree, bounded by the parser

  Node(NodeKind k, Pos p) : kind(k), pos(p) {}
};

}  // namespace latent::tokenizer::jinja
