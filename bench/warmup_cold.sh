#!/usr/bin/env bash
# Cold `warmkey warmup` figures: for each job count, REPEAT runs, each in a new process on a new
# empty disk cache with the driver's compute cache off (CUDA_CACHE_DISABLE=1 and a new empty
# CUDA_CACHE_PATH), so every key is compiled by NVRTC. Prints one row per job count (the median
# run by wall time) with wall and CPU (user + sys) seconds, and the host, load and date.
#
#   bench/warmup_cold.sh WARMKEY [CONFIG] [JOBS...]
#   e.g. bench/warmup_cold.sh build/release/bin/warmkey dsv4-flash 2 4 8 16
#
# Environment: REPEAT (default 3), WARMKEY_WARMUP_FLAGS (extra flags, e.g. "--batch 16"),
# NVRTC_BREAKDOWN (path of bench/nvrtc_breakdown: also prints its per-kernel table, the same with
# identical-code folding (--share: what it would save; warmups do not use it), and the one-by-one
# cost of the programs the largest job count makes, with their ideal finish time).
# On a machine without a GPU the warmup compiles for sm_90 (warmup/arch.h); WARMKEY_ARCH overrides.
set -euo pipefail

warmkey=${1:?usage: warmup_cold.sh WARMKEY [CONFIG] [JOBS...]}
config=${2:-dsv4-flash}
shift $(($# >= 2 ? 2 : 1))
jobs_list=("$@")
[ ${#jobs_list[@]} -gt 0 ] || jobs_list=(2 4 8 16)
repeat=${REPEAT:-3}
read -r -a extra <<< "${WARMKEY_WARMUP_FLAGS:-}"

work=$(mktemp -d "${TMPDIR:-/tmp}/warmup-cold-XXXXXX")
trap 'rm -rf "$work"' EXIT

# One JSON field of the summary (a number), and one string field.
field() { sed -n "s/^  \"$1\": \\([0-9.]*\\).*/\\1/p" "$2" | head -n 1; }
sfield() { sed -n "s/^  \"$1\": \"\\([^\"]*\\)\".*/\\1/p" "$2" | head -n 1; }
# One point of the summary's timeline (seconds since the process started), "-" when null.
tfield() {
  local v
  v=$(sed -n "s/^    \"$1\": \\([0-9.]*\\).*/\\1/p" "$2" | head -n 1)
  echo "${v:--}"
}

echo "# cold warmup of config '$config' ($("$warmkey" --version 2>/dev/null || echo warmkey))"
echo "# host: $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'); load before: $(cut -d' ' -f1-3 /proc/loadavg); repeat $repeat, median by wall"
echo "# CUDA_CACHE_DISABLE=1, fresh CUDA_CACHE_PATH and --cache-dir per run; flags: ${extra[*]:-(none)}"
# warmup_s: the summary's own seconds (plan to loaded modules); arch: how the device's arch was
# learnt (nvml: CUDA started beside the compiles; cuda: cuInit first; none: no device).
# began .. summary: the median run's timeline, seconds since the process started (the summary's
# "timeline"): the warmup began (after exec, libraries, the arch and the plan), every key settled,
# the context was ready ("-": none), the modules loaded, the summary printed; the rest of wall_s
# is the process's teardown.
printf '%5s %8s %8s %9s %9s %6s %9s %9s %6s %6s %5s %6s %7s %7s %6s %7s %s\n' jobs wall_s cpu_s warmup_s ms/key keys \
  compiled programs batch failed arch began settled context loaded summary runs_wall
for jobs in "${jobs_list[@]}"; do
  rows=()
  for ((r = 0; r < repeat; ++r)); do
    run="$work/j$jobs-r$r"
    mkdir -p "$run/cache" "$run/cuda-cache"
    # bash's `time` reports the child's wall, user and sys seconds.
    TIMEFORMAT='%R %U %S'
    { time CUDA_CACHE_DISABLE=1 CUDA_CACHE_PATH="$run/cuda-cache" WARMKEY_CACHE_DIR= \
        "$warmkey" warmup --config "$config" --jobs "$jobs" --cache-dir "$run/cache" --json --no-progress \
        "${extra[@]}" > "$run/out.json" 2> "$run/err.txt"; } 2> "$run/time.txt" || {
      echo "warmup failed (jobs $jobs):" >&2
      cat "$run/err.txt" "$run/out.json" >&2
      exit 1
    }
    read -r wall user sys < "$run/time.txt"
    cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')
    rows+=("$wall $cpu $(field keys "$run/out.json") $(field compiled "$run/out.json") $(field programs "$run/out.json") $(field batch "$run/out.json") $(field failed "$run/out.json") $(field seconds "$run/out.json") $(sfield device_arch_from "$run/out.json") $(tfield began "$run/out.json") $(tfield settled "$run/out.json") $(tfield context_ready "$run/out.json") $(tfield loaded "$run/out.json") $(tfield summary "$run/out.json")")
    rm -rf "$run/cache" "$run/cuda-cache"
  done
  walls=$(printf '%s\n' "${rows[@]}" | awk '{ printf "%s%s", sep, $1; sep = "," }')
  median=$(printf '%s\n' "${rows[@]}" | sort -n -k1,1 | sed -n "$(((repeat + 1) / 2))p")
  read -r wall cpu keys compiled programs batch failed warm_s arch_from t_began t_settled t_context t_loaded t_summary <<< "$median"
  per_key=$(awk -v w="$wall" -v k="$compiled" 'BEGIN { printf "%.1f", (k > 0 ? 1000 * w / k : 0) }')
  printf '%5s %8s %8s %9.3f %9s %6s %9s %9s %6s %6s %5s %6s %7s %7s %6s %7s %s\n' "$jobs" "$wall" "$cpu" "$warm_s" \
    "$per_key" "$keys" "$compiled" "$programs" "$batch" "$failed" "${arch_from:--}" "$t_began" "$t_settled" \
    "$t_context" "$t_loaded" "$t_summary" "$walls"
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"

if [ -n "${NVRTC_BREAKDOWN:-}" ]; then
  echo
  echo "# per kernel, one program per kernel, one thread (nvrtc_breakdown)"
  CUDA_CACHE_DISABLE=1 CUDA_CACHE_PATH="$work/bd" "$NVRTC_BREAKDOWN" --config "$config"
  echo
  echo "# the same with identical-code folding (nvrtc_breakdown --share; not used by warmups)"
  CUDA_CACHE_DISABLE=1 CUDA_CACHE_PATH="$work/bd" "$NVRTC_BREAKDOWN" --config "$config" --share
  # The programs of the largest job count, each compiled alone: when idle workers taking them in
  # order would finish. A measured wall time far above it means the threads slow each other.
  last=${jobs_list[${#jobs_list[@]}-1]}
  echo
  echo "# programs of a warmup with $last jobs, compiled one by one (nvrtc_breakdown --schedule $last)"
  CUDA_CACHE_DISABLE=1 CUDA_CACHE_PATH="$work/bd" "$NVRTC_BREAKDOWN" --config "$config" --schedule "$last"
  echo "# load after the breakdown: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
