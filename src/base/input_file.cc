#include "base/input_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "base/error.h"

namespace latent {

void CheckInputFile(std::string_view label, const std::string& path) {
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
