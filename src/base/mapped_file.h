// A read-only memory map of a whole file. Weights are read through it without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace latent {

class MappedFile {
 public:
  // Maps `path` read-only; throws latent::Error naming the path when it cannot.
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void Release();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace latent

namespace latent {

// Drops the pages wholly inside [data, data + bytes) of a read-only file mapping from this
// process (madvise MADV_DONTNEED): for weights converted at load, whose originals are not read
// again. Reading them later still works (they come back from the file). Errors are ignored.
void ReleaseMappedPages(const void* data, size_t bytes);

}  // namespace latent
