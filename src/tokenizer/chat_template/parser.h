// Parses tokens into the template's statement list, following jinja2's grammar and precedence.
#pragma once

#include <vector>

#include "tokenizer/chat_template/ast.h"
#include "tokenizer/chat_template/lexer.h"

namespace latent::tokenizer::jinja {

// Bounds that keep the recursive parser, evaluator and destructors within the stack: how deeply
// blocks and parenthesized expressions nest, and how tall an expression tree gets (a chain like
// `a + b + c + ...` or `x | f | g | ...` grows the tree without nesting).
inline constexpr int kMaxParseDepth = 128;
inline constexpr int kMaxExpressionDepth = 256;

// Throws latent::Error ("chat template line L col C: ...") on a syntax error or an unsupported
// construct.
std::vector<NodePtr> Parse(std::vector<Token> tokens);

}  // namespace latent::tokenizer::jinja
