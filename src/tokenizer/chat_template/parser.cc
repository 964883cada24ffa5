#include "tokenizer/chat_template/parser.h"

#include <algorithm>
#include <initializer_list>
#include <string_view>

#include "tokenizer/chat_template/builtins.h"

namespace latent::tokenizer::jinja {
namespace {

std::string Describe(const Token& t) {
  switch (t.type) {
    case TokenType::kData:
      return "template data";
    case TokenType::kVariableBegin:
      return "'{{'";
    case TokenType::kVariableEnd:
      return "'}}'";
    case TokenType::kBlockBegin:
      return "'{%'";
    case TokenType::kBlockEnd:
      return "'%}'";
    case TokenType::kEof:
      return "end of template";
    case TokenType::kString:
      return "string";
    default:
      return "'" + t.value + "'";
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  std::vector<NodePtr> ParseTemplate() {
    std::vector<NodePtr> body = Subparse({});
    if (Cur().type != TokenType::kEof) Fail(Cur(), "unexpected " + Describe(Cur()));
    return body;
  }

 private:
  // Depth of nested expressions and blocks.
  class DepthGuard {
   public:
    DepthGuard(Parser& p, const Token& at) : p_(p) {
      if (++p_.depth_ > kMaxParseDepth) {
        FailAt(at.pos,
               "template nests more than " + std::to_string(kMaxParseDepth) + " levels deep");
      }
    }
    ~DepthGuard() { --p_.depth_; }

   private:
    Parser& p_;
  };

  // Sets a parser flag for a scope.
  class FlagScope {
   public:
    FlagScope(bool& flag, bool value) : flag_(flag), saved_(flag) { flag_ = value; }
    ~FlagScope() { flag_ = saved_; }

   private:
    bool& flag_;
    bool saved_;
  };

  const Token& Cur() const { return tokens_[pos_]; }
  const Token& Look() const { return tokens_[pos_ + 1 < tokens_.size() ? pos_ + 1 : pos_]; }
  const Token& Next() {
    const Token& t = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }

  [[noreturn]] static void Fail(const Token& at, const std::string& message) {
    FailAt(at.pos, message);
  }

  static bool IsName(const Token& t, std::string_view name) {
    return t.type == TokenType::kName && t.value == name;
  }
  static bool IsOp(const Token& t, std::string_view op) {
    return t.type == TokenType::kOperator && t.value == op;
  }
  bool SkipName(std::string_view name) {
    if (!IsName(Cur(), name)) return false;
    Next();
    return true;
  }
  bool SkipOp(std::string_view op) {
    if (!IsOp(Cur(), op)) return false;
    Next();
    return true;
  }
  const Token& ExpectOp(std::string_view op) {
    if (!IsOp(Cur(), op)) {
      Fail(Cur(), "expected '" + std::string(op) + "', got " + Describe(Cur()));
    }
    return Next();
  }
  const Token& ExpectName() {
    if (Cur().type != TokenType::kName) Fail(Cur(), "expected a name, got " + Describe(Cur()));
    return Next();
  }
  void ExpectNameValue(std::string_view name) {
    if (!IsName(Cur(), name)) {
      Fail(Cur(), "expected '" + std::string(name) + "', got " + Describe(Cur()));
    }
    Next();
  }
  void Expect(TokenType type) {
    if (Cur().type != type) {
      Token want{type, "", {}};
      Fail(Cur(), "expected " + Describe(want) + ", got " + Describe(Cur()));
    }
    Next();
  }

  static NodePtr Make(NodeKind kind, Pos pos) { return std::make_unique<Node>(kind, pos); }

  // Sets an expression node's height from its children and bounds it.
  static NodePtr Finish(NodePtr node) {
    int depth = 0;
    auto visit = [&](const NodePtr& child) {
      if (child) depth = std::max(depth, child->depth);
    };
    for (const auto& child : node->a) visit(child);
    for (const auto& [key, child] : node->kwargs) visit(child);
    visit(node->dyn_args);
    visit(node->dyn_kwargs);
    node->depth = depth + 1;
    if (node->depth > kMaxExpressionDepth) {
      FailAt(node->pos,
             "expression nests more than " + std::to_string(kMaxExpressionDepth) + " levels deep");
    }
    return node;
  }

  // Statements ---------------------------------------------------------------------------------

  // Parses until a block whose tag is one of `end_tags`; the stream then stands on that tag name.
  std::vector<NodePtr> Subparse(std::initializer_list<std::string_view> end_tags) {
    std::vector<NodePtr> body;
    while (Cur().type != TokenType::kEof) {
      const Token& t = Cur();
      if (t.type == TokenType::kData) {
        auto node = Make(NodeKind::kData, t.pos);
        node->name = t.value;
        body.push_back(std::move(node));
        Next();
      } else if (t.type == TokenType::kVariableBegin) {
        Next();
        auto node = Make(NodeKind::kOutput, t.pos);
        node->a.push_back(ParseTuple(false, true, {}, false, false));
        Expect(TokenType::kVariableEnd);
        body.push_back(std::move(node));
      } else if (t.type == TokenType::kBlockBegin) {
        Next();
        for (std::string_view tag : end_tags) {
          if (IsName(Cur(), tag)) return body;
        }
        body.push_back(ParseStatement());
        Expect(TokenType::kBlockEnd);
      } else {
        Fail(t, "unexpected " + Describe(t));
      }
    }
    if (end_tags.size() > 0) {
      std::string want;
      for (std::string_view tag : end_tags) {
        want += (want.empty() ? "'" : " or '") + std::string(tag) + "'";
      }
      Fail(Cur(), "unexpected end of template, expected " + want);
    }
    return body;
  }

  // The body of a block statement: `%}` then statements up to one of `end_tags`.
  std::vector<NodePtr> ParseStatements(std::initializer_list<std::string_view> end_tags,
                                       bool drop_needle) {
    SkipOp(":");
    Expect(TokenType::kBlockEnd);
    std::vector<NodePtr> body = Subparse(end_tags);
    if (drop_needle) Next();
    return body;
  }

  NodePtr ParseStatement() {
    const Token& t = Cur();
    DepthGuard guard(*this, t);
    if (t.type != TokenType::kName) Fail(t, "tag name expected, got " + Describe(t));
    const std::string& tag = t.value;
    if (tag == "for") return ParseFor();
    if (tag == "if") return ParseIf();
    if (tag == "set") return ParseSet();
    if (tag == "macro") return ParseMacro();
    if (tag == "call") return ParseCallBlock();
    if (tag == "filter") return ParseFilterBlock();
    if (tag == "with") return ParseWith();
    if (tag == "print") return ParsePrint();
    if (tag == "generation") {
      Next();
      auto node = Make(NodeKind::kScope, t.pos);
      node->body = ParseStatements({"endgeneration"}, true);
      return node;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) Fail(t, "'" + tag + "' outside of a loop");
      Next();
      return Make(tag == "break" ? NodeKind::kBreak : NodeKind::kContinue, t.pos);
    }
    if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" ||
        tag == "block") {
      Fail(t, "unsupported tag '" + tag + "': chat templates cannot load other templates");
    }
    if (tag == "autoescape") Fail(t, "unsupported tag 'autoescape'");
    Fail(t, "unknown tag '" + tag + "'");
  }

