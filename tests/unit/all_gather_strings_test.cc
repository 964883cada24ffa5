// parallel::AllGatherStrings: every rank's string, whole, on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fake_two_ranks.h"
#include "parallel/communicator.h"

namespace latent::parallel {
namespace {

TEST(AllGatherStrings, OneProcessGetsItsOwn) {
  SingleProcess one;
  EXPECT_EQ(AllGatherStrings(one, "abc", false), std::vector<std::string>{"abc"});
  EXPECT_EQ(AllGatherStrings(one, "", true), std::vector<std::string>{""});
}

// Strings of other lengths, a long one (a failure message cut at a fixed width lost its end)
// and one holding NUL bytes come back whole, in rank order.
TEST(AllGatherStrings, EveryRankInRankOrderWhole) {
  testing::FakeTwoRanks two;
  const std::string long_text(1000, 'x');
  two.rank1_strings = {long_text, std::string("a\0b", 3)};
  EXPECT_EQ(AllGatherStrings(two, "short", false),
            (std::vector<std::string>{"short", long_text}));
  EXPECT_EQ(AllGatherStrings(two, long_text + "!", false),
            (std::vector<std::string>{long_text + "!", std::string("a\0b", 3)}));
  EXPECT_EQ(AllGatherStrings(two, "", false), (std::vector<std::string>{"", ""}));
}

}  // namespace
}  // namespace latent::parallel
