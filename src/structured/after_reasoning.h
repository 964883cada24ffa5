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
//
// Where the model may open the reasoning itself (the reasoning parser's kMayOpen: a prompt that
// ends at the assistant's turn), the first token decides, as the parser does: the open token
// (<think>'s one id) starts the reasoning, and the grammar waits for the end token as above; any
// other first token is the answer's, so the grammar masks from the first token, the open token
// allowed beside what it allows.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/token_constraint.h"

namespace latent::structured {

// `grammar` starts after `end_token`; `vocab_size` is the mask's width (the grammar's). With
// `open_token` < 0 the output starts inside the reasoning; otherwise it may open it with that
// token as its first (above).
std::shared_ptr<const engine::TokenConstraintFactory> AfterReasoning(
    std::shared_ptr<const engine::TokenConstraintFactory> grammar, int32_t end_token,
    int64_t vocab_size, int32_t open_token = -1);

}  // namespace latent::structured
