#!/usr/bin/env bash
# Fails (and prints them) if a sanitizer build wrote any report into DIR: the tests run the
# sanitized binaries with log_path=DIR/report, so a report from a process that a test killed, or
# whose exit code a test did not look at, still fails `make test-asan` / `make test-tsan`.
#
# Usage: tests/sanitizer_reports.sh DIR
set -euo pipefail
dir=$1
shopt -s nullglob
reports=("$dir"/report*)
if [[ ${#reports[@]} -eq 0 ]]; then
  echo "sanitizers: no reports in $dir"
  exit 0
fi
for r in "${reports[@]}"; do
  echo "==== $r" >&2
  head -n 80 "$r" >&2
done
echo "sanitizers: ${#reports[@]} report(s) in $dir" >&2
exit 1
