// The safetensors reader against files written by the real `safetensors` package and against a
// corpus of malformed ones. Both come from make_safetensors_fixtures.py, which ctest runs first
// (fixture safetensors_fixtures); manifest.json says what each file holds or how it must fail.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "tensor/dtype.h"
#include "weights/checkpoint.h"
#include "weights/safetensors_file.h"
#include "weights/safetensors_header.h"

namespace latent::weights {
namespace {

using Json = nlohmann::json;

const std::string kFixtureDir = std::string(LATENT_TEST_DATA_DIR) + "/safetensors";

// Loads manifest.json, or fails the test with how to make it.
Json LoadManifest() {
  std::ifstream in(kFixtureDir + "/manifest.json");
  if (!in) {
    ADD_FAILURE() << kFixtureDir << "/manifest.json is missing: run the tests through ctest, "
                  << "whose make_safetensors_fixtures test writes it";
    return Json::object();
  }
  return Json::parse(in);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename T>
T Load(const TensorView& v, int64_t i) {
  T x;
  std::memcpy(&x, v.bytes() + i * sizeof(T), sizeof(T));  // Views may be unaligned.
  return x;
}

bool IsFloat(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF8E4M3 ||
         d == DType::kF8E8M0;
}

// Element i widened to f32 with the conversions in tensor/dtype.h.
float DecodeFloat(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kF32:
      return Load<float>(v, i);
    case DType::kF16:
      return F16ToF32(Load<uint16_t>(v, i));
    case DType::kBF16:
      return BF16ToF32(Load<uint16_t>(v, i));
    case DType::kF8E4M3:
      return F8E4M3ToF32(Load<uint8_t>(v, i));
    case DType::kF8E8M0:
      return F8E8M0ToF32(Load<uint8_t>(v, i));
    default:
      ADD_FAILURE() << "not a float dtype";
      return 0;
  }
}

int64_t DecodeInt(const TensorView& v, int64_t i) {
  switch (v.dtype) {
    case DType::kI8:
      return Load<int8_t>(v, i);
    case DType::kU8:
      return Load<uint8_t>(v, i);
    case DType::kI32:
      return Load<int32_t>(v, i);
    case DType::kI64:
      return Load<int64_t>(v, i);
    case DType::kBool:
      return Load<uint8_t>(v, i);
    default:
      ADD_FAILURE() << "not an integer dtype";
      return 0;
  }
}

// The manifest writes NaN and infinities as strings; strict JSON has no spelling for them.
float ExpectedFloat(const Json& j) {
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (s == "nan") return std::numeric_limits<float>::quiet_NaN();
    return s == "inf" ? std::numeric_limits<float>::infinity()
                      : -std::numeric_limits<float>::infinity();
  }
  return static_cast<float>(j.get<double>());
}

// Checks dtype, shape and every element of `view` against the manifest entry.
void ExpectTensorMatches(const TensorView& view, const Json& want) {
  const std::string name = want["name"];
  SCOPED_TRACE("tensor " + name);
  EXPECT_EQ(DTypeName(view.dtype), want["dtype"].get<std::string>());
  Shape shape;
  for (int64_t d : want["shape"]) shape.Append(d);
  EXPECT_EQ(view.shape, shape) << view.shape.ToString() << " vs " << shape.ToString();
  const Json& values = want["values"];
  ASSERT_EQ(view.NumElements(), static_cast<int64_t>(values.size()));
  for (int64_t i = 0; i < view.NumElements(); ++i) {
    if (IsFloat(view.dtype)) {
      float got = DecodeFloat(view, i), expected = ExpectedFloat(values[i]);
      if (std::isnan(expected)) {
        EXPECT_TRUE(std::isnan(got)) << "element " << i << " = " << got;
      } else {
        // EXPECT_EQ, not NEAR: decoding is exact. The sign bit tells -0 from 0.
        EXPECT_EQ(got, expected) << "element " << i;
        EXPECT_EQ(std::signbit(got), std::signbit(expected)) << "element " << i;
      }
    } else {
      EXPECT_EQ(DecodeInt(view, i), values[i].get<int64_t>()) << "element " << i;
    }
  }
}

// Every tensor of one good file, read through SafetensorsFile: values, byte ranges, zero copy.
void CheckGoodFile(const Json& want) {
  const std::string path = kFixtureDir + "/" + want["path"].get<std::string>();
  SCOPED_TRACE(path);
  SafetensorsFile file(path);
  const std::string bytes = ReadWholeFile(path);

  std::map<std::string, std::string> metadata = want["metadata"];
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.entries().size(), want["tensors"].size());
  // entries() is in data order: each starts where the last ended, up to the end of the file.
  for (size_t i = 1; i < file.entries().size(); ++i) {
    EXPECT_EQ(file.entries()[i].begin, file.entries()[i - 1].end);
  }
  EXPECT_EQ(file.entries().back().end, bytes.size());

