#!/usr/bin/env bash
# Rebuilds the committed seed corpora, tests/fuzz/corpus/<fuzzer>/: the inputs of the committed
# corpus, the seeds of seeds.sh and what `make fuzz-long` kept in BUILD_DIR/fuzz-corpus/<fuzzer>,
# minimised by libFuzzer's -merge=1 (only inputs that add coverage stay) when the fuzzer is built
# in BUILD_DIR, else deduplicated by content. Files are named by their SHA-1, as libFuzzer names
# them; inputs over 64 KiB are left out to keep the repository small.
#
# Usage: tests/fuzz/merge_corpus.sh BUILD_DIR   (make fuzz-merge)
set -euo pipefail
export LC_ALL=C
if [[ $# -ne 1 ]]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
mkdir -p "$1"
build_dir=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=seeds.sh
source "$here/seeds.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/latent-merge.XXXXXX")
trap 'rm -rf "$work"' EXIT

names=()
for f in "$here"/*_fuzzer.cc; do names+=("$(basename "$f" .cc)"); done
for name in "${names[@]}"; do
  candidates=$work/$name-in
  merged=$work/$name-out
  mkdir -p "$candidates" "$merged"
  if [[ -d $here/corpus/$name ]]; then cp "$here/corpus/$name"/* "$candidates"/ 2>/dev/null || true; fi
  if declare -F "seed_$name" >/dev/null; then "seed_$name" "$candidates"; fi
  if [[ -d $build_dir/fuzz-corpus/$name ]]; then
    cp "$build_dir/fuzz-corpus/$name"/* "$candidates"/ 2>/dev/null || true
  fi
  find "$candidates" -type f -size +64k -delete
  fuzzer=$build_dir/tests/fuzz/$name
  if [[ -x $fuzzer ]]; then
    "$fuzzer" -merge=1 -timeout=10 -rss_limit_mb=2048 "$merged" "$candidates" >"$work/$name.log" 2>&1 || {
      tail -n 20 "$work/$name.log" >&2
      echo "merge: $name: libFuzzer -merge failed" >&2
      exit 1
    }
    how="minimised by coverage"
  else
    cp "$candidates"/* "$merged"/ 2>/dev/null || true
    how="deduplicated (no fuzzer built in $build_dir)"
  fi
  out=$here/corpus/$name
  rm -rf "$out"
  mkdir -p "$out"
  for f in "$merged"/*; do
    [[ -f $f ]] || continue
    cp "$f" "$out/$(sha1sum "$f" | cut -c1-40)"
  done
  echo "merge: $name: $(find "$candidates" -type f | wc -l) inputs -> $(ls "$out" | wc -l) ($how)," \
    "$(du -sh "$out" | cut -f1)"
done
