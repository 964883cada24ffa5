# Seed inputs for the fuzzers, sourced by run_fuzzers.sh and merge_corpus.sh: seed_<fuzzer> DIR
# writes a few inputs covering each construct of that fuzzer's format into DIR. The committed
# corpora (tests/fuzz/corpus/<fuzzer>/) grew from these; run_fuzzers.sh adds them to every run,
# so a format construct added here is fuzzed at once.
# Expects $here (tests/fuzz) and $build_dir (the fuzz build) to be set by the caller.

# u64 little-endian, as raw bytes.
le64() {
  local n=$1 i
  for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(((n >> (8 * i)) & 255)))"; done
}

# seed_header FILE JSON DATA_BYTES: a safetensors file with that header and a zeroed data buffer.
seed_header() {
  { le64 ${#2}; printf '%s' "$2"; head -c "$3" /dev/zero; } >"$1"
}

seed_safetensors_header_fuzzer() {
  local dir=$1 fixtures f
  seed_header "$dir/empty" '{}' 0
  seed_header "$dir/one_f32" '{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8
  seed_header "$dir/scalar_and_empty" '{"s":{"dtype":"BF16","shape":[],"data_offsets":[0,2]},'\
'"z":{"dtype":"I64","shape":[0,3],"data_offsets":[2,2]}}' 2
  seed_header "$dir/metadata_two_dtypes" '{"__metadata__":{"format":"pt"},'\
'"a":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]},'\
'"b":{"dtype":"I32","shape":[1,1,1,1,1,1],"data_offsets":[6,10]}}' 10
  # The fixtures, good and malformed, from make_safetensors_fixtures.py (run by ctest).
  for fixtures in "$build_dir/../build/test-data/safetensors" \
    "$here/../../build/test-data/safetensors"; do
    [[ -d $fixtures ]] || continue
    while IFS= read -r -d '' f; do
      cp "$f" "$dir/fixture_$(echo "${f#"$fixtures"/}" | tr / _)"
    done < <(find "$fixtures" -name '*.safetensors' -type f -size -64k -print0)
    break
  done
}

# Chat templates: the real ones in /work/shared when present, and a few of each construct.
seed_chat_template_fuzzer() {
  local dir=$1 f
  for f in "$here"/../../../shared/chat-templates/*.jinja /work/shared/chat-templates/*.jinja; do if [[ -f $f ]]; then cp "$f" "$dir/"; fi; done
  printf '%s' "{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|>' }}{{ m.content | trim }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}" >"$dir/loop"
  printf '%s' "{% set ns = namespace(sys='', n=0) %}{% for m in messages if m.role == 'system' %}{% set ns.sys = ns.sys + m.content %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.sys }}{{ ns.n }}" >"$dir/namespace"
  printf '%s' "{% macro text(c) -%}{%- if c is string %}{{ c }}{% elif c is iterable %}{% for p in c %}{{ p.text }}{% endfor %}{% endif -%}{%- endmacro %}{% for m in messages %}{{ text(m.content) }}{% endfor %}" >"$dir/macro"
  printf '%s' "{% if tools %}{{ tools | tojson(indent=2) }}{% for t in tools %}{{ t.function.name }}{% endfor %}{% endif %}{% for m in messages %}{% for c in m.tool_calls | default([]) %}{{ c.function.arguments | tojson if c.function.arguments is mapping else c.function.arguments }}{% endfor %}{% endfor %}" >"$dir/tools"
  printf '%s' "{{ messages[-1].content.split('</think>')[-1].lstrip('\\n') }}|{{ messages[::-1] | map(attribute='role') | join(',') }}|{{ '%s=%d' % ('a', 1) }}|{{ '{:>4}'.format(7) }}|{{ 7 // 2 ** 3 }}" >"$dir/expressions"
  printf '%s' "  {%- if x -%}
    a
  {%+ elif y %}b{% else -%} c {%- endif %}
{# comment #}{% raw %}{{ raw }}{% endraw %}" >"$dir/whitespace"
}

# The tokenizer fuzzers: small tokenizer.json files covering each supported component.
seed_tokenizer_load_fuzzer() { cp "$here"/tokenizer_seeds/*.json "$1"/; }
# OpenAI request bodies; the first byte picks the endpoint: 0 completions, 1 chat, 2 tokenize,
# 3 detokenize (openai_request_fuzzer.cc).
seed_openai_request_fuzzer() {
  local dir=$1
  printf '\x00%s' '{"model":"m","prompt":"Hello","max_tokens":8,"temperature":0.7,"top_p":0.9,"stop":["\n","lo"],"stream":true,"stream_options":{"include_usage":true}}' >"$dir/completion"
  printf '\x04%s' '{"prompt":[[1,2,3],[4,5]],"n":2,"logprobs":3,"seed":-1,"top_k":-1,"min_p":0.1,"return_token_ids":true}' >"$dir/ids"
  printf '\x08%s' '{"prompt":["a","b"],"presence_penalty":1.5,"frequency_penalty":-2,"repetition_penalty":1.1,"stop":"b","echo":false,"logit_bias":{}}' >"$dir/strings"
  printf '\x01%s' '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"there"}]}],"max_completion_tokens":4,"logprobs":true,"top_logprobs":2}' >"$dir/chat"
  printf '\x05%s' '{"messages":[{"role":"developer","content":null},{"role":"assistant","content":"x","tool_calls":[]}],"tools":[{"type":"function","function":{"name":"f"}}],"chat_template_kwargs":{"enable_thinking":false},"response_format":{"type":"text"}}' >"$dir/chat_tools"
  printf '\x02%s' '{"prompt":"Hello","add_special_tokens":false,"return_token_strs":true}' >"$dir/tokenize"
  printf '\x06%s' '{"messages":[{"role":"user","content":"Hi"}],"add_generation_prompt":true}' >"$dir/tokenize_chat"
  printf '\x03%s' '{"model":"m","tokens":[0,1,999]}' >"$dir/detokenize"
}
# config.json: the presets of tools/make_tiny_model.py as transformers writes them, with and
# without fp8 quantization, yarn rope, DSA and per-layer lists (config_seeds/*.json).
seed_model_config_fuzzer() { cp "$here"/config_seeds/*.json "$1"/; }
seed_tokenizer_encode_fuzzer() {
  printf 'AHello, world! 123 \xe4\xb8\xad <s>x</s> <|im_start|> \xff' >"$1/mixed"
  printf '\001 ab  c\t\n\xe4\xb8\xad\xf0\x9f\x98\x80' >"$1/sentencepiece"
}