  NodePtr ParseFor() {
    const Token& t = Next();
    auto node = Make(NodeKind::kFor, t.pos);
    node->a.push_back(ParseAssignTarget(true, false, {"in"}, false));
    ExpectNameValue("in");
    node->a.push_back(ParseTuple(false, false, {"recursive"}, false, false));
    if (SkipName("if")) {
      node->a.push_back(ParseExpression(true));
    } else {
      node->a.push_back(nullptr);
    }
    node->recursive = SkipName("recursive");
    FlagScope soft(soft_, false);
    ++loop_depth_;
    node->body = ParseStatements({"endfor", "else"}, false);
    --loop_depth_;
    if (Next().value == "else") node->else_body = ParseStatements({"endfor"}, true);
    return node;
  }

  NodePtr ParseIf() {
    const Token& t = Next();
    FlagScope soft(soft_, true);
    auto result = Make(NodeKind::kIf, t.pos);
    Node* node = result.get();
    while (true) {
      node->a.push_back(ParseTuple(false, false, {}, false, false));
      node->body = ParseStatements({"elif", "else", "endif"}, false);
      const Token& tag = Next();
      if (tag.value == "elif") {
        auto elif = Make(NodeKind::kIf, tag.pos);
        Node* next = elif.get();
        node->else_body.push_back(std::move(elif));
        node = next;
        continue;
      }
      if (tag.value == "else") node->else_body = ParseStatements({"endif"}, true);
      break;
    }
    return result;
  }

