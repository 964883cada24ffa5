#include "base/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "base/error.h"

namespace latent {

void CheckStandardInput(std::string_view label, const std::string& path) {
  const int flags = ::fcntl(0, F_GETFL);
  if (flags == -1 || (flags & O_ACCMODE) == O_WRONLY) {
    Fail(label, " ", path,
         ": standard input is not open for reading (closed, or open only for writing)");
  }
}

void CheckReadToEnd(std::istream& in, std::string_view label, const std::string& path) {
  const int error = errno;
  const bool from_stdin = &in == &std::cin;
  if (!in.bad() && !(from_stdin && std::ferror(stdin))) return;
  Fail(label, " ", path, from_stdin ? ": reading standard input failed: " : ": reading failed: ",
       error != 0 ? std::strerror(error) : "a read failed (the input is incomplete)");
}

void CheckInputFile(std::string_view label, const std::string& path) {
  // The names Linux gives descriptor 0: opened, a stdin held on /dev/null would read as empty.
  if (path == "/dev/stdin" || path == "/dev/fd/0" || path == "/proc/self/fd/0") {
    CheckStandardInput(label, path);
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    Fail(label, " ", path, ": cannot open: ", std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) Fail(label, " ", path, ": is a directory, not a file");
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode) && !S_ISCHR(st.st_mode)) {
    Fail(label, " ", path, ": not a file that can be read (a socket or a block device)");
  }
}

std::ifstream OpenInputFile(std::string_view label, const std::string& path,
                            std::ios::openmode mode) {
  CheckInputFile(label, path);
  std::ifstream in(path, mode);
  if (!in) Fail(label, " ", path, ": cannot open: ", std::strerror(errno));
  return in;
}

namespace {

const char* FileKind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a file";
}

// Closes the descriptor on every path out, the errors included.
struct FileDescriptor {
  int fd;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// The status of `path`: not_found when nothing is there (ENOENT, ENOTDIR), as std::filesystem
// reads those.
std::filesystem::file_status Status(std::string_view label, const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error && status.type() != std::filesystem::file_type::not_found) {
    Fail(label, " ", path, ": cannot read: ", error.message());
  }
  return status;
}

}  // namespace

std::optional<std::string> ReadModelFile(std::string_view label, const std::string& path,
                                         size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer; on a regular file it
  // changes nothing.
  const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  if (file.fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;  // as fs::exists reads them
    Fail(label, " ", path, ": cannot open: ", std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) Fail(label, " ", path, ": cannot stat: ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) Fail(label, " ", path, ": is a directory, not a file");
  if (!S_ISREG(st.st_mode)) {
    Fail(label, " ", path, ": not a regular file (", FileKind(st.st_mode), ")");
  }
  const auto too_large = [&](uint64_t bytes) {
    Fail(label, " ", path, ": is ", bytes, " bytes, more than the ", max_bytes >> 20,
         " MiB such a file may hold");
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) too_large(st.st_size);
  std::string text;
  // Read to the end rather than st_size bytes, capped: the file may change while it is read.
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(file.fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) Fail(label, " ", path, ": cannot read: ", std::strerror(errno));
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes) too_large(text.size() + n);
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

bool PathExists(std::string_view label, const std::string& path) {
  return std::filesystem::exists(Status(label, path));
}

bool IsDirectory(std::string_view label, const std::string& path) {
  return std::filesystem::is_directory(Status(label, path));
}

}  // namespace latent
