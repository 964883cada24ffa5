#include "engine/environment_check.h"

#include "base/profile.h"
#include "kernels/kernel_table.h"
#include "model/deepseek_weights.h"
#include "ops/attended_rows.h"
#include "threads/thread_pool.h"

namespace latent::engine {

void CheckEnvironment() {
  threads::CheckThreadEnvironment();
  profile::CheckEnvironment();
  kernels::CheckKernelEnvironment();
  ops::RowsGatherForced();
  model::KeyFoldTransposed();
}

}  // namespace latent::engine
