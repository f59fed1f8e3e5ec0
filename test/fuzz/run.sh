#!/usr/bin/env bash
# Runs every libFuzzer target of a FABRIC_FUZZ=ON build for a bounded time.
#   test/fuzz/run.sh FUZZ_BUILD_DIR [WORK_DIR]
# Each target <t> runs for FUZZ_SECONDS (default 20) on a COPY of
# test/fuzz/corpus/<t>/ (inputs it finds stay in WORK_DIR, the tree's seeds do
# not grow), with <t>.dict when present, JOBS targets at a time. A crash, a
# sanitizer report, a broken invariant (FUZZ_CHECK), a leak, a timeout or an
# out-of-memory fails the run; the failing input is kept as
# WORK_DIR/<t>/crash-* (or leak-*, timeout-*, oom-*) and the end of the log is
# printed. Reproduce with: FUZZ_BUILD_DIR/test/fuzz/<t> WORK_DIR/<t>/crash-...
set -uo pipefail
build=${1:?usage: run.sh FUZZ_BUILD_DIR [WORK_DIR]}
build=$(cd "$build" && pwd)
work=${2:-$build/fuzz-run}
secs=${FUZZ_SECONDS:-20}
jobs=${JOBS:-$(nproc)}
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"
work=$(cd "$work" && pwd)

targets=()
missing=0
for dir in "$src"/corpus/*/; do
  t=$(basename "$dir")
  if [ ! -x "$build/test/fuzz/$t" ]; then
    echo "fuzz: $t has a seed corpus but $build/test/fuzz/$t was not built"
    missing=1
    continue
  fi
  targets+=("$t")
done
for bin in "$build"/test/fuzz/*_fuzzer; do
  [ -x "$bin" ] || continue
  t=$(basename "$bin")
  if [ ! -d "$src/corpus/$t" ]; then
    echo "fuzz: $t is built but has no seed corpus (test/fuzz/corpus/$t/)"
    missing=1
  fi
done

run_one() {  # target
  local t=$1 dir=$work/$1 dict=()
  rm -rf "$dir"
  mkdir -p "$dir/corpus"
  cp -r "$src/corpus/$t/." "$dir/corpus/"
  [ -f "$src/$t.dict" ] && dict=(-dict="$src/$t.dict")
  (cd "$dir" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/test/fuzz/$t" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$dir/" -print_final_stats=1 "${dict[@]}" corpus > "$dir/log" 2>&1)
  echo $? > "$dir/rc"
}

running=0
for t in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
wait

failed=()
for t in "${targets[@]}"; do
  rc=$(cat "$work/$t/rc" 2>/dev/null || echo 1)
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/$t/log" | tail -1)
  if [ "$rc" = 0 ]; then
    echo "fuzz: $t: ok, ${runs:-?} inputs in ${secs} s (${cov:-cov: ?})"
  else
    echo "fuzz: $t: FAILED (exit $rc); input kept: $(ls "$work/$t" | grep -E '^(crash|leak|timeout|oom|slow-unit)-' | tr '\n' ' ')"
    grep -v '^#\|^INFO\|NEW_FUNC\|^\s*"' "$work/$t/log" | tail -60
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -ne 0 ] || [ "$missing" -ne 0 ]; then
  echo "fuzz: failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${secs} s each, no crash"
