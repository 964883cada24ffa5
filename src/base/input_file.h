// Opening a file latent reads (--prompts, --jsonl, --request, config.json, ...). std::ifstream
// opens a directory without complaint and then reads nothing, so `--prompts /tmp` succeeded with
// no output and a config.json that is a directory read as "invalid JSON". Every such input goes
// through OpenInputFile, which refuses what is not a file with the path and the reason.
#pragma once

#include <cstddef>
#include <fstream>
#include <istream>
#include <optional>
#include <string>
#include <string_view>

namespace latent {

// Throws "LABEL PATH: standard input is not open for reading (closed, or open only for
// writing)" unless descriptor 0 can be read. `path` is "-" or a path naming it (/dev/stdin).
// The CLI holds a stdin closed at start open on a write-only /dev/null (so that no file latent
// opens takes descriptor 0), which this refuses as it refuses a closed one: either would read
// as an empty input, and a command reading it print nothing and exit 0.
void CheckStandardInput(std::string_view label, const std::string& path);

// After `in` has been read until a read stopped it: throws "LABEL PATH: reading failed: REASON"
// (for std::cin, "reading standard input failed") when that read failed rather than met the end
// of the input, which std::getline and istreambuf_iterator do not tell apart. A failed read is
// std::ifstream's badbit, or, for std::cin (in sync with stdio, as latent leaves it), stdin's
// error flag. REASON is errno's, as the failed read left it.
void CheckReadToEnd(std::istream& in, std::string_view label, const std::string& path);

// Throws latent::Error "LABEL PATH: cannot open: REASON" or "LABEL PATH: is a directory, not a
// file" unless `path` is a file that can be read: a regular file, or a pipe or character device
// (/dev/stdin, checked as CheckStandardInput checks it; a process substitution). `label` names
// where the path came from: the flag ("--prompts"), or what the file is ("model") where no one
// flag gave it.
void CheckInputFile(std::string_view label, const std::string& path);

// CheckInputFile, then the open stream (failing as it does if the open fails).
std::ifstream OpenInputFile(std::string_view label, const std::string& path,
                            std::ios::openmode mode = std::ios::in);

// The most a model directory's JSON file (config.json, the index, generation_config.json,
// tokenizer_config.json) may hold: the largest real ones (a per-expert index) are near 10 MiB.
inline constexpr size_t kMaxModelJsonBytes = size_t{64} << 20;

// The whole of `path`, a file latent finds in a model or tokenizer directory, or nullopt when
// nothing is there. Unlike CheckInputFile's command-line inputs it must be a regular file: a FIFO
// there would block every command at open (it is opened without blocking, then refused), and a
// link to /dev/zero would be read until memory ran out. Throws latent::Error "LABEL PATH: REASON"
// when it cannot be opened (a symlink loop, no permission), is not a regular file, or holds more
// than `max_bytes`.
std::optional<std::string> ReadModelFile(std::string_view label, const std::string& path,
                                         size_t max_bytes);

// Whether anything is at `path`, and whether it is a directory: std::filesystem's exists and
// is_directory, but a path whose status cannot be read (a symlink loop, a directory that cannot
// be searched) throws latent::Error "LABEL PATH: cannot read: REASON" rather than
// std::filesystem::filesystem_error.
bool PathExists(std::string_view label, const std::string& path);
bool IsDirectory(std::string_view label, const std::string& path);

}  // namespace latent
