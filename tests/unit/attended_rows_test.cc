// ops::AttendedRows: the rows attention reads, in place (pointers into the paged storage, in its
// format: f32, bf16, fp8 rows) or gathered into f32 copies (the fallback for rows the kernels do
// not read in place, forced here by SetRowsGatherForced). Both must give the same values;
// positions across blocks, a window's range and listed positions; a released block fails.
// Milliseconds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "base/error.h"
#include "cache/fp8_rows.h"
#include "cache/paged_rows.h"
#include "ops/attended_rows.h"

namespace latent::ops {
namespace {

// One layer, one row of `width` values, `blocks` blocks of 4 tokens, in `dtype` (kF8E4M3: the
// fp8 encoding, the first fp8_values values as codes).
struct Rows {
  std::vector<uint8_t> storage;
  cache::PagedRows view;
  Rows(DType dtype, int64_t width, int32_t blocks, int64_t fp8_values = 0) {
    const uint64_t row_bytes = dtype == DType::kF8E4M3 ? cache::Fp8RowBytes(width, fp8_values)
                                                       : width * DTypeSize(dtype);
    view.block_tokens = 4;
    view.block_bytes = 4 * row_bytes + 8;  // a few spare bytes: rows are found by the layout
    view.num_blocks = blocks;
    view.dtype = dtype;
    view.rows_per_layer = 1;
    view.slab_offset = {8};
    view.row_bytes = {row_bytes};
    view.row_values = {width};
    view.row_fp8_values = {fp8_values};  // 0: plain rows of `dtype`
    storage.assign(view.block_bytes * blocks, 0);
    view.base = storage.data();
  }
};

class ForceGather {
 public:
  explicit ForceGather(bool on) : saved_(RowsGatherForced()) { SetRowsGatherForced(on); }
  ~ForceGather() { SetRowsGatherForced(saved_); }

 private:
  bool saved_;
};

TEST(AttendedRows, InPlaceAndGatheredGiveTheSameValues) {
  const int64_t width = 40, fp8_values = 32;  // fp8 rows: 32 codes (two kernel chunks), 8 bf16
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kF8E4M3}) {
    const bool fp8 = dtype == DType::kF8E4M3;
    Rows rows(dtype, width, 4, fp8 ? fp8_values : 0);
    const std::vector<cache::BlockId> table = {2, 0, 3};  // positions 0..11, blocks out of order
    for (int64_t p = 0; p < 11; ++p) {
      std::vector<float> v(width);
      for (int64_t i = 0; i < width; ++i) v[i] = 0.37f * p - 0.11f * i + 1.0f / 3.0f;
      rows.view.WriteRow(table, 0, 0, p, v.data());
    }
    const std::vector<int32_t> picked = {1, 4, 9, 10};
    for (bool positions : {false, true}) {
      AttendedRows in_place, gathered;
      auto fill = [&](AttendedRows& r) {
        if (positions) {
          r.Positions(rows.view, table, 0, 0, picked);
        } else {
          r.Range(rows.view, table, 0, 0, 3, 8);  // a window's range, across blocks
        }
      };
      fill(in_place);
      {
        ForceGather force(true);
        fill(gathered);
      }
      EXPECT_FALSE(in_place.gathered());
      EXPECT_EQ(in_place.format().dtype, dtype);
      if (fp8) {  // the layout of cache/fp8_rows.h
        EXPECT_EQ(in_place.format().fp8_values, fp8_values);
        EXPECT_EQ(in_place.format().fp8_group, cache::kFp8Group);
        EXPECT_EQ(in_place.format().scales_at, fp8_values);
        EXPECT_EQ(in_place.format().tail_at, fp8_values + 4);
      }
      EXPECT_TRUE(gathered.gathered());
      EXPECT_EQ(gathered.format().dtype, DType::kF32);
      ASSERT_EQ(in_place.size(), positions ? 4 : 8);
      ASSERT_EQ(gathered.size(), in_place.size());
      for (int64_t i = 0; i < in_place.size(); ++i) {
        const int64_t p = positions ? picked[i] : 3 + i;
        // In place: the stored row itself.
        EXPECT_EQ(in_place[i], rows.view.Locate(table, 0, 0, p));
        std::vector<float> a(width), b(width);
        in_place.ToF32(i, 0, width, a.data());
        gathered.ToF32(i, 0, width, b.data());
        EXPECT_EQ(a, b) << "position " << p;
        const float want = 0.37f * p + 1.0f / 3.0f;  // value 0 as stored (bf16: rounded)
        if (fp8) {
          EXPECT_NEAR(a[0], want, std::abs(want) / 8) << "position " << p;
        } else {
          EXPECT_EQ(a[0], dtype == DType::kBF16 ? RoundToBF16(want) : want);
        }
        // Ranges: a few values, the codes alone, the bf16 tail alone (MLA's rotary key).
        for (auto [begin, end] : {std::pair<int64_t, int64_t>{3, 5}, {0, fp8_values},
                                  {fp8_values, width}, {30, 35}}) {
          std::vector<float> part(end - begin);
          in_place.ToF32(i, begin, end, part.data());
          EXPECT_EQ(part, std::vector<float>(a.begin() + begin, a.begin() + end))
              << "position " << p << " values " << begin << ".." << end;
        }
      }
    }
  }
}

TEST(AttendedRows, Fp8RowsTheKernelsCannotReadAreGathered) {
  // 24 codes: the kernels' 16-value chunks would straddle the codes' end (kernels/row_format.h).
  Rows rows(DType::kF8E4M3, 30, 2, 24);
  const std::vector<cache::BlockId> table = {0, 1};
  std::vector<float> v(30, 0.5f);
  for (int64_t p = 0; p < 6; ++p) rows.view.WriteRow(table, 0, 0, p, v.data());
  AttendedRows r;
  r.Range(rows.view, table, 0, 0, 0, 6);
  EXPECT_TRUE(r.gathered());
  EXPECT_EQ(r.format().dtype, DType::kF32);
  std::vector<float> out(30);
  r.ToF32(5, 0, 30, out.data());
  EXPECT_EQ(out, v);  // 0.5 is exact in fp8 (the group's amax) and in bf16
}

TEST(AttendedRows, AReleasedBlockOrAShortTableFails) {
  Rows rows(DType::kBF16, 3, 2);
  const std::vector<cache::BlockId> table = {cache::kNoBlock, 1};
  AttendedRows r;
  // Position 2 is in a released block.
  EXPECT_THROW(r.Range(rows.view, table, 0, 0, 2, 4), InternalError);
  r.Range(rows.view, table, 0, 0, 4, 4);                      // the live block alone reads fine
  EXPECT_EQ(r.size(), 4);
  EXPECT_THROW(r.Range(rows.view, table, 0, 0, 4, 5), InternalError);  // past the table
}

}  // namespace
}  // namespace latent::ops
