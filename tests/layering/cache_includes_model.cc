// Compiled with latent_cache's include directories (tests/layering): cache sits below model, so
// this include must not resolve. The layering test expects this file to fail to compile.
#include "model/model.h"
