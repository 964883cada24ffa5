#include "engine/distributed_model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "engine/cache_manager.h"
#include "engine/rank_check.h"
#include "model/cache_rows.h"

namespace latent::engine {
namespace {

// A forward that failed on one rank with anything but bad input (std::bad_alloc, a library's
// error, an InternalError: a failed LATENT_CHECK) may have failed there alone: the other ranks
// wait in a collective it will never join, so the ranks cannot go on in step. Bad input (any
// other latent::Error) fails every rank at the same point and the job goes on; this ends the job
// at once (exit 1), where the others would wait out LATENT_STEP_TIMEOUT.
[[noreturn]] void AbortForwardElsewhere(const char* where, const std::string& what) {
  parallel::AbortWorld(StrCat("latent: the forward failed on ", where, ": ", what,
                              "; the other ranks cannot go on in step, ending the job"));
}

// What rank 0 sends, in a fixed-size header followed by `payload_bytes` bytes.
enum class Message : uint32_t {
  kForward = 1,
  kCopyBlock = 2,
  kCache = 3,
  kStop = 4,
  kCopySlot = 5,
  kRows = 6,  // the cache's bytes follow, in broadcasts of at most kRowsChunkBytes
};

// Bytes per broadcast of kRows: MPI counts in int.
constexpr int64_t kRowsChunkBytes = int64_t{1} << 28;

// Broadcasts `bytes` bytes at `data` from rank 0 in chunks of kRowsChunkBytes.
void BroadcastRows(parallel::Communicator& comm, uint8_t* data, int64_t bytes) {
  for (int64_t at = 0; at < bytes; at += kRowsChunkBytes) {
    comm.Broadcast(data + at, std::min(kRowsChunkBytes, bytes - at));
  }
}

struct Header {
  Message kind = Message::kStop;
  uint32_t form = 0;  // model::AttentionForm of a kForward
  int64_t payload_bytes = 0;
  // A kForward whose collectives' seconds every rank records and exchanges after it
  // (StepBroadcaster::set_comm_detail).
  uint32_t detail = 0;
};
static_assert(std::is_trivially_copyable_v<Header>);

// A flat byte buffer of scalars and length-prefixed arrays.
class Writer {
 public:
  template <class T>
  void Scalar(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    bytes.insert(bytes.end(), p, p + sizeof(T));
  }
  template <class T>
  void Array(const std::vector<T>& values) {
    Scalar<int64_t>(static_cast<int64_t>(values.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(values.data());
    bytes.insert(bytes.end(), p, p + values.size() * sizeof(T));
  }
  std::vector<uint8_t> bytes;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& bytes) : bytes_(bytes) {}
  template <class T>
  T Scalar() {
    T value;
    Take(&value, sizeof(T));
    return value;
  }
  template <class T>
  void Array(std::vector<T>& values) {
    const int64_t n = Scalar<int64_t>();
    LATENT_CHECK(n >= 0 && static_cast<size_t>(n) * sizeof(T) <= bytes_.size() - at_);
    values.resize(n);
    Take(values.data(), n * sizeof(T));
  }

 private:
  void Take(void* out, size_t n) {
    LATENT_CHECK(at_ + n <= bytes_.size());
    std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
  }
  const std::vector<uint8_t>& bytes_;
  size_t at_ = 0;
};

void WriteBatch(const model::ForwardBatch& b, Writer& w) {
  w.Array(b.token_ids);
  w.Array(b.positions);
  w.Array(b.seq_slots);
  w.Array(b.logits_rows);
  w.Array(b.seq_starts);
  w.Array(b.context_lens);
  w.Array(b.expanded_below);
  w.Array(b.block_table_starts);
  w.Array(b.block_ids);
  w.Array(b.window_table_starts);
  w.Array(b.window_block_ids);
  w.Array(b.prompt_lens);
  w.Array(b.state_slots);
}

void ReadBatch(Reader& r, model::ForwardBatch& b) {
  r.Array(b.token_ids);
  r.Array(b.positions);
  r.Array(b.seq_slots);
  r.Array(b.logits_rows);
  r.Array(b.seq_starts);
  r.Array(b.context_lens);
  r.Array(b.expanded_below);
  r.Array(b.block_table_starts);
  r.Array(b.block_ids);
  r.Array(b.window_table_starts);
  r.Array(b.window_block_ids);
  r.Array(b.prompt_lens);
  r.Array(b.state_slots);
}

void Send(parallel::Communicator& comm, Message kind, const std::vector<uint8_t>& payload,
          uint32_t form = 0, bool detail = false) {
  Header header{kind, form, static_cast<int64_t>(payload.size()), detail ? 1u : 0u};
  comm.Broadcast(&header, sizeof header);
  if (!payload.empty()) comm.Broadcast(const_cast<uint8_t*>(payload.data()), header.payload_bytes);
}

// Every rank's `calls` (the same collectives in the same order on every rank) gathered; returns
// the sum over calls of the least time any rank spent in it.
double LeastTimePerCall(parallel::Communicator& comm, const std::vector<double>& calls) {
  const int ranks = comm.size();
  const double count = static_cast<double>(calls.size());
  std::vector<double> counts(ranks);
  comm.AllGather(&count, 1, counts.data());
  for (double c : counts) {
    if (c != count) FailInternal("the ranks ran different collectives in one step");
  }
  const int64_t n = static_cast<int64_t>(calls.size());
  std::vector<double> all(static_cast<size_t>(ranks) * n);  // [ranks, n]
  comm.AllGather(calls.data(), n, all.data());
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    double least = all[i];
    for (int r = 1; r < ranks; ++r) least = std::min(least, all[static_cast<size_t>(r) * n + i]);
    sum += least;
  }
  return sum;
}

// Which of `stats`' kinds `batch` is: a sequence decodes when it runs tokens past its prompt only
// (one, or with a speculative draft a few; also, rarely, a recompute after a preemption whose
// prefix hit reached past the prompt; without prompt lengths, the CLI tools' batches, every step
// counts as prefill).
StepTimes& KindOf(const model::ForwardBatch& batch, StepCommStats& stats) {
  if (batch.prompt_lens.empty()) return stats.prefill;
  int64_t decoding = 0;
  const int64_t seqs = batch.num_sequences();
  for (int64_t s = 0; s < seqs; ++s) {
    const int32_t first = batch.seq_starts[s];
    if (batch.positions[first] >= batch.prompt_lens[s]) ++decoding;
  }
  if (decoding == 0) return stats.prefill;
  return decoding == seqs ? stats.decode : stats.mixed;
}

model::CacheDType CacheDTypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return model::CacheDType::kF32;
    case DType::kBF16: return model::CacheDType::kBF16;
    case DType::kF8E4M3: return model::CacheDType::kFP8;
    default: break;
  }
  FailInternal("the step broadcast got a cache of ", DTypeName(dtype), " rows");
}

}  // namespace