  NodePtr ParseSet() {
    const Token& t = Next();
    NodePtr target = ParseAssignTarget(true, false, {}, true);
    if (SkipOp("=")) {
      auto node = Make(NodeKind::kAssign, t.pos);
      node->a.push_back(std::move(target));
      node->a.push_back(ParseTuple(false, true, {}, false, false));
      return node;
    }
    auto node = Make(NodeKind::kAssignBlock, t.pos);
    node->a.push_back(std::move(target));
    node->a.push_back(IsOp(Cur(), "|") ? ParseFilter(nullptr, false) : nullptr);
    FlagScope soft(soft_, false);
    node->body = ParseStatements({"endset"}, true);
    return node;
  }

  void ParseSignature(Node& node) {
    ExpectOp("(");
    while (!IsOp(Cur(), ")")) {
      if (!node.params.empty()) ExpectOp(",");
      const Token& name = ExpectName();
      if (SkipOp("=")) {
        node.defaults.push_back(ParseExpression(true));
      } else if (!node.defaults.empty()) {
        Fail(name, "non-default argument follows default argument");
      }
      node.params.push_back(name.value);
    }
    ExpectOp(")");
  }

  static void FindSpecialNames(const Node& n, Node& macro) {
    if (n.kind == NodeKind::kName) {
      if (n.name == "varargs") macro.uses_varargs = true;
      if (n.name == "kwargs") macro.uses_kwargs = true;
      if (n.name == "caller") macro.uses_caller = true;
    }
    auto visit = [&](const std::vector<NodePtr>& v) {
      for (const auto& c : v) {
        if (c) FindSpecialNames(*c, macro);
      }
    };
    visit(n.a);
    visit(n.body);
    visit(n.else_body);
    visit(n.defaults);
    for (const auto& [k, v] : n.kwargs) FindSpecialNames(*v, macro);
    if (n.dyn_args) FindSpecialNames(*n.dyn_args, macro);
    if (n.dyn_kwargs) FindSpecialNames(*n.dyn_kwargs, macro);
  }

  // A macro or call block body: its own scope, outside any loop.
  void ParseMacroBody(Node& node, std::string_view end_tag) {
    FlagScope soft(soft_, false);
    int saved_loops = loop_depth_;
    loop_depth_ = 0;
    node.body = ParseStatements({end_tag}, true);
    loop_depth_ = saved_loops;
    for (const auto& stmt : node.body) FindSpecialNames(*stmt, node);
    if (node.params.size() > 0) {
      for (const auto& p : node.params) {
        if (p == "varargs") node.uses_varargs = false;
        if (p == "kwargs") node.uses_kwargs = false;
      }
    }
  }

  NodePtr ParseMacro() {
    const Token& t = Next();
    auto node = Make(NodeKind::kMacro, t.pos);
    node->name = ExpectName().value;
    ParseSignature(*node);
    ParseMacroBody(*node, "endmacro");
    return node;
  }

  NodePtr ParseCallBlock() {
    const Token& t = Next();
    auto node = Make(NodeKind::kCallBlock, t.pos);
    if (IsOp(Cur(), "(")) ParseSignature(*node);
    NodePtr call = ParseExpression(true);
    if (call->kind != NodeKind::kCall) Fail(t, "expected a call after 'call'");
    node->a.push_back(std::move(call));
    ParseMacroBody(*node, "endcall");
    return node;
  }

  NodePtr ParseFilterBlock() {
    const Token& t = Next();
    auto node = Make(NodeKind::kFilterBlock, t.pos);
    node->a.push_back(ParseFilter(nullptr, true));
    FlagScope soft(soft_, false);
    node->body = ParseStatements({"endfilter"}, true);
    return node;
  }

  NodePtr ParseWith() {
    const Token& t = Next();
    auto node = Make(NodeKind::kWith, t.pos);
    while (Cur().type != TokenType::kBlockEnd) {
      if (!node->a.empty()) ExpectOp(",");
      node->a.push_back(ParseAssignTarget(true, false, {}, false));
      ExpectOp("=");
      node->a.push_back(ParseExpression(true));
    }
    FlagScope soft(soft_, false);
    node->body = ParseStatements({"endwith"}, true);
    return node;
  }