  const TensorView first = file.View(file.entries().front().name);
  for (const Json& t : want["tensors"]) {
    const std::string name = t["name"];
    ASSERT_TRUE(file.Has(name)) << name;
    const TensorView view = file.View(name);
    ExpectTensorMatches(view, t);

    auto entry = std::find_if(file.entries().begin(), file.entries().end(),
                              [&](const SafetensorsEntry& e) { return e.name == name; });
    ASSERT_NE(entry, file.entries().end());
    EXPECT_EQ(entry->begin, t["begin"].get<uint64_t>()) << name;
    EXPECT_EQ(entry->end, t["end"].get<uint64_t>()) << name;

    // Zero copy: the view points into one mapping of the file, at the tensor's byte offset, so
    // views of the same tensor share a pointer and tensors sit as far apart as in the file.
    EXPECT_EQ(file.View(name).data, view.data) << name;
    EXPECT_EQ(view.bytes() - first.bytes(),
              static_cast<std::ptrdiff_t>(entry->begin - file.entries().front().begin))
        << name;
    EXPECT_EQ(0, std::memcmp(view.data, bytes.data() + entry->begin, view.NumBytes())) << name;
  }
  EXPECT_FALSE(file.Has("no.such.tensor"));
  EXPECT_THROW(file.View("no.such.tensor"), Error);
}

TEST(SafetensorsFileTest, ReadsEveryDTypeWrittenBySafetensors) {
  Json manifest = LoadManifest();
  ASSERT_TRUE(manifest.contains("files"));
  std::set<std::string> dtypes;
  for (const Json& file : manifest["files"]) {
    CheckGoodFile(file);
    for (const Json& t : file["tensors"]) dtypes.insert(t["dtype"]);
  }
  // The fixture covers every dtype the reader accepts, except F8_E8M0 on a torch without it.
  for (const char* d : {"F32", "F16", "BF16", "F8_E4M3", "I8", "U8", "I32", "I64", "BOOL"}) {
    EXPECT_TRUE(dtypes.count(d)) << d;
  }
}

TEST(SafetensorsFileTest, ReadsScalarsAndEmptyTensors) {
  SafetensorsFile file(kFixtureDir + "/all_dtypes.safetensors");
  TensorView scalar = file.View("scalar.f32");
  EXPECT_EQ(scalar.shape.rank(), 0);
  EXPECT_EQ(scalar.NumElements(), 1);
  EXPECT_EQ(Load<float>(scalar, 0), 2.5f);
  TensorView empty = file.View("empty.bf16");
  EXPECT_EQ(empty.shape, (Shape{3, 0, 2}));
  EXPECT_EQ(empty.NumBytes(), 0u);
}

TEST(CheckpointTest, OpensShardedAndSingleFileCheckpoints) {
  Json manifest = LoadManifest();
  ASSERT_TRUE(manifest.contains("checkpoints"));
  for (const Json& want : manifest["checkpoints"]) {
    const std::string dir = kFixtureDir + "/" + want["dir"].get<std::string>();
    SCOPED_TRACE(dir);
    Checkpoint ckpt = Checkpoint::Open(dir);
    ASSERT_EQ(ckpt.files().size(), want["files"].size());

    std::vector<std::string> names;
    std::set<DType> dtypes;
    for (const Json& file : want["files"]) {
      const std::string path = kFixtureDir + "/" + file["path"].get<std::string>();
      // Get() must return the very bytes of the shard that holds the tensor.
      auto shard = std::find_if(ckpt.files().begin(), ckpt.files().end(),
                                [&](const auto& f) { return f->path() == path; });
      ASSERT_NE(shard, ckpt.files().end()) << path;
      for (const Json& t : file["tensors"]) {
        const std::string name = t["name"];
        names.push_back(name);
        dtypes.insert(*ParseSafetensorsDType(t["dtype"].get<std::string>()));
        ASSERT_TRUE(ckpt.Has(name)) << name;
        ExpectTensorMatches(ckpt.Get(name), t);
        EXPECT_EQ(ckpt.Get(name).data, (*shard)->View(name).data) << name;
      }
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(ckpt.Names(), names);
    EXPECT_EQ(ckpt.DTypes(), dtypes);
    EXPECT_FALSE(ckpt.Has("no.such.tensor"));
    try {
      ckpt.Get("no.such.tensor");
      ADD_FAILURE() << "Get of a missing tensor did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no tensor 'no.such.tensor'"), std::string::npos)
          << e.what();
    }
  }
}

