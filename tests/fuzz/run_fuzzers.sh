#!/usr/bin/env bash
# Runs every libFuzzer target built in BUILD_DIR for SECONDS each, from a fresh temporary corpus:
# the committed corpus (tests/fuzz/corpus/<fuzzer>/), the seeds of seeds.sh, and the safetensors
# fixtures when ctest has made them (BUILD_DIR/../build/test-data). FUZZ_KEEP_CORPUS=1 keeps the
# corpus in BUILD_DIR/fuzz-corpus/<fuzzer> instead (`make fuzz-long`; `make fuzz-merge` folds it
# into the committed one). Prints one summary line per
# fuzzer and exits non-zero if any crashed, leaked, hung or ran out of memory; the input that did
# it is kept in BUILD_DIR/fuzz-artifacts and the full log in BUILD_DIR/fuzz-logs.
# FUZZ_JOBS fuzzers run at a time (default: the number of cores): each is single-threaded, so on
# 2 cores two at a time give each fuzzer the same SECONDS of a core in half the wall time.
#
# Usage: tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS
set -euo pipefail
export LC_ALL=C

if [[ $# -ne 2 || ! -d $1 || ! $2 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 BUILD_DIR SECONDS" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
seconds=$2
here=$(cd "$(dirname "$0")" && pwd)

work=$(mktemp -d "${TMPDIR:-/tmp}/latent-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
artifacts=$build_dir/fuzz-artifacts
logs=$build_dir/fuzz-logs
mkdir -p "$artifacts" "$logs"

# shellcheck source=seeds.sh
source "$here/seeds.sh"

shopt -s nullglob
fuzzers=()
for f in "$build_dir"/tests/fuzz/*_fuzzer; do
  if [[ -x $f ]]; then fuzzers+=("$f"); fi
done
if [[ ${#fuzzers[@]} -eq 0 ]]; then
  echo "fuzz: no *_fuzzer executables in $build_dir/tests/fuzz (build with -DLATENT_FUZZ=ON)" >&2
  exit 2
fi

# Runs one fuzzer; writes its summary line (and, on failure, its log's tail) to $work/$name.out
# and exits with the fuzzer's status.
run_one() {
  local fuzzer=$1 name corpus seeds log rc status runs execs cov ft corp summary artifact
  name=$(basename "$fuzzer")
  # The committed corpus and the seeds, in a scratch copy (or, with FUZZ_KEEP_CORPUS=1, in
  # BUILD_DIR/fuzz-corpus/<fuzzer>, kept across runs for `make fuzz-merge`).
  if [[ ${FUZZ_KEEP_CORPUS:-0} == 1 ]]; then
    corpus=$build_dir/fuzz-corpus/$name
  else
    corpus=$work/$name
  fi
  mkdir -p "$corpus"
  if [[ -d $here/corpus/$name ]]; then cp "$here/corpus/$name"/* "$corpus"/ 2>/dev/null || true; fi
  if declare -F "seed_$name" >/dev/null; then "seed_$name" "$corpus"; fi
  seeds=$(find "$corpus" -type f | wc -l)
  local args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$artifacts/$name-")
  if [[ -f $here/$name.dict ]]; then args+=(-dict="$here/$name.dict"); fi
  log=$logs/$name.log
  # UBSan reports and carries on by default; halt so undefined behaviour counts as a crash.
  rc=0
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    "$fuzzer" "${args[@]}" "$corpus" >"$log" 2>&1 || rc=$?

  # libFuzzer's last status line: "#N DONE cov: C ft: F corp: U/S ... exec/s: E rss: R".
  status=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
  runs=$(sed -nE 's/^stat::number_of_executed_units: *([0-9]+)/\1/p' "$log")
  execs=$(sed -nE 's/^stat::average_exec_per_sec: *([0-9]+)/\1/p' "$log")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$status")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$status")
  corp=$(sed -nE 's/.* corp: ([0-9]+).*/\1/p' <<<"$status")
  summary="${runs:-?} runs in ${seconds} s (${execs:-?} exec/s), cov ${cov:-?}, ft ${ft:-?},"
  summary+=" corpus ${seeds} seeds -> ${corp:-?}"
  if [[ $rc -eq 0 ]]; then
    echo "fuzz: $name OK: $summary" >"$work/$name.out"
  else
    artifact=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -n 1 | cut -d' ' -f5 || true)
    { tail -n 40 "$log"
      echo "fuzz: $name FAILED (exit $rc): $summary; input: ${artifact:-none}; log: $log"
    } >"$work/$name.out"
  fi
  return "$rc"
}

jobs_max=${FUZZ_JOBS:-$(nproc)}
pids=()
for fuzzer in "${fuzzers[@]}"; do
  while (( $(jobs -rp | wc -l) >= jobs_max )); do wait -n || true; done
  run_one "$fuzzer" &
  pids+=($!)
done
failed=0
for i in "${!fuzzers[@]}"; do
  wait "${pids[$i]}" || failed=$((failed + 1))
  cat "$work/$(basename "${fuzzers[$i]}").out"
done
exit $((failed > 0))