  NodePtr ParsePrint() {
    const Token& t = Next();
    auto node = Make(NodeKind::kScope, t.pos);
    while (Cur().type != TokenType::kBlockEnd) {
      if (!node->body.empty()) ExpectOp(",");
      auto out = Make(NodeKind::kOutput, Cur().pos);
      out->a.push_back(ParseExpression(true));
      node->body.push_back(std::move(out));
    }
    return node;
  }

  static bool CanAssign(const Node& n) {
    if (n.kind == NodeKind::kName || n.kind == NodeKind::kNsRef) return true;
    if (n.kind == NodeKind::kTuple) {
      for (const auto& item : n.a) {
        if (!CanAssign(*item)) return false;
      }
      return true;
    }
    return false;
  }

  NodePtr ParseAssignTarget(bool with_tuple, bool name_only,
                            std::initializer_list<std::string_view> extra_end,
                            bool with_namespace) {
    const Token& at = Cur();
    NodePtr target;
    if (name_only) {
      const Token& t = ExpectName();
      target = Make(NodeKind::kName, t.pos);
      target->name = t.value;
    } else if (with_tuple) {
      target = ParseTuple(true, true, extra_end, false, with_namespace);
    } else {
      target = ParsePrimary(with_namespace);
    }
    if (!CanAssign(*target)) Fail(at, "cannot assign to this expression");
    return target;
  }

  // Expressions --------------------------------------------------------------------------------

  bool IsTupleEnd(std::initializer_list<std::string_view> extra_end) const {
    const Token& t = Cur();
    if (t.type == TokenType::kVariableEnd || t.type == TokenType::kBlockEnd || IsOp(t, ")")) {
      return true;
    }
    for (std::string_view name : extra_end) {
      if (IsName(t, name)) return true;
    }
    return false;
  }

  NodePtr ParseTuple(bool simplified, bool with_condexpr,
                     std::initializer_list<std::string_view> extra_end, bool explicit_parens,
                     bool with_namespace) {
    const Pos pos = Cur().pos;
    std::vector<NodePtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) ExpectOp(",");
      if (IsTupleEnd(extra_end)) break;
      args.push_back(simplified ? ParsePrimary(with_namespace) : ParseExpression(with_condexpr));
      if (IsOp(Cur(), ",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) Fail(Cur(), "expected an expression, got " + Describe(Cur()));
    }
    auto node = Make(NodeKind::kTuple, pos);
    node->a = std::move(args);
    return Finish(std::move(node));
  }

  NodePtr ParseExpression(bool with_condexpr) {
    return with_condexpr ? ParseCondExpr() : ParseOr();
  }

  NodePtr ParseCondExpr() {
    Pos pos = Cur().pos;
    NodePtr expr1 = ParseOr();
    while (IsName(Cur(), "if")) {
      Next();
      FlagScope soft(soft_, true);
      auto node = Make(NodeKind::kCondExpr, pos);
      node->a.push_back(ParseOr());  // test
      NodePtr expr3;
      if (SkipName("else")) {
        DepthGuard guard(*this, Cur());
        expr3 = ParseCondExpr();
      }
      // Re-parse expr1 is not possible; it was parsed outside the soft scope, which only affects
      // when an unknown filter is reported.
      node->a.insert(node->a.begin() + 1, std::move(expr1));
      node->a.push_back(std::move(expr3));
      expr1 = Finish(std::move(node));
      pos = Cur().pos;
    }
    return expr1;
  }

  NodePtr Binary(BinaryOp op, NodePtr left, NodePtr right, Pos pos) {
    auto node = Make(NodeKind::kBinary, pos);
    node->op = op;
    node->a.push_back(std::move(left));
    node->a.push_back(std::move(right));
    return Finish(std::move(node));
  }

  NodePtr ParseOr() {
    NodePtr left = ParseAnd();
    while (IsName(Cur(), "or")) {
      Pos pos = Next().pos;
      left = Binary(BinaryOp::kOr, std::move(left), ParseAnd(), pos);
    }
    return left;
  }

  NodePtr ParseAnd() {
    NodePtr left = ParseNot();
    while (IsName(Cur(), "and")) {
      Pos pos = Next().pos;
      left = Binary(BinaryOp::kAnd, std::move(left), ParseNot(), pos);
    }
    return left;
  }

