// LATENT_TEST_STALL_LOAD=NAME, test-only: a model directory holding a file NAME stands for a
// checkpoint on a hung file system: its load waits, before config.json is read, for as long as
// the file is there. Tests of signals and start-up checks while a rank loads need a load that
// lasts; a FIFO as config.json gave one until model files had to be regular files.
#pragma once

#include <string>

namespace latent::model {

// Returns at once without LATENT_TEST_STALL_LOAD; a NAME that is not a plain file name (empty
// after '=' counts as unset) is refused, naming the variable.
void StallWhileMarked(const std::string& model_dir);

}  // namespace latent::model
