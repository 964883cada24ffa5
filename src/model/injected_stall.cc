#include "model/injected_stall.h"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "base/error.h"
#include "base/input_file.h"

namespace latent::model {

void StallWhileMarked(const std::string& model_dir) {
  const char* value = std::getenv("LATENT_TEST_STALL_LOAD");
  if (value == nullptr || *value == '\0') return;
  const std::string name = value;
  if (name.find('/') != std::string::npos || name == "." || name == "..") {
    Fail("LATENT_TEST_STALL_LOAD: '", name, "' is not a file name");
  }
  const std::string marker = model_dir + "/" + name;
  // Polled, not waited on with inotify: the stall stands for a read that does not return, and
  // signals are taken by the signal thread meanwhile, as during such a read.
  while (PathExists("model", marker)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace latent::model
