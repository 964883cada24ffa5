#include "base/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
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

}  // namespace latent
