#!/usr/bin/env bash
# The hostile tests (test/hostile/*_test.cc) against a build dir's real
# fabric-agent: one PASS/FAIL line per case with its figures, then
# "N passed, N failed". Usage: test/hostile/run.sh BUILD_DIR [LOG_DIR]
# Env (to shorten a run by hand): FABRIC_HOSTILE_RESTARTS (100),
# FABRIC_HOSTILE_FLAP_SECONDS (60), FABRIC_HOSTILE_SIGHUP_ROUNDS (20).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [LOG_DIR]}" && pwd)
logs=${2:-$build/hostile-logs}
mkdir -p "$logs"
bin=$build/test/hostile/hostile_test
if [ ! -x "$bin" ] || [ ! -x "$build/agent/daemon/fabric-agent" ]; then
  echo "FAIL hostile: $bin or fabric-agent not built"
  echo "0 passed, 1 failed"
  exit 1
fi
passed=0 failed=0
for c in KubeletRestartStormWithConcurrentAllocates \
         FlappingSysfsKeepsServingWithFlatMemoryAndThreads \
         SighupStormNeverReplacesAGoodConfigWithABadOne; do
  log=$logs/$c.log
  start=$(date +%s)
  FABRIC_TESTDATA=$root/test/testdata FABRIC_BINARY_DIR=$build \
    timeout 300 "$bin" --gtest_filter="Hostile.$c" > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 0 ]; then
    echo "PASS $c (${secs} s)"; passed=$((passed + 1))
  else
    echo "FAIL $c (${secs} s, exit $rc, log $log)"; failed=$((failed + 1))
    grep -a -A6 'Failure$' "$log" | cut -c1-300 | head -40 | sed 's/^/    /'
  fi
  # The figures the test printed (not the agent's or the simulator's log lines).
  grep -a -v -E '^(20[0-9]{2}-|\[|Running main|Note: Google)' "$log" | grep -a -v '^$' |
    grep -a -v -E 'Failure$|^  (Actual|Expected|Which|Value)' | cut -c1-200 | head -20 | sed 's/^/    /'
done
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
