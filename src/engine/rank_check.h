// The start-up check of a scale-out job (docs/scale-out.md, "Same model on every rank"): every
// rank must compute the same thing, or rank 0 samples from activations and expert sums that mix
// different models. Ranks started on another checkpoint, another --quantize or another build
// would otherwise run silently to wrong tokens (same shapes) or die mid-step in a collective of
// another size (another layer count). Each rank describes what it will compute as a list of
// (what, value) items, cheap to gather: no weights are read but a few samples.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/load_options.h"
#include "parallel/communicator.h"

namespace latent::engine {

// (what, value): "--quantize" -> "int8", "config.json" -> a hash of its bytes, ...
using RankItems = std::vector<std::pair<std::string, std::string>>;

// The source latent was built from: its commit (12 hex digits, "unknown" outside git), and when
// tracked files have uncommitted changes, a hash of them ("... with uncommitted changes H"), from
// source_state.h, which source_state.cmake rewrites at every build. The "latent source" item
// the ranks compare and the commit `latent bench` reports, so the two always name one source; a
// function, so an edit recompiles rank_check.cc alone, not the command.
std::string SourceState();

// Before loading: what decides this build's numerics ("latent source": the commit, with a hash of
// its uncommitted changes; "compiler", "build type", "compiler flags": without debug-info and
// path-map flags; none holds a path, so builds of one source in two directories agree), the
// kernels chosen for this CPU ("kernels", LATENT_GEMM and LATENT_KERNELS included, and "bf16
// products", which the kernels' name does not imply), --quantize, LATENT_KEY_FOLD, config.json's
// bytes, model.safetensors.index.json's bytes, and for every *.safetensors file in `dir` its size,
// header and a few samples of its data (what tells two checkpoints of the same shapes apart
// without reading hundreds of GB). A config.json that cannot be read or is not a regular file (a
// FIFO would block, /dev/zero never end) gives the item "config.json" -> "" (the load then says
// why).
RankItems ItemsBeforeLoading(const std::string& dir, const model::LoadOptions& options);

// How rank `rank`'s `mine` differs from `rank0`, in words ("--quantize int8 on rank 1, none on
// rank 0; config.json differs"; at most 3, then how many more); empty when they agree.
std::string DescribeDifferences(const RankItems& rank0, const RankItems& mine, int rank);

// Gathers every rank's `mine` (waiting without the step timeout: ranks reach this at their own
// pace). When every rank agrees with rank 0, returns. Otherwise rank 0 ends the job (exit 2) with
// one line naming each rank that differs and in what; the others wait for it to. A rank whose
// config.json could not be read (item "config.json" empty) is not judged: its load fails next,
// naming the file.
void CheckRanksAgree(parallel::Communicator& comm, const RankItems& mine);

}  // namespace latent::engine
