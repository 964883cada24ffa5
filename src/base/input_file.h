// Opening a file latent reads (--prompts, --jsonl, --request, config.json, ...). std::ifstream
// opens a directory without complaint and then reads nothing, so `--prompts /tmp` succeeded with
// no output and a config.json that is a directory read as "invalid JSON". Every such input goes
// through OpenInputFile, which refuses what is not a file with the path and the reason.
#pragma once

#include <fstream>
#include <string>
#include <string_view>

namespace latent {

// Throws latent::Error "LABEL PATH: cannot open: REASON" or "LABEL PATH: is a directory, not a
// file" unless `path` is a file that can be read: a regular file, or a pipe or character device
// (/dev/stdin, a process substitution). `label` names where the path came from: the flag
// ("--prompts"), or what the file is ("model") where no one flag gave it.
void CheckInputFile(std::string_view label, const std::string& path);

// CheckInputFile, then the open stream (failing as it does if the open fails).
std::ifstream OpenInputFile(std::string_view label, const std::string& path,
                            std::ios::openmode mode = std::ios::in);

}  // namespace latent
