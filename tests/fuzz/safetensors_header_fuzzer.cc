// Fuzzes the safetensors header parser on raw file bytes. The parser may reject any input, but only
// by throwing latent::Error: any other exception, a crash, an out-of-bounds read (ASan) or
// undefined behaviour (UBSan) is a finding, and so is a header it accepts that breaks its own
// guarantees.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.h"
#include "weights/safetensors_header.h"

namespace {

uint64_t ReadU64LE(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void WriteU64LE(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// What ParseSafetensorsHeader promises about a header it returns: the tensors tile the data
// buffer exactly, in order, each as long as its shape and dtype say.
void CheckAccepted(const latent::weights::SafetensorsHeader& header, const uint8_t* data,
                   size_t size) {
  if (header.data_start != 8 + ReadU64LE(data) || header.data_start > size) abort();
  uint64_t cursor = header.data_start;
  for (const auto& e : header.entries) {
    if (e.begin != cursor || e.end < e.begin || e.end > size) abort();
    // NumElements multiplies in int64: UBSan flags an overflow here.
    const uint64_t bytes =
        static_cast<uint64_t>(e.shape.NumElements()) * latent::DTypeSize(e.dtype);
    if (bytes != e.end - e.begin) abort();
    cursor = e.end;
  }
  if (cursor != size) abort();
}

}  // namespace

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Byte-level mutations that insert or delete inside the JSON leave the length field stale, so
// almost every such input dies at the first check. Three times in four, mutate only the JSON and
// rewrite the length to match; otherwise mutate the raw bytes, length field and data included.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  if (seed % 4 == 0 || size < 8) return LLVMFuzzerMutate(data, size, max_size);
  const uint64_t json_len = ReadU64LE(data);
  if (json_len == 0 || json_len > size - 8) return LLVMFuzzerMutate(data, size, max_size);
  // The data buffer's bytes are never read by the parser; only its length matters.
  std::vector<uint8_t> tail(data + 8 + json_len, data + size);
  if (8 + tail.size() >= max_size) return LLVMFuzzerMutate(data, size, max_size);
  const size_t new_len = LLVMFuzzerMutate(data + 8, json_len, max_size - 8 - tail.size());
  if (!tail.empty()) std::memcpy(data + 8 + new_len, tail.data(), tail.size());
  WriteU64LE(new_len, data);
  return 8 + new_len + tail.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    CheckAccepted(latent::weights::ParseSafetensorsHeader(data, size, "fuzz"), data, size);
  } catch (const latent::Error&) {
    // Rejected with a message: the expected outcome for most inputs.
  }
  return 0;
}