std::unique_ptr<model::Model> LoadRankedModel(const std::string& dir, model::LoadOptions options) {
  parallel::Communicator& world = parallel::World();
  if (world.size() == 1) return model::LoadModel(dir, options);
  // Every rank reads the test hook before it loads, so a malformed value ends the job there.
  const std::optional<InjectedCheck> injected = ReadInjectedCheck();
  // Every rank must compute the same model: compared before the load, so that another layer
  // count is named here rather than dying mid-step in a collective of another size, and the
  // precision the load resolved after it (--precision auto and f32 agree on an f32 checkpoint).
  // The second check also holds rank 0 (and serve's /health) until every rank has loaded.
  CheckRanksAgree(world, ItemsBeforeLoading(dir, options));
  options.communicator = &world;
  std::unique_ptr<model::Model> m = model::LoadModel(dir, options);
  CheckRanksAgree(world, {{"precision", model::PrecisionName(m->precision())}});
  if (world.rank() == 0) return std::make_unique<StepBroadcaster>(std::move(m), world, injected);
  RunWorker(*m, world, injected);
  throw WorkerFinished{};
}

StepBroadcaster::StepBroadcaster(std::unique_ptr<model::Model> model, parallel::Communicator& comm,
                                 std::optional<InjectedCheck> injected)
    : model_(std::move(model)), comm_(comm), injected_(injected) {}

StepBroadcaster::~StepBroadcaster() { Send(comm_, Message::kStop, {}); }