  NodePtr ParseNot() {
    if (IsName(Cur(), "not")) {
      DepthGuard guard(*this, Cur());
      auto node = Make(NodeKind::kNot, Next().pos);
      node->a.push_back(ParseNot());
      return Finish(std::move(node));
    }
    return ParseCompare();
  }

  NodePtr ParseCompare() {
    const Pos pos = Cur().pos;
    NodePtr expr = ParseMath1();
    NodePtr node;
    while (true) {
      const Token& t = Cur();
      CompareOp op;
      if (IsOp(t, "==")) {
        op = CompareOp::kEq;
      } else if (IsOp(t, "!=")) {
        op = CompareOp::kNe;
      } else if (IsOp(t, "<")) {
        op = CompareOp::kLt;
      } else if (IsOp(t, "<=")) {
        op = CompareOp::kLe;
      } else if (IsOp(t, ">")) {
        op = CompareOp::kGt;
      } else if (IsOp(t, ">=")) {
        op = CompareOp::kGe;
      } else if (IsName(t, "in")) {
        op = CompareOp::kIn;
      } else if (IsName(t, "not") && IsName(Look(), "in")) {
        Next();
        op = CompareOp::kNotIn;
      } else {
        break;
      }
      Next();
      if (!node) {
        node = Make(NodeKind::kCompare, pos);
        node->a.push_back(std::move(expr));
      }
      node->ops.push_back(op);
      node->a.push_back(ParseMath1());
    }
    return node ? Finish(std::move(node)) : std::move(expr);
  }

  NodePtr ParseMath1() {
    NodePtr left = ParseConcat();
    while (IsOp(Cur(), "+") || IsOp(Cur(), "-")) {
      const Token& t = Next();
      left = Binary(t.value == "+" ? BinaryOp::kAdd : BinaryOp::kSub, std::move(left),
                    ParseConcat(), t.pos);
    }
    return left;
  }

  NodePtr ParseConcat() {
    const Pos pos = Cur().pos;
    NodePtr first = ParseMath2();
    if (!IsOp(Cur(), "~")) return first;
    auto node = Make(NodeKind::kConcat, pos);
    node->a.push_back(std::move(first));
    while (SkipOp("~")) node->a.push_back(ParseMath2());
    return Finish(std::move(node));
  }

  NodePtr ParseMath2() {
    NodePtr left = ParsePow();
    while (true) {
      const Token& t = Cur();
      BinaryOp op;
      if (IsOp(t, "*")) {
        op = BinaryOp::kMul;
      } else if (IsOp(t, "/")) {
        op = BinaryOp::kDiv;
      } else if (IsOp(t, "//")) {
        op = BinaryOp::kFloorDiv;
      } else if (IsOp(t, "%")) {
        op = BinaryOp::kMod;
      } else {
        break;
      }
      Pos pos = Next().pos;
      left = Binary(op, std::move(left), ParsePow(), pos);
    }
    return left;
  }

  NodePtr ParsePow() {
    NodePtr left = ParseUnary(true);
    while (IsOp(Cur(), "**")) {
      Pos pos = Next().pos;
      left = Binary(BinaryOp::kPow, std::move(left), ParseUnary(true), pos);
    }
    return left;
  }

