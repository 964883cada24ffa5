// A constraint on the tokens one sample may generate (structured output: a JSON schema's grammar).
// The engine asks it, before each draw, which tokens may come next (a bitmask the sampler applies
// to the logits) and tells it each token drawn. The engine knows only this interface; the server
// builds the grammar-backed implementation (src/structured/).
#pragma once

#include <cstdint>
#include <memory>

namespace latent::engine {

// 32-bit words of an allowed-token bitmask over `vocab` ids: bit (t % 32) of word t / 32 is set
// when token t is allowed.
inline int64_t BitmaskWords(int64_t vocab) { return (vocab + 31) / 32; }
inline bool BitmaskAllows(const uint32_t* bitmask, int32_t token) {
  return (bitmask[token >> 5] >> (token & 31)) & 1u;
}

// The state of one sample. Not thread-safe; distinct objects may be used from distinct threads.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Writes the tokens allowed next into `bitmask` [BitmaskWords(vocab)] (a stop token only where
  // the constrained text may end).
  virtual void FillNextTokenBitmask(uint32_t* bitmask) = 0;
  // Advances past `token`; false when the constraint does not allow it (its state is unchanged).
  virtual bool Accept(int32_t token) = 0;
  // Whether the constrained text is complete and ended (a stop token was accepted): the sample
  // ends with kStop.
  virtual bool IsTerminated() const = 0;
};

// Makes the state of each sample of a request; shared (read-only) by the request's samples.
class TokenConstraintFactory {
 public:
  virtual ~TokenConstraintFactory() = default;
  virtual std::unique_ptr<TokenConstraint> Start() const = 0;
};

}  // namespace latent::engine