// Runs `open` and checks it throws latent::Error whose message has every expected substring.
template <typename Open>
void ExpectErrorContaining(Open open, const Json& expect) {
  try {
    open();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const Json& part : expect) {
      EXPECT_NE(message.find(part.get<std::string>()), std::string::npos)
          << "message: " << message << "\nlacks: " << part.get<std::string>();
    }
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-latent exception: " << e.what();
  }
}

TEST(SafetensorsFileTest, RejectsEveryMalformedFileWithAClearError) {
  Json manifest = LoadManifest();
  ASSERT_TRUE(manifest.contains("malformed_files"));
  EXPECT_GE(manifest["malformed_files"].size(), 20u);
  for (const Json& c : manifest["malformed_files"]) {
    const std::string path = kFixtureDir + "/" + c["path"].get<std::string>();
    SCOPED_TRACE(path);
    ExpectErrorContaining([&] { SafetensorsFile file(path); }, c["expect"]);
  }
}

// An alias reads its tensor's bytes and remembers what it stands for (errors name the stored
// tensor), across a Rename too.
TEST(CheckpointTest, AnAliasKnowsTheTensorItStandsFor) {
  Json manifest = LoadManifest();
  ASSERT_FALSE(manifest["checkpoints"].empty());
  const std::string dir = kFixtureDir + "/" + manifest["checkpoints"][0]["dir"].get<std::string>();
  Checkpoint ckpt = Checkpoint::Open(dir);
  const std::string name = ckpt.Names().front();
  ckpt.Alias("alias.weight", name);
  EXPECT_EQ(ckpt.Get("alias.weight").data, ckpt.Get(name).data);
  EXPECT_EQ(ckpt.Origin("alias.weight"), name);
  EXPECT_EQ(ckpt.Origin(name), name);
  EXPECT_EQ(ckpt.Origin("no.such.tensor"), "no.such.tensor");
  ckpt.Rename([](const std::string& n) { return "renamed." + n; });
  EXPECT_EQ(ckpt.Origin("renamed.alias.weight"), "renamed." + name);
  EXPECT_EQ(ckpt.Get("renamed.alias.weight").data, ckpt.Get("renamed." + name).data);
}

TEST(CheckpointTest, RejectsEveryMalformedCheckpointWithAClearError) {
  Json manifest = LoadManifest();
  ASSERT_TRUE(manifest.contains("malformed_checkpoints"));
  EXPECT_GE(manifest["malformed_checkpoints"].size(), 5u);
  for (const Json& c : manifest["malformed_checkpoints"]) {
    const std::string dir = kFixtureDir + "/" + c["dir"].get<std::string>();
    SCOPED_TRACE(dir);
    ExpectErrorContaining([&] { Checkpoint::Open(dir); }, c["expect"]);
  }
}

TEST(CheckpointTest, RejectsAMissingDirectory) {
  ExpectErrorContaining([] { Checkpoint::Open(kFixtureDir + "/no-such-dir"); },
                        Json{"no-such-dir", "not a directory"});
}

// ---- ParseSafetensorsHeader on bytes built in memory. ----