  NodePtr ParseUnary(bool with_filter) {
    DepthGuard guard(*this, Cur());
    NodePtr node;
    if (IsOp(Cur(), "-") || IsOp(Cur(), "+")) {
      const Token& t = Next();
      node = Make(t.value == "-" ? NodeKind::kNeg : NodeKind::kPos, t.pos);
      node->a.push_back(ParseUnary(false));
      node = Finish(std::move(node));
    } else {
      node = ParsePrimary(false);
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  NodePtr ParsePrimary(bool with_namespace) {
    const Token& t = Cur();
    if (t.type == TokenType::kName) {
      Next();
      if (t.value == "true" || t.value == "True" || t.value == "false" || t.value == "False") {
        auto node = Make(NodeKind::kConst, t.pos);
        node->value = Value::Bool(t.value == "true" || t.value == "True");
        return node;
      }
      if (t.value == "none" || t.value == "None") {
        auto node = Make(NodeKind::kConst, t.pos);
        node->value = Value::None();
        return node;
      }
      if (with_namespace && IsOp(Cur(), ".")) {
        Next();
        auto node = Make(NodeKind::kNsRef, t.pos);
        node->name = t.value;
        node->value = Value::String(ExpectName().value);
        return node;
      }
      auto node = Make(NodeKind::kName, t.pos);
      node->name = t.value;
      return node;
    }
    if (t.type == TokenType::kString) {
      std::string s;
      while (Cur().type == TokenType::kString) s += Next().value;
      auto node = Make(NodeKind::kConst, t.pos);
      node->value = Value::String(std::move(s));
      return node;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      Next();
      auto node = Make(NodeKind::kConst, t.pos);
      node->value =
          t.type == TokenType::kInteger ? Value::Int(t.int_value) : Value::Float(t.float_value);
      return node;
    }
    if (IsOp(t, "(")) {
      Next();
      NodePtr node = ParseTuple(false, true, {}, true, false);
      ExpectOp(")");
      return Finish(std::move(node));
    }
    if (IsOp(t, "[")) {
      Next();
      auto node = Make(NodeKind::kList, t.pos);
      while (!IsOp(Cur(), "]")) {
        if (!node->a.empty()) ExpectOp(",");
        if (IsOp(Cur(), "]")) break;
        node->a.push_back(ParseExpression(true));
      }
      ExpectOp("]");
      return Finish(std::move(node));
    }
    if (IsOp(t, "{")) {
      Next();
      auto node = Make(NodeKind::kDict, t.pos);
      while (!IsOp(Cur(), "}")) {
        if (!node->a.empty()) ExpectOp(",");
        if (IsOp(Cur(), "}")) break;
        node->a.push_back(ParseExpression(true));
        ExpectOp(":");
        node->a.push_back(ParseExpression(true));
      }
      ExpectOp("}");
      return Finish(std::move(node));
    }
    Fail(t, "unexpected " + Describe(t));
  }

  NodePtr ParsePostfix(NodePtr node) {
    while (true) {
      if (IsOp(Cur(), ".") || IsOp(Cur(), "[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp(Cur(), "(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  NodePtr ParseFilterExpr(NodePtr node) {
    while (true) {
      if (IsOp(Cur(), "|")) {
        node = ParseFilter(std::move(node), false);
      } else if (IsName(Cur(), "is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp(Cur(), "(")) {
        node = ParseCall(std::move(node));
      } else {
        return node;
      }
    }
  }

  NodePtr ParseSubscript(NodePtr node) {
    const Token& t = Next();
    if (t.value == ".") {
      const Token& attr = Next();
      if (attr.type == TokenType::kName) {
        auto out = Make(NodeKind::kGetattr, t.pos);
        out->name = attr.value;
        out->a.push_back(std::move(node));
        return Finish(std::move(out));
      }
      if (attr.type != TokenType::kInteger) Fail(attr, "expected a name or number after '.'");
      auto out = Make(NodeKind::kGetitem, t.pos);
      out->a.push_back(std::move(node));
      auto index = Make(NodeKind::kConst, attr.pos);
      index->value = Value::Int(attr.int_value);
      out->a.push_back(std::move(index));
      return Finish(std::move(out));
    }
    std::vector<NodePtr> args;
    while (!IsOp(Cur(), "]")) {
      if (!args.empty()) ExpectOp(",");
      args.push_back(ParseSubscribed());
    }
    ExpectOp("]");
    auto out = Make(NodeKind::kGetitem, t.pos);
    out->a.push_back(std::move(node));
    if (args.size() == 1) {
      out->a.push_back(std::move(args[0]));
    } else {
      auto tuple = Make(NodeKind::kTuple, t.pos);
      tuple->a = std::move(args);
      out->a.push_back(Finish(std::move(tuple)));
    }
    return Finish(std::move(out));
  }

  NodePtr ParseSubscribed() {
    const Pos pos = Cur().pos;
    std::vector<NodePtr> parts;
    if (IsOp(Cur(), ":")) {
      Next();
      parts.push_back(nullptr);
    } else {
      NodePtr node = ParseExpression(true);
      if (!IsOp(Cur(), ":")) return node;
      Next();
      parts.push_back(std::move(node));
    }
    auto at_end = [&] { return IsOp(Cur(), "]") || IsOp(Cur(), ","); };
    if (IsOp(Cur(), ":")) {
      parts.push_back(nullptr);
    } else if (!at_end()) {
      parts.push_back(ParseExpression(true));
    } else {
      parts.push_back(nullptr);
    }
    if (IsOp(Cur(), ":")) {
      Next();
      parts.push_back(at_end() ? nullptr : ParseExpression(true));
    } else {
      parts.push_back(nullptr);
    }
    auto node = Make(NodeKind::kSlice, pos);
    node->a = std::move(parts);
    return Finish(std::move(node));
  }

  // `(args, name=value, *args, **kwargs)` into node.a (after the callee), kwargs, dyn_*.
  void ParseCallArgs(Node& node) {
    const Token& open = ExpectOp("(");
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) Fail(open, "invalid syntax for function call expression");
    };
    while (!IsOp(Cur(), ")")) {
      if (require_comma) {
        ExpectOp(",");
        if (IsOp(Cur(), ")")) break;
      }
      if (IsOp(Cur(), "*")) {
        ensure(!node.dyn_args && !node.dyn_kwargs);
        Next();
        node.dyn_args = ParseExpression(true);
      } else if (IsOp(Cur(), "**")) {
        ensure(!node.dyn_kwargs);
        Next();
        node.dyn_kwargs = ParseExpression(true);
      } else if (Cur().type == TokenType::kName && IsOp(Look(), "=")) {
        ensure(!node.dyn_kwargs);
        std::string key = Next().value;
        Next();
        node.kwargs.emplace_back(std::move(key), ParseExpression(true));
      } else {
        ensure(!node.dyn_args && !node.dyn_kwargs && node.kwargs.empty());
        node.a.push_back(ParseExpression(true));
      }
      require_comma = true;
    }
    ExpectOp(")");
  }

  NodePtr ParseCall(NodePtr callee) {
    // Errors of a call point at what is called, which reads better than the '('.
    auto node = Make(NodeKind::kCall, callee->pos);
    node->a.push_back(std::move(callee));
    ParseCallArgs(*node);
    return Finish(std::move(node));
  }

  std::string ParseDottedName() {
    std::string name = ExpectName().value;
    while (IsOp(Cur(), ".")) {
      Next();
      name += "." + ExpectName().value;
    }
    return name;
  }

  NodePtr ParseFilter(NodePtr node, bool start_inline) {
    while (IsOp(Cur(), "|") || start_inline) {
      if (!start_inline) Next();
      const Token& t = Cur();
      auto filter = Make(NodeKind::kFilter, t.pos);
      filter->name = ParseDottedName();
      const FilterDef* def = FindFilter(filter->name);
      if (def) {
        filter->builtin = def;
      } else if (IsUnsupportedFilter(filter->name)) {
        Fail(t, "unsupported filter '" + filter->name + "'");
      } else if (!soft_) {
        Fail(t, "no filter named '" + filter->name + "'");
      }
      filter->a.push_back(std::move(node));
      if (IsOp(Cur(), "(")) ParseCallArgs(*filter);
      node = Finish(std::move(filter));
      start_inline = false;
    }
    return node;
  }

  NodePtr ParseTest(NodePtr node) {
    const Token& is = Next();
    const bool negated = SkipName("not");
    const Token& name_tok = Cur();
    auto test = Make(NodeKind::kTest, is.pos);
    test->name = ParseDottedName();
    const TestDef* def = FindTest(test->name);
    if (def) {
      test->builtin = def;
    } else if (!soft_) {
      Fail(name_tok, "no test named '" + test->name + "'");
    }
    test->a.push_back(std::move(node));
    const Token& t = Cur();
    if (IsOp(t, "(")) {
      ParseCallArgs(*test);
    } else if ((t.type == TokenType::kName || t.type == TokenType::kString ||
                t.type == TokenType::kInteger || t.type == TokenType::kFloat || IsOp(t, "[") ||
                IsOp(t, "{")) &&
               !IsName(t, "else") && !IsName(t, "or") && !IsName(t, "and")) {
      if (IsName(t, "is")) Fail(t, "cannot chain multiple tests with 'is'");
      test->a.push_back(ParsePostfix(ParsePrimary(false)));
    }
    test = Finish(std::move(test));
    if (!negated) return test;
    auto neg = Make(NodeKind::kNot, is.pos);
    neg->a.push_back(std::move(test));
    return Finish(std::move(neg));
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
  bool soft_ = false;  // inside an if: unknown filters and tests fail only when run
};

}  // namespace

std::vector<NodePtr> Parse(std::vector<Token> tokens) {
  return Parser(std::move(tokens)).ParseTemplate();
}

}  // namespace latent::tokenizer::jinja
