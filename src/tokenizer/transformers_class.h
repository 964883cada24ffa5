// The pipeline transformers 5 actually runs for a tokenizer_config.json's `tokenizer_class`, where
// that class rebuilds parts of tokenizer.json instead of using them as written. Users compare
// latent with AutoTokenizer, so latent applies the same rebuild before building its pipeline.
#pragma once

#include <string_view>

#include "tokenizer/json_fields.h"

namespace latent::tokenizer {

// Rewrites `tokenizer` (tokenizer.json, parsed) as transformers' class of `config`
// (tokenizer_config.json, parsed; may be an empty object) would. `raw_tokenizer_json` is the
// file's text: transformers decides on a substring of it. Classes that keep tokenizer.json as
// written leave it untouched.
void ApplyTransformersClass(Json& tokenizer, const Json& config, std::string_view raw_tokenizer_json);

}  // namespace latent::tokenizer