void StepBroadcaster::SendCacheIfNew(const cache::PagedRows& rows) const {
  if (rows.base == cache_base_ && rows.num_blocks == cache_blocks_ &&
      rows.block_tokens == cache_block_tokens_ && rows.states.base == state_base_ &&
      rows.states.num_slots == state_slots_) {
    return;
  }
  Writer w;
  w.Scalar<uint32_t>(rows.block_tokens);
  w.Scalar<int32_t>(rows.num_blocks);
  w.Scalar<uint32_t>(static_cast<uint32_t>(rows.dtype));
  w.Scalar<int32_t>(rows.states.num_slots);  // 0: the model keeps no per-sequence state
  Send(comm_, Message::kCache, w.bytes);
  // Every rank's failure to allocate its replica ("": none; rank 0's is always "", its cache
  // exists).
  const std::vector<std::string> failures =
      parallel::AllGatherStrings(comm_, "", /*wait_forever=*/false);
  for (size_t r = 0; r < failures.size(); ++r) {
    if (failures[r].empty()) continue;
    const uint64_t bytes =
        rows.block_bytes * static_cast<uint64_t>(rows.num_blocks) +
        rows.states.slot_bytes * static_cast<uint64_t>(std::max(rows.states.num_slots, 0));
    Fail("rank ", r, " of ", comm_.size(), " cannot hold its replica of the cache (", bytes,
         " bytes; every rank holds the whole cache): ", failures[r],
         "; give that rank more memory, or lower --num-blocks or --cache-memory");
  }
  // Only now that every rank holds its replica: after a failure, the next call sends the layout
  // again rather than taking it for announced.
  cache_base_ = rows.base;
  cache_blocks_ = rows.num_blocks;
  cache_block_tokens_ = rows.block_tokens;
  state_base_ = rows.states.base;
  state_slots_ = rows.states.num_slots;
}

void StepBroadcaster::Forward(const model::ForwardBatch& batch, model::AttentionForm form,
                              float* logits, model::ForwardTrace* trace) const {
  LATENT_CHECK(batch.rows != nullptr);
  SendCacheIfNew(*batch.rows);
  Writer w;
  WriteBatch(batch, w);
  const bool detail = detail_;
  calls_.clear();
  if (detail) comm_.RecordCalls(&calls_);
  const auto start = std::chrono::steady_clock::now();
  const double collective_start = comm_.seconds_in_collectives();
  // Counts the step, and with detail exchanges the calls' times, whether the forward ran or
  // failed on bad input (the workers fail at the same point and exchange theirs too).
  auto finish = [&] {
    StepTimes& kind = KindOf(batch, stats_);
    ++kind.steps;
    kind.tokens += static_cast<int64_t>(batch.token_ids.size());
    kind.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    kind.collective_seconds += comm_.seconds_in_collectives() - collective_start;
    if (detail) {
      comm_.RecordCalls(nullptr);
      kind.transfer_seconds += LeastTimePerCall(comm_, calls_);
    }
  };
  Send(comm_, Message::kForward, w.bytes, static_cast<uint32_t>(form), detail);
  try {
    LATENT_CHECK(!InjectedCheckFailure(injected_, comm_.rank(), ++forwards_));
    model_->Forward(batch, form, logits, trace);
  } catch (const InternalError& e) {  // a bug, maybe on this rank alone
    AbortForwardElsewhere("rank 0", StrCat("internal error: ", e.what()));
  } catch (const Error&) {  // counted as any step, then the engine fails the step's requests
    finish();
    throw;
  } catch (const std::exception& e) {
    AbortForwardElsewhere("rank 0", e.what());
  } catch (...) {
    AbortForwardElsewhere("rank 0", "an unknown exception");
  }
  finish();
}

void StepBroadcaster::CopyCacheBlock(const cache::PagedRows& rows, cache::BlockId from,
                                     cache::BlockId to, uint32_t tokens) const {
  SendCacheIfNew(rows);
  Writer w;
  w.Scalar(from);
  w.Scalar(to);
  w.Scalar(tokens);
  Send(comm_, Message::kCopyBlock, w.bytes);
  model_->CopyCacheBlock(rows, from, to, tokens);
}

void StepBroadcaster::ShareCacheRows(const cache::PagedRows& rows) const {
  SendCacheIfNew(rows);
  const int64_t bytes = static_cast<int64_t>(rows.block_bytes) * rows.num_blocks;
  Writer w;
  w.Scalar(bytes);
  Send(comm_, Message::kRows, w.bytes);
  BroadcastRows(comm_, rows.base, bytes);
}

void StepBroadcaster::CopyStateSlot(const cache::PagedRows& rows, cache::StateSlot from,
                                    cache::StateSlot to) const {
  SendCacheIfNew(rows);
  Writer w;
  w.Scalar(from);
  w.Scalar(to);
  Send(comm_, Message::kCopySlot, w.bytes);
  model_->CopyStateSlot(rows, from, to);
}

