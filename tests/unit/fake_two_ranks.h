// Rank 0 of a fake two-rank job, for code that runs collectives without MPI: rank 1's side of
// each AllGatherStrings is scripted, and rank 0's broadcasts are counted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <string>

#include "parallel/communicator.h"

namespace latent::parallel::testing {

class FakeTwoRanks final : public Communicator {
 public:
  // What rank 1 contributes to each AllGatherStrings, in order ("" once these run out).
  std::deque<std::string> rank1_strings;
  int broadcasts = 0;

  int rank() const override { return 0; }
  int size() const override { return 2; }
  void Broadcast(void*, int64_t, bool) override { ++broadcasts; }
  void SumInRankOrder(float*, int64_t) override {}
  int64_t bytes_moved() const override { return 0; }
  double seconds_in_collectives() const override { return 0; }
  void AllGather(const double* mine, int64_t n, double* all) override {
    std::copy(mine, mine + n, all);
    std::copy(mine, mine + n, all + n);
  }
  // AllGatherStrings' two calls: the lengths [2] of int64, then the strings [2, width].
  void AllGatherBytes(const void* mine, int64_t bytes, void* all, bool) override {
    auto* out = static_cast<char*>(all);
    std::memcpy(out, mine, bytes);
    if (!lengths_sent_) {
      const int64_t length = static_cast<int64_t>(Next().size());
      std::memcpy(out + bytes, &length, sizeof length);
    } else {
      std::string padded = Next();
      padded.resize(bytes, '\0');
      std::memcpy(out + bytes, padded.data(), bytes);
      if (!rank1_strings.empty()) rank1_strings.pop_front();
    }
    lengths_sent_ = !lengths_sent_;
  }

 private:
  std::string Next() const { return rank1_strings.empty() ? "" : rank1_strings.front(); }
  bool lengths_sent_ = false;
};

}  // namespace latent::parallel::testing
