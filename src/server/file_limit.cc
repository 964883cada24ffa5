#include "server/file_limit.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"

namespace latent::server {
namespace {

// The descriptors open below `limit`: a new descriptor takes the lowest free number, and fails
// with EMFILE when none below the soft limit is free, so those at or above it take no room.
int64_t OpenFilesBelow(int64_t limit) {
  int64_t count = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    const int own = ::dirfd(dir);
    while (const dirent* entry = ::readdir(dir)) {
      if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;  // "." and ".."
      const long fd = std::strtol(entry->d_name, nullptr, 10);
      if (fd != own && fd < limit) ++count;
    }
    ::closedir(dir);
    return count;
  }
  // No /proc: ask each number (the callers' limits are at most max_connections + a little).
  for (int64_t fd = 0; fd < limit; ++fd) {
    if (::fcntl(static_cast<int>(fd), F_GETFD) != -1) ++count;
  }
  return count;
}

}  // namespace

int FitConnectionsToFileLimit(int max_connections) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return max_connections;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur == RLIM_INFINITY) return max_connections;
  // Far above what is asked for: no need to count.
  const int64_t files = static_cast<int64_t>(std::min<rlim_t>(limit.rlim_cur, int64_t{1} << 40));
  if (files >= int64_t{max_connections} + kReservedFiles + 65536) return max_connections;
  const int64_t open = OpenFilesBelow(files);
  const int64_t room = files - open - kReservedFiles;
  if (room >= max_connections) return max_connections;
  if (room < 1) {
    Fail("the open-file limit (", files, ") leaves no descriptor for a connection: ", open,
         " are open and ", kReservedFiles, " are kept for the server's own files; raise it to at ",
         "least ", open + kReservedFiles + max_connections, " for --max-connections ",
         max_connections, " (`ulimit -n`, or LimitNOFILE= in a systemd unit)");
  }
  std::fprintf(stderr,
               "latent serve: warning: the open-file limit (%lld) leaves room for %lld "
               "connections (%lld descriptors are open and %d kept for the server's own files), "
               "fewer than --max-connections %d: serving at most %lld connections, and a "
               "connection past them gets 503; to serve %d, raise the limit to at least %lld "
               "(`ulimit -n`, or LimitNOFILE= in a systemd unit), or lower --max-connections\n",
               static_cast<long long>(files), static_cast<long long>(room),
               static_cast<long long>(open), kReservedFiles, max_connections,
               static_cast<long long>(room), max_connections,
               static_cast<long long>(open + kReservedFiles + max_connections));
  return static_cast<int>(room);
}

bool SpareFile::Take() {
  if (fd_ < 0) fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  return fd_ >= 0;
}

void SpareFile::Release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace latent::server
