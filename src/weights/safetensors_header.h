// Parsing and validation of a safetensors file's header, kept apart from file I/O so that the
// fuzzer can drive it on raw bytes. Format: u64 little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}), then the
// data buffer, which the tensors must cover exactly with no overlap and no holes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/tensor_view.h"

namespace latent::weights {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t begin = 0;  // Absolute byte offset of the tensor's data in the file.
  uint64_t end = 0;    // One past the last byte.
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // In data order.
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length.
};

// Validates `bytes` (a whole file of `size` bytes) and returns its header. Throws latent::Error
// naming `file_name`, the tensor when there is one, and what is wrong. Never reads outside
// [bytes, bytes + size).
SafetensorsHeader ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                         const std::string& file_name);

}  // namespace latent::weights
