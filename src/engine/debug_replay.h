// Test-only (`--debug-replay FILE`): the engine emits a fixed token sequence instead of sampling,
// so end-to-end tests can make a random tiny model "say" given text (reasoning markers, tool-call
// markup). Everything else runs as usual: prefill, batching, logprobs, stop tokens and strings.
// Every request (and every sample) gets the same sequence: token i of the output is ids[i]; after
// the last one the request ends with kStop (or earlier with kLength at max_tokens, or kStop at an
// EOS / stop token id in the list).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/sequence.h"

namespace latent::engine {

// Reads FILE: a JSON list of token ids, `[1, 2, 3]`, or an object `{"ids": [1, 2, 3]}`. Throws
// latent::Error naming the file for anything else, an empty list, or an id outside [0, vocab).
std::vector<int32_t> LoadDebugReplay(const std::string& path, int64_t vocab);

// The replayed token for `seq`'s next position (ids[seq.num_generated()]), with its logprob (and
// top alternatives, as SampleNext reports them) under `logits` [vocab].
SampledToken ReplayNext(const std::vector<int32_t>& ids, const float* logits, int64_t vocab,
                        const Sequence& seq, const SamplingParams& params);

// Whether `seq` has emitted the whole replay.
inline bool ReplayDone(const std::vector<int32_t>& ids, const Sequence& seq) {
  return seq.num_generated() >= static_cast<int64_t>(ids.size());
}

}  // namespace latent::engine