void RunWorker(const model::Model& model, parallel::Communicator& comm,
               const std::optional<InjectedCheck>& injected) {
  std::unique_ptr<CacheManager> cache;
  model::ForwardBatch batch;
  std::vector<uint8_t> payload;
  float no_logits = 0;  // Workers skip the LM head: only rank 0 samples.
  std::vector<double> calls;  // [calls] a detailed step's collectives' seconds on this rank
  int64_t forwards = 0;
  for (;;) {
    Header header;
    calls.clear();
    const auto start = std::chrono::steady_clock::now();
    comm.Broadcast(&header, sizeof header, /*wait_forever=*/true);
    const bool detail = header.kind == Message::kForward && header.detail != 0;
    if (detail) {
      // Rank 0 recorded its side of the header too; this rank's includes its idle wait, which
      // the least time per call leaves out.
      calls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      comm.RecordCalls(&calls);
    }
    payload.resize(header.payload_bytes);
    if (header.payload_bytes > 0) comm.Broadcast(payload.data(), header.payload_bytes);
    Reader r(payload);
    switch (header.kind) {
      case Message::kStop:
        return;
      case Message::kCache: {
        CacheOptions options;
        options.block_tokens = r.Scalar<uint32_t>();
        options.num_blocks = r.Scalar<int32_t>();
        options.dtype = CacheDTypeOf(static_cast<DType>(r.Scalar<uint32_t>()));
        // With num_blocks given, CacheManager makes exactly this many state slots, as on rank 0
        // (the slot ids come from rank 0's scheduler too).
        const int32_t state_slots = r.Scalar<int32_t>();
        if (state_slots > 0) options.state_slots = state_slots;
        options.prefix_caching = false;  // block ids come from rank 0
        cache.reset();
        // A failure is reported to rank 0, which ends the job naming this rank; this rank goes
        // on waiting (with no cache: rank 0 sends no step).
        std::string failure;
        try {
          cache = std::make_unique<CacheManager>(model.config(), options);
        } catch (const std::bad_alloc&) {
          failure = "out of memory";
        } catch (const Error& e) {
          failure = e.what();
        }
        parallel::AllGatherStrings(comm, failure, /*wait_forever=*/false);
        break;
      }
      case Message::kCopyBlock: {
        LATENT_CHECK(cache != nullptr);
        const auto from = r.Scalar<cache::BlockId>();
        const auto to = r.Scalar<cache::BlockId>();
        const auto tokens = r.Scalar<uint32_t>();
        model.CopyCacheBlock(cache->rows(), from, to, tokens);
        break;
      }
      case Message::kRows: {
        LATENT_CHECK(cache != nullptr);
        const cache::PagedRows& rows = cache->rows();
        const auto bytes = r.Scalar<int64_t>();
        LATENT_CHECK(bytes == static_cast<int64_t>(rows.block_bytes) * rows.num_blocks);
        BroadcastRows(comm, rows.base, bytes);
        break;
      }
      case Message::kCopySlot: {
        LATENT_CHECK(cache != nullptr);
        const auto from = r.Scalar<cache::StateSlot>();
        const auto to = r.Scalar<cache::StateSlot>();
        model.CopyStateSlot(cache->rows(), from, to);
        break;
      }
      case Message::kForward: {
        LATENT_CHECK(cache != nullptr);
        ReadBatch(r, batch);
        batch.rows = &cache->rows();
        batch.logits_rows.clear();
        try {
          LATENT_CHECK(!InjectedCheckFailure(injected, comm.rank(), ++forwards));
          model.Forward(batch, static_cast<model::AttentionForm>(header.form), &no_logits);
        } catch (const InternalError& e) {
          // A bug, which rank 0 may not share: it would wait for this rank in the step's
          // collectives until LATENT_STEP_TIMEOUT.
          AbortForwardElsewhere("a worker rank", StrCat("internal error: ", e.what()));
        } catch (const Error&) {
          // Bad input fails the same way on rank 0, at the same point (every rank runs the same
          // batch), which reports it; the job goes on.
        } catch (const std::exception& e) {
          AbortForwardElsewhere("a worker rank", e.what());
        } catch (...) {
          AbortForwardElsewhere("a worker rank", "an unknown exception");
        }
        if (detail) {
          comm.RecordCalls(nullptr);
          LeastTimePerCall(comm, calls);
        }
        break;
      }
      default:
        FailInternal("unknown step message ", static_cast<uint32_t>(header.kind));
    }
  }
}

}  // namespace latent::engine
