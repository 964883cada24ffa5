// Rank 0's side of a scale-out job (engine/distributed_model.h), over a fake second rank.
#include "engine/distributed_model.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "cache/paged_rows.h"
#include "fake_cache_model.h"
#include "fake_two_ranks.h"

namespace latent::engine {
namespace {

// A worker that could not allocate its replica of the cache: the layout counted as announced
// all the same, so the next AttachCache (or the first step) sent nothing and the workers ran
// steps on a cache they never built. Each call must send it again and fail again.
TEST(StepBroadcaster, CacheLayoutAnnouncedOnlyOnceEveryRankHoldsIt) {
  parallel::testing::FakeTwoRanks comm;
  StepBroadcaster model(std::make_unique<testing::FakeCacheModel>(), comm);
  std::vector<uint8_t> storage(64);
  cache::PagedRows rows;
  rows.base = storage.data();
  rows.block_bytes = 16;
  rows.block_tokens = 4;
  rows.num_blocks = 4;

  comm.rank1_strings = {"out of memory"};
  try {
    model.AttachCache(rows);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 of 2 cannot hold its replica of the cache (64 "
                                         "bytes; every rank holds the whole cache): out of memory"),
              std::string::npos)
        << e.what();
  }
  const int sent = comm.broadcasts;
  EXPECT_GT(sent, 0);

  comm.rank1_strings = {"out of memory"};
  EXPECT_THROW(model.AttachCache(rows), Error);
  EXPECT_GT(comm.broadcasts, sent);  // sent again

  model.AttachCache(rows);  // every rank holds it now
  const int held = comm.broadcasts;
  model.AttachCache(rows);  // nothing new to send
  EXPECT_EQ(comm.broadcasts, held);
}

}  // namespace
}  // namespace latent::engine
