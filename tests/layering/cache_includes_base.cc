// Compiled with latent_cache's include directories (tests/layering): the control, a downward include that must
// compile, so that the failure of cache_includes_model.cc is the layering and nothing else.
#include "base/error.h"
#include "cache/block_pool.h"
