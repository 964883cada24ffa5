// The items a scale-out job's ranks compare before loading (engine/rank_check.h).
#include "engine/rank_check.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "base/error.h"
#include "kernels/kernel_table.h"
#include "model/load_options.h"

namespace latent::engine {
namespace {

namespace fs = std::filesystem;

const std::string* Item(const RankItems& items, const std::string& what) {
  for (const auto& [w, value] : items) {
    if (w == what) return &value;
  }
  return nullptr;
}

RankItems ItemsOfAModel() {
  const fs::path dir = fs::path(::testing::TempDir()) / "rank_check_model";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{}";
  return ItemsBeforeLoading(dir.string(), model::LoadOptions{});
}

// The build is described by what decides its numerics, none of it a path: a GNU build id
// differed between two builds of one source in two directories (debug info, __FILE__).
TEST(RankCheck, BuildItemsAreWhatDecidesTheNumerics) {
  const RankItems items = ItemsOfAModel();
  const std::string build_dir = fs::path(LATENT_TEST_DATA_DIR).parent_path().string();
  EXPECT_EQ(Item(items, "latent build"), nullptr);
  for (const char* what : {"latent source", "compiler", "build type", "compiler flags"}) {
    const std::string* value = Item(items, what);
    ASSERT_NE(value, nullptr) << what;
    EXPECT_EQ(value->find(build_dir), std::string::npos) << what << ": " << *value;
  }
  // The same string `latent bench` reports as its commit.
  EXPECT_EQ(*Item(items, "latent source"), SourceState());
  EXPECT_FALSE(Item(items, "compiler")->empty());
  // Debug info changes no instruction: LATENT_DEBUG_INFO=ON and OFF builds agree.
  EXPECT_EQ(Item(items, "compiler flags")->find("-g"), std::string::npos)
      << *Item(items, "compiler flags");
}

// Two CPUs given the same AVX-512 kernels multiply bf16 differently (vdpbf16ps with
// AVX512_BF16, f32 FMAs without), which "kernels" does not tell apart.
TEST(RankCheck, ItemsNameTheBf16Products) {
  const RankItems items = ItemsOfAModel();
  ASSERT_NE(Item(items, "kernels"), nullptr);
  const std::string* products = Item(items, "bf16 products");
  ASSERT_NE(products, nullptr);
  EXPECT_EQ(*products, kernels::BestBf16ProductsName());

  RankItems other = items;
  for (auto& [what, value] : other) {
    if (what == "bf16 products") value = *products == "vdpbf16ps" ? "f32 fma" : "vdpbf16ps";
  }
  const std::string expected = StrCat("bf16 products ", *Item(other, "bf16 products"),
                                      " on rank 1, ", *products, " on rank 0");
  EXPECT_EQ(DescribeDifferences(items, other, 1), expected);
}

// A config.json or index that is a FIFO blocked every rank at open, and one linked to /dev/zero
// was hashed forever: only regular files are read, the load then naming what is wrong.
TEST(RankCheck, SpecialFilesAreNotRead) {
  const fs::path dir = fs::path(::testing::TempDir()) / "rank_check_special";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_symlink("/dev/zero", dir / "config.json");
  ASSERT_EQ(::mkfifo((dir / "model.safetensors.index.json").c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo((dir / "model-00001-of-00001.safetensors").c_str(), 0600), 0);
  const RankItems items = ItemsBeforeLoading(dir.string(), model::LoadOptions{});
  EXPECT_EQ(*Item(items, "config.json"), "");
  EXPECT_EQ(*Item(items, "model.safetensors.index.json"), "");
  EXPECT_EQ(*Item(items, "model-00001-of-00001.safetensors"), "unreadable");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace latent::engine
