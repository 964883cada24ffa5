#include "weights/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <iterator>
#include <set>
#include <string_view>

#include "base/error.h"

namespace latent::weights {
namespace {

using Json = nlohmann::json;

// safetensors itself refuses headers over 100 MB; so do we, before allocating anything.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;
// A valid header nests objects/arrays at most three deep: top, entry, shape/offsets.
constexpr int kMaxDepth = 3;

// Every dtype the safetensors format defines: one latent does not read is "unsupported", any
// other name "unknown".
bool IsSafetensorsDType(std::string_view name) {
  static constexpr std::string_view kFormatDTypes[] = {
      "BOOL", "U8",  "I8",  "I16", "U16",     "F16",     "BF16",    "I32",     "U32",     "F32",
      "F64",  "I64", "U64", "C64", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4"};
  return std::find(std::begin(kFormatDTypes), std::end(kFormatDTypes), name) !=
         std::end(kFormatDTypes);
}

uint64_t ReadU64LE(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Parses the JSON text, rejecting duplicate keys (nlohmann would silently keep the last, so two
// readers could disagree on a tensor) and nesting deeper than a header ever needs.
Json ParseJsonRejectingDuplicates(std::string_view text, const std::string& file) {
  std::set<std::string> top_keys;    // Tensor names and __metadata__.
  std::set<std::string> inner_keys;  // Keys of the object now open at depth 1.
  std::string current;               // The top-level key that object belongs to.
  std::string duplicate, duplicate_in;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if ((event == Json::parse_event_t::object_start ||
         event == Json::parse_event_t::array_start) &&
        depth >= kMaxDepth) {
      Fail(file, ": invalid safetensors header: JSON nested deeper than ", kMaxDepth, " levels");
    }
    if (event == Json::parse_event_t::object_start && depth == 1) inner_keys.clear();
    if (event == Json::parse_event_t::key && depth <= 2 && duplicate.empty()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (depth == 1) {
        current = key;
        if (!top_keys.insert(key).second) duplicate = key;
      } else if (!inner_keys.insert(key).second) {
        duplicate = key;
        duplicate_in = current;
      }
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& e) {
    Fail(file, ": invalid JSON in safetensors header: ", e.what());
  }
  if (!duplicate.empty() && duplicate_in.empty()) {
    Fail(file, ": duplicate tensor name '", duplicate, "' in header");
  }
  if (!duplicate.empty()) {
    const char* what = duplicate_in == "__metadata__" ? "" : "tensor ";
    Fail(file, ": ", what, "'", duplicate_in, "': duplicate key '", duplicate, "'");
  }
  return header;
}

uint64_t GetOffset(const Json& value, uint64_t data_size, const std::string& where) {
  // An integer past 2^64 - 1 parses as a float: too large, not malformed.
  if (value.is_number_float() && value.get<double>() >= 0x1p64) {
    Fail(where, ": data_offsets entry ", value.dump(), " is too large: past the end of the file ",
         "(the data buffer has ", data_size, " bytes)");
  }
  if (!value.is_number_unsigned()) Fail(where, ": data_offsets must be non-negative integers");
  return value.get<uint64_t>();
}

SafetensorsEntry ParseEntry(const std::string& name, const Json& desc, uint64_t data_start,
                            uint64_t data_size, const std::string& file) {
  const std::string where = StrCat(file, ": tensor '", name, "'");
  if (!desc.is_object()) Fail(where, ": description is not a JSON object");

  SafetensorsEntry entry;
  entry.name = name;

  auto dtype_it = desc.find("dtype");
  if (dtype_it == desc.end() || !dtype_it->is_string()) Fail(where, ": missing string 'dtype'");
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  auto dtype = ParseSafetensorsDType(dtype_name);
  if (!dtype) {
    Fail(where, ": ", IsSafetensorsDType(dtype_name) ? "unsupported" : "unknown", " dtype '",
         dtype_name, "' (supported: ", SupportedSafetensorsDTypes(), ")");
  }
  entry.dtype = *dtype;

  auto shape_it = desc.find("shape");
  if (shape_it == desc.end()) Fail(where, ": missing array 'shape'");
  if (!shape_it->is_array()) Fail(where, ": 'shape' must be an array, got ", shape_it->dump());
  if (shape_it->size() > static_cast<size_t>(kMaxDims)) {
    Fail(where, ": shape has ", shape_it->size(), " dims, more than ", kMaxDims);
  }
  uint64_t expected_bytes = DTypeSize(entry.dtype);
  for (const Json& dim : *shape_it) {
    if (!dim.is_number_unsigned()) Fail(where, ": shape entries must be non-negative integers");
    uint64_t d = dim.get<uint64_t>();
    // Every partial product must fit in int64, not just uint64: Shape::NumElements multiplies
    // the dims in int64 in this order, and [2^62, 2, 0] would overflow it on the way to zero.
    if (d > static_cast<uint64_t>(INT64_MAX) ||
        __builtin_mul_overflow(expected_bytes, d, &expected_bytes) ||
        expected_bytes > static_cast<uint64_t>(INT64_MAX)) {
      Fail(where, ": shape ", shape_it->dump(), " is too large");
    }
    entry.shape.Append(static_cast<int64_t>(d));
  }

  auto offsets_it = desc.find("data_offsets");
  if (offsets_it == desc.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    Fail(where, ": missing 'data_offsets' [begin, end]");
  }
  uint64_t begin = GetOffset((*offsets_it)[0], data_size, where);
  uint64_t end = GetOffset((*offsets_it)[1], data_size, where);
  if (begin > end) Fail(where, ": data_offsets [", begin, ", ", end, "] are unsorted (begin > end)");
  if (end > data_size) {
    Fail(where, ": data_offsets [", begin, ", ", end, "] out of range: the data buffer has ",
         data_size, " bytes (file truncated?)");
  }
  if (end - begin != expected_bytes) {
    Fail(where, ": size mismatch: shape ", entry.shape.ToString(), " x ", DTypeName(entry.dtype),
         " needs ", expected_bytes, " bytes but data_offsets span ", end - begin);
  }
  entry.begin = data_start + begin;
  entry.end = data_start + end;
  return entry;
}

}  // namespace

SafetensorsHeader ParseSafetensorsHeader(const uint8_t* bytes, size_t size,
                                         const std::string& file) {
  if (size < 8) {
    Fail(file, ": truncated: ", size, " bytes, shorter than the 8-byte header length field");
  }
  const uint64_t header_len = ReadU64LE(bytes);
  if (header_len > size - 8) {
    Fail(file, ": header length ", header_len, " is larger than the file (", size,
         " bytes): file truncated or not safetensors");
  }
  if (header_len > kMaxHeaderBytes) {
    Fail(file, ": header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes);
  }
  std::string_view text(reinterpret_cast<const char*>(bytes + 8), header_len);
  // nlohmann's parser stops at a NUL as at the end of input, so `{...}\0garbage` would load; the
  // safetensors package refuses the trailing bytes (its padding is spaces, which stay accepted).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    Fail(file, ": invalid safetensors header: a NUL byte at byte ", nul, " of its ", header_len,
         " (the header is JSON text, padded with spaces)");
  }
  Json json = ParseJsonRejectingDuplicates(text, file);
  if (!json.is_object()) Fail(file, ": safetensors header is not a JSON object");

  SafetensorsHeader header;
  header.data_start = 8 + header_len;
  const uint64_t data_size = size - header.data_start;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) Fail(file, ": __metadata__ is not a JSON object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) Fail(file, ": __metadata__ value '", m.key(), "' is not a string");
        header.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    header.entries.push_back(ParseEntry(it.key(), *it, header.data_start, data_size, file));
  }

  // The tensors must tile the data buffer: sorted by offset, each starts where the last ended.
  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t cursor = header.data_start;
  const SafetensorsEntry* previous = nullptr;
  for (const SafetensorsEntry& e : header.entries) {
    if (e.begin < cursor) {
      Fail(file, ": tensor '", e.name, "' overlaps tensor '", previous->name, "' (data at byte ",
           e.begin - header.data_start, " < ", cursor - header.data_start, ")");
    }
    if (e.begin > cursor) {
      // Typically a header entry removed with its bytes left in place.
      Fail(file, ": hole in the data buffer: bytes ", cursor - header.data_start, "..",
           e.begin - header.data_start, " belong to no tensor listed in the header (the next, '",
           e.name, "', starts after them)");
    }
    cursor = e.end;
    previous = &e;
  }
  if (cursor != size) {
    Fail(file, ": data buffer has ", size - cursor, " trailing bytes not covered by any tensor");
  }
  return header;
}

}  // namespace latent::weights