std::vector<uint8_t> FileBytes(uint64_t header_len, std::string_view header, size_t data_bytes) {
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(header_len >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.resize(bytes.size() + data_bytes, 0xab);
  return bytes;
}

std::vector<uint8_t> FileBytes(std::string_view header, size_t data_bytes = 0) {
  return FileBytes(header.size(), header, data_bytes);
}

std::string ParseError(const std::vector<uint8_t>& bytes) {
  try {
    ParseSafetensorsHeader(bytes.data(), bytes.size(), "mem.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(SafetensorsHeaderTest, EmptyHeaderWithNoDataIsValid) {
  auto bytes = FileBytes("{}");
  SafetensorsHeader header = ParseSafetensorsHeader(bytes.data(), bytes.size(), "mem");
  EXPECT_TRUE(header.entries.empty());
  EXPECT_TRUE(header.metadata.empty());
  EXPECT_EQ(header.data_start, 10u);
}

TEST(SafetensorsHeaderTest, PaddedHeaderAndMetadataAreRead) {
  // safetensors pads the header with spaces to a multiple of 8 bytes.
  auto bytes = FileBytes(
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}   )",
      4);
  SafetensorsHeader header = ParseSafetensorsHeader(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(header.entries.size(), 1u);
  EXPECT_EQ(header.entries[0].name, "w");
  EXPECT_EQ(header.entries[0].begin, header.data_start);
  EXPECT_EQ(header.entries[0].end, bytes.size());
  EXPECT_EQ(header.metadata.at("format"), "pt");
}

TEST(SafetensorsHeaderTest, ZeroSizeTensorsMayShareAnOffset) {
  auto bytes = FileBytes(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                         R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("c":{"dtype":"I8","shape":[0,3],"data_offsets":[4,4]}})",
                         4);
  SafetensorsHeader header = ParseSafetensorsHeader(bytes.data(), bytes.size(), "mem");
  ASSERT_EQ(header.entries.size(), 3u);
  EXPECT_EQ(header.entries[0].name, "a");
  EXPECT_EQ(header.entries[2].name, "c");
}

TEST(SafetensorsHeaderTest, RejectsJsonNestedTooDeep) {
  // Deep nesting must fail fast with our message, not recurse or allocate per level.
  std::string deep = R"({"w":)" + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_NE(ParseError(FileBytes(deep)).find("nested deeper than 3 levels"), std::string::npos);
  EXPECT_NE(ParseError(FileBytes(R"({"__metadata__":{"a":{"b":[1]}}})"))
                .find("nested deeper than 3 levels"),
            std::string::npos);
}

TEST(SafetensorsHeaderTest, RejectsHeaderLengthsNearUint64Max) {
  for (uint64_t len : {UINT64_MAX, UINT64_MAX - 7, UINT64_MAX - 8, uint64_t{1} << 63}) {
    std::string message = ParseError(FileBytes(len, "{}", 0));
    EXPECT_NE(message.find("header length " + std::to_string(len) + " is larger than the file"),
              std::string::npos)
        << message;
  }
}

TEST(SafetensorsHeaderTest, RejectsHeadersOverTheSizeLimit) {
  // A header longer than 100 MB is refused before it is parsed. The file is an anonymous mapping,
  // so its zero pages cost nothing; only the length field is written.
  const size_t size = 101u * 1000u * 1000u;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(p);
  const uint64_t len = size - 8;
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(len >> (8 * i));
  try {
    ParseSafetensorsHeader(bytes, size, "big.safetensors");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit of 100000000"), std::string::npos)
        << e.what();
  }
  munmap(p, size);
}

TEST(SafetensorsHeaderTest, RejectsDuplicateMetadataKeys) {
  std::string message = ParseError(FileBytes(R"({"__metadata__":{"a":"1","a":"2"}})"));
  EXPECT_NE(message.find("'__metadata__': duplicate key 'a'"), std::string::npos) << message;
}

TEST(SafetensorsHeaderTest, DuplicateKeysInDifferentTensorsAreFine) {
  auto bytes = FileBytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                         R"("b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                         2);
  EXPECT_EQ(ParseSafetensorsHeader(bytes.data(), bytes.size(), "mem").entries.size(), 2u);
}

TEST(SafetensorsHeaderTest, ShapeAtTheInt64LimitIsRefused) {
  // 2^63 one-byte elements cannot be counted in int64.
  std::string message = ParseError(
      FileBytes(R"({"w":{"dtype":"U8","shape":[4294967296,2147483648],"data_offsets":[0,0]}})"));
  EXPECT_NE(message.find("tensor 'w': shape [4294967296,2147483648] is too large"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace latent::weights
