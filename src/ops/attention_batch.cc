// AttentionBatch's bookkeeping (attention_batch.h).
#include "ops/attention_batch.h"

namespace latent::ops {

void AttentionBatch::AddWindowTable(std::span<const cache::BlockId> table) {
  if (window_table_starts.empty()) window_table_starts.push_back(0);
  window_block_ids.insert(window_block_ids.end(), table.begin(), table.end());
  window_table_starts.push_back(static_cast<int32_t>(window_block_ids.size()));
}

}  // namespace latent::ops
