#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "parallel/communicator.h"

namespace latent::parallel {

std::vector<std::string> AllGatherStrings(Communicator& comm, const std::string& mine,
                                          bool wait_forever) {
  const int ranks = comm.size();
  const int64_t length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(ranks);  // [ranks]
  comm.AllGatherBytes(&length, sizeof length, lengths.data(), wait_forever);
  // Every rank computes the same width from the same lengths, so every rank moves as many bytes.
  const int64_t width = *std::max_element(lengths.begin(), lengths.end());
  // All empty: no second collective (every rank sees the same width, so all skip it), and no
  // null buffer of an empty vector handed on.
  if (width == 0) return std::vector<std::string>(ranks);
  std::string padded = mine;
  padded.resize(width, '\0');
  std::vector<char> all(static_cast<size_t>(ranks) * width);  // [ranks, width]
  comm.AllGatherBytes(padded.data(), width, all.data(), wait_forever);
  std::vector<std::string> strings(ranks);
  for (int r = 0; r < ranks; ++r) {
    strings[r].assign(all.data() + static_cast<size_t>(r) * width, lengths[r]);
  }
  return strings;
}

}  // namespace latent::parallel
