// The open-file limit of `latent serve`: every connection is a descriptor. With a limit below
// --max-connections plus what the server needs for itself, accept() fails with EMFILE and the
// clients past the limit would wait unanswered in the listen queue; so the connection limit is
// fitted to the file limit at start, and a spare descriptor lets the loop still answer 503 when
// descriptors run out anyway (another part of the process holds more than was reserved).
#pragma once

namespace latent::server {

// Descriptors kept free, beyond those open when the server binds, for what the process opens
// later: the model's files while it loads (one at a time; a mapped file's descriptor is closed
// once mapped), the tokenizer, chat template and config files, and the connections an MPI
// library may open lazily to the other ranks.
inline constexpr int kReservedFiles = 64;

// Raises the soft open-file limit to the hard one, and returns how many connections fit under
// it: `max_connections`, or fewer where the limit less the descriptors open now and
// kReservedFiles is below it (then one warning on stderr names both numbers and the flag).
// Throws latent::Error when not one connection fits.
int FitConnectionsToFileLimit(int max_connections);

// A descriptor held open on /dev/null, given up for a moment when accept() fails with EMFILE or
// ENFILE: the slot it frees lets one waiting connection be accepted, answered 503 and closed
// (then the spare is taken again), instead of left hanging in the listen queue.
class SpareFile {
 public:
  SpareFile() = default;
  SpareFile(const SpareFile&) = delete;
  SpareFile& operator=(const SpareFile&) = delete;
  ~SpareFile() { Release(); }

  bool held() const { return fd_ >= 0; }
  // Opens it where not held; false when no descriptor is free.
  bool Take();
  void Release();

 private:
  int fd_ = -1;
};

}  // namespace latent::server
