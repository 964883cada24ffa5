#pragma once
// Scratch<T>: a buffer that only grows and is never initialised, for scratch a computation writes
// before it reads. Sized once for the largest call (Get at start), it is reused by every later
// call without allocating, page-faulting or zeroing again; a larger call grows it (dropping its
// contents). It belongs to its owner (a model's forward workspace), not to a thread, so its
// memory goes with the owner.

#include <cstddef>
#include <memory>

namespace latent {

template <class T>
class Scratch {
 public:
  // At least `n` elements, uninitialised; valid until the next Get asking for more.
  T* Get(size_t n) {
    if (n > size_) {
      data_.reset();  // free the old buffer before taking the larger one
      data_.reset(new T[n]);
      size_ = n;
    }
    return data_.get();
  }
  size_t size() const { return size_; }

 private:
  std::unique_ptr<T[]> data_;
  size_t size_ = 0;
};

}  // namespace latent
