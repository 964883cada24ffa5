#include "engine/paged_latent_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "cache/block_pool.h"
#include "cache/block_table.h"
#include "cache/cache_storage.h"
#include "cache/fp8_rows.h"
#include "model/cache_rows.h"
#include "tensor/dtype.h"

namespace latent::engine {
namespace {

constexpr int64_t kLayers = 3;
constexpr int64_t kMaxPositions = 17;

// Values per token of each row of each layer: a latent row of 5 values everywhere (20 or 10
// bytes, not a multiple of the 64-byte slab alignment) and a 3-value index row on layers 0 and 2,
// as model::CacheRowValues gives for a model with DSA on some layers.
const std::vector<std::vector<int64_t>> kRowValues = {{5, 3}, {5}, {5, 3}};

// fp8 rows: the latent's first 3 values in e4m3 (its "latent", a scale) and 2 in bf16 (its
// "rotary key"), 3 + 4 + 4 = 11 bytes; the index row all e4m3, 3 + 4 = 7 bytes.
constexpr int64_t kFp8LatentValues = 3;

cache::ModelCacheRows Rows(model::CacheDType dtype) {
  const uint64_t value_bytes = dtype == model::CacheDType::kF32 ? 4 : 2;
  cache::ModelCacheRows rows(kLayers);
  for (int64_t l = 0; l < kLayers; ++l) {
    for (size_t r = 0; r < kRowValues[l].size(); ++r) {
      cache::CacheRowSpec row{r == 0 ? "mla.latent" : "dsa.index_k", kRowValues[l][r] * value_bytes};
      row.values = kRowValues[l][r];
      if (dtype == model::CacheDType::kFP8) {
        row.fp8_values = r == 0 ? kFp8LatentValues : kRowValues[l][r];
        row.bytes_per_token = cache::Fp8RowBytes(row.values, row.fp8_values);
      }
      rows[l].push_back(row);
    }
  }
  return rows;
}

int64_t Width(int64_t layer, int row) { return kRowValues[layer][row]; }

// What a row of `values` reads back as from a cache of `dtype`.
std::vector<float> Stored(model::CacheDType dtype, int row, std::vector<float> values) {
  if (dtype == model::CacheDType::kF32) return values;
  if (dtype == model::CacheDType::kBF16) {
    for (float& v : values) v = RoundToBF16(v);
    return values;
  }
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t fp8 = row == 0 ? kFp8LatentValues : n;
  std::vector<uint8_t> bytes(cache::Fp8RowBytes(n, fp8));
  cache::EncodeFp8RowScalar(values.data(), n, fp8, bytes.data());
  cache::DecodeFp8RowScalar(bytes.data(), n, fp8, values.data());
  return values;
}

// The values written for (layer, row, slot, position): value 0 is an integer tag, exact in bf16,
// that tells every row apart; the others need rounding in bf16.
std::vector<float> RowFor(int64_t layer, int row, int32_t slot, int64_t position) {
  std::vector<float> values(Width(layer, row));
  const float tag =
      static_cast<float>(((layer * 2 + row) * 2 + slot) * kMaxPositions + position + 1);
  values[0] = tag;
  for (size_t i = 1; i < values.size(); ++i) {
    values[i] = tag * 0.001f + static_cast<float>(i) * 1.1f + (i % 2 == 0 ? -0.3f : 0.3f);
  }
  return values;
}

// Every (layer, row) of the model.
std::vector<std::pair<int64_t, int>> AllRows() {
  std::vector<std::pair<int64_t, int>> out;
  for (int64_t l = 0; l < kLayers; ++l)
    for (int r = 0; r < static_cast<int>(kRowValues[l].size()); ++r) out.push_back({l, r});
  return out;
}

struct Param {
  uint32_t block_tokens;
  model::CacheDType dtype;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << model::CacheDTypeName(p.dtype) << ", block_tokens " << p.block_tokens;
}

class PagedLatentCacheRoundTrip : public ::testing::TestWithParam<Param> {};

TEST_P(PagedLatentCacheRoundTrip, WriteThenGatherThroughBlockTables) {
  const auto [block_tokens, dtype] = GetParam();
  cache::CacheStorage storage(Rows(dtype), block_tokens, 32);
  cache::BlockPool pool(32, false);
  PagedLatentCache cache(storage, kRowValues, dtype);

  // Two sequences whose blocks interleave in the pool.
  const std::vector<int64_t> lengths = {kMaxPositions, 9};
  cache::BlockTable t0(block_tokens), t1(block_tokens);
  std::vector<cache::BlockTable*> tables = {&t0, &t1};
  for (int64_t tokens = 1; tokens <= kMaxPositions; ++tokens) {
    for (size_t s = 0; s < tables.size(); ++s) {
      ASSERT_TRUE(tables[s]->Grow(pool, std::min(tokens, lengths[s])));
    }
  }
  if (block_tokens < 16) {
    EXPECT_LT(t0.blocks()[1], t1.blocks().back()) << "blocks of the two slots interleave";
  }
  cache.SetTables({&t0, &t1});

  // Write every (layer, row, slot, position) first, last position first, then read back.
  for (int64_t position = kMaxPositions - 1; position >= 0; --position) {
    for (const auto& [layer, row] : AllRows()) {
      for (int32_t slot = 0; slot < 2; ++slot) {
        if (position >= lengths[slot]) continue;
        cache.WriteRow(layer, row, slot, position, RowFor(layer, row, slot, position).data());
      }
    }
  }
  for (const auto& [layer, row] : AllRows()) {
    const int64_t width = Width(layer, row);
    for (int32_t slot = 0; slot < 2; ++slot) {
      const int64_t count = lengths[slot];
      std::vector<float> out(count * width, -7.0f);
      cache.GatherRows(layer, row, slot, count, out.data());
      for (int64_t p = 0; p < count; ++p) {
        const std::vector<float> values = Stored(dtype, row, RowFor(layer, row, slot, p));
        for (int64_t i = 0; i < width; ++i) {
          const float expected = values[i];
          ASSERT_EQ(out[p * width + i], expected) << "layer " << layer << " row " << row << " slot "
                                                  << slot << " position " << p << " value " << i;
        }
      }
      // A shorter gather reads the same leading rows and writes nothing past them.
      std::vector<float> prefix(4 * width + 1, -7.0f);
      cache.GatherRows(layer, row, slot, 4, prefix.data());
      EXPECT_TRUE(std::equal(prefix.begin(), prefix.end() - 1, out.begin()));
      EXPECT_EQ(prefix.back(), -7.0f);
      // Listed positions (DSA's selection), out of order and repeated: each is its full row.
      const std::vector<int32_t> positions = {static_cast<int32_t>(count - 1), 0, 3,
                                              static_cast<int32_t>(count / 2), 3};
      std::vector<float> picked(positions.size() * width + 1, -7.0f);
      cache.GatherPositions(layer, row, slot, positions, picked.data());
      for (size_t i = 0; i < positions.size(); ++i) {
        EXPECT_TRUE(std::equal(picked.begin() + i * width, picked.begin() + (i + 1) * width,
                               out.begin() + positions[i] * width))
            << "position " << positions[i];
      }
      EXPECT_EQ(picked.back(), -7.0f);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    PagedLatentCache, PagedLatentCacheRoundTrip,
    ::testing::Values(Param{1, model::CacheDType::kF32}, Param{3, model::CacheDType::kF32},
                      Param{16, model::CacheDType::kF32}, Param{1, model::CacheDType::kBF16},
                      Param{3, model::CacheDType::kBF16}, Param{16, model::CacheDType::kBF16},
                      Param{1, model::CacheDType::kFP8}, Param{3, model::CacheDType::kFP8},
                      Param{16, model::CacheDType::kFP8}),
    [](const ::testing::TestParamInfo<Param>& info) {
      return std::string(model::CacheDTypeName(info.param.dtype)) + "_block" +
             std::to_string(info.param.block_tokens);
    });

TEST(PagedLatentCacheTest, Bf16RoundsToNearestEven) {
  cache::CacheStorage storage(Rows(model::CacheDType::kBF16), 4, 2);
  cache::BlockPool pool(2, false);
  cache::BlockTable table(4);
  ASSERT_TRUE(table.Grow(pool, 1));
  PagedLatentCache cache(storage, kRowValues, model::CacheDType::kBF16);
  cache.SetTables({&table});
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2).
  const std::vector<float> values = {
      1.0f + ulp / 2,          // Halfway, even neighbour below: 1.
      1.0f + 3 * ulp / 2,      // Halfway, even neighbour above: 1 + 2 ulp.
      -(1.0f + ulp / 2),       // Same for negatives.
      1.0f + ulp / 2 + 1e-6f,  // Just above halfway: up.
      3.140625f,               // Exact in bf16.
  };
  cache.WriteRow(0, model::kLatentRow, 0, 0, values.data());
  std::vector<float> out(5);
  cache.GatherRows(0, model::kLatentRow, 0, 1, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + 2 * ulp);
  EXPECT_EQ(out[2], -1.0f);
  EXPECT_EQ(out[3], 1.0f + ulp);
  EXPECT_EQ(out[4], 3.140625f);
}

TEST(PagedLatentCacheTest, RejectsPositionsBeyondTheTable) {
  cache::CacheStorage storage(Rows(model::CacheDType::kF32), 4, 2);
  cache::BlockPool pool(2, false);
  cache::BlockTable table(4);
  ASSERT_TRUE(table.Grow(pool, 3));
  PagedLatentCache cache(storage, kRowValues, model::CacheDType::kF32);
  cache.SetTables({&table});
  const std::vector<float> values(5, 1.0f);
  EXPECT_NO_THROW(cache.WriteRow(0, model::kLatentRow, 0, 3, values.data()));
  EXPECT_THROW(cache.WriteRow(0, model::kLatentRow, 0, 4, values.data()), InternalError);
  std::vector<float> out(5 * 5);
  EXPECT_THROW(cache.GatherRows(0, model::kLatentRow, 0, 5, out.data()), InternalError);
  EXPECT_THROW(cache.GatherRows(0, model::kLatentRow, 1, 1, out.data()), std::out_of_range);
}

TEST(PagedLatentCacheTest, RejectsAViewInAnotherDTypeThanItsRows) {
  // f32 rows read as fp8 ones (bf16 where no fp8 values): the widths disagree.
  cache::CacheStorage f32(Rows(model::CacheDType::kF32), 4, 1);
  EXPECT_THROW(PagedLatentCache(f32, kRowValues, model::CacheDType::kFP8), InternalError);
  // fp8-encoded rows in a bf16 view.
  cache::CacheStorage fp8(Rows(model::CacheDType::kFP8), 4, 1);
  EXPECT_THROW(PagedLatentCache(fp8, kRowValues, model::CacheDType::kBF16), InternalError);
}

TEST(PagedLatentCacheTest, CopyBlockCopiesTheFirstCountTokensOfEveryLayerAndRow) {
  for (model::CacheDType dtype :
       {model::CacheDType::kF32, model::CacheDType::kBF16, model::CacheDType::kFP8}) {
    SCOPED_TRACE(model::CacheDTypeName(dtype));
    cache::CacheStorage storage(Rows(dtype), 4, 4);
    cache::BlockPool pool(4, false);
    cache::BlockTable from(4), to(4), neighbour(4);
    ASSERT_TRUE(from.Grow(pool, 4));
    ASSERT_TRUE(to.Grow(pool, 4));
    ASSERT_TRUE(neighbour.Grow(pool, 4));
    PagedLatentCache cache(storage, kRowValues, dtype);
    cache.SetTables({&from, &to, &neighbour});
    for (const auto& [layer, row] : AllRows()) {
      for (int64_t p = 0; p < 4; ++p) {
        cache.WriteRow(layer, row, 0, p, RowFor(layer, row, 0, p).data());
        cache.WriteRow(layer, row, 2, p, RowFor(layer, row, 1, p).data());
      }
    }

    cache.CopyBlock(from.blocks()[0], to.blocks()[0], 3);

    for (const auto& [layer, row] : AllRows()) {
      const int64_t width = Width(layer, row);
      std::vector<float> copied(4 * width), original(4 * width), other(4 * width);
      cache.GatherRows(layer, row, 1, 4, copied.data());
      cache.GatherRows(layer, row, 0, 4, original.data());
      cache.GatherRows(layer, row, 2, 4, other.data());
      for (int64_t p = 0; p < 4; ++p) {
        const std::vector<float> neighbour_values = Stored(dtype, row, RowFor(layer, row, 1, p));
        for (int64_t i = 0; i < width; ++i) {
          // Tokens 0..2 copied; token 3 left as it was (zero).
          const float want = p < 3 ? original[p * width + i] : 0.0f;
          EXPECT_EQ(copied[p * width + i], want)
              << "layer " << layer << " row " << row << " position " << p;
          EXPECT_EQ(other[p * width + i], neighbour_values[i]);  // Other blocks untouched.
        }
      }
    }
  }
}

}  // namespace
}  // namespace latent::engine
