// Structured output for a thinking model (`latent serve --reasoning-parser`): the grammar applies
// to the answer, not to the reasoning before it, as vLLM does (its StructuredOutputManager neither
// masks nor advances a request's grammar until the reasoning parser's is_reasoning_end). Masking
// from the first token would keep the model from thinking and put the constrained answer inside
// the reasoning, where the reasoning parser files it.
//
// AfterReasoning wraps a grammar's factory: each sample allows every token and leaves the grammar
// untouched until it has generated the reasoning's end token (</think>'s one id); from the token
// after it, the grammar masks and accepts as it would alone. The state is a function of the
// tokens accepted, so a fresh constraint fed the same tokens (a recompute) reaches the same state.
// A sample that ends inside the reasoning (EOS, max_tokens) ends as an unconstrained one would.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/token_constraint.h"

namespace latent::structured {

// `grammar` starts after `end_token`; `vocab_size` is the mask's width (the grammar's).
std::shared_ptr<const engine::TokenConstraintFactory> AfterReasoning(
    std::shared_ptr<const engine::TokenConstraintFactory> grammar, int32_t end_token,
    int64_t vocab_size);

}  // namespace latent::structured
