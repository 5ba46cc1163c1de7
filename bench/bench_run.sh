#!/usr/bin/env bash
# First vs second `warmkey run` on one machine: a cold run on an empty disk cache, then a warm run
# on the cache the first one filled. Prints one Markdown table row per config for docs/PERFORMANCE.md.
#   bench/bench_run.sh [WARMKEY_BINARY] [CONFIG...]    (default: build/release/bin/warmkey dsv4-flash)
# Extra flags for both runs go in $WARMKEY_RUN_FLAGS (for example "--compile-only --jobs 2").
set -euo pipefail
warmkey="${1:-build/release/bin/warmkey}"
shift || true
configs=("$@")
(( ${#configs[@]} )) || configs=(dsv4-flash)
work="$(mktemp -d "${TMPDIR:-/tmp}/warmkey-bench-run.XXXXXX")"
trap 'rm -rf "$work"' EXIT

# Wall seconds of one run, its JSON report in $2.
timed_run() {
  local config="$1" out="$2" start end
  start=$(date +%s.%N)
  # shellcheck disable=SC2086  # WARMKEY_RUN_FLAGS is a list of flags
  "$warmkey" run --config "$config" --cache-dir "$work/cache-$config" --no-progress --json \
    ${WARMKEY_RUN_FLAGS:-} >"$out" 2>"$out.err" || { cat "$out.err" >&2; return 1; }
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}

field() { python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(eval('j' + sys.argv[2]))" "$1" "$2"; }

echo "| config | keys | first run: compiled | first run (s) | second run: compiled | second run: disk hits | second run (s) | second / first |"
echo "|---|---|---|---|---|---|---|---|"
for config in "${configs[@]}"; do
  first=$(timed_run "$config" "$work/first.json")
  second=$(timed_run "$config" "$work/second.json")
  printf '| %s | %s | %s | %.1f | %s | %s | %.2f | %.1f%% |\n' "$config" \
    "$(field "$work/first.json" "['warmup']['keys']")" "$(field "$work/first.json" "['warmup']['compiled']")" "$first" \
    "$(field "$work/second.json" "['warmup']['compiled']")" "$(field "$work/second.json" "['warmup']['disk_hits']")" \
    "$second" "$(echo "100 * $second / $first" | bc -l)"
done
