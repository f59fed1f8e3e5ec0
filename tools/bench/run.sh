#!/usr/bin/env bash
# Builds fabric-bench and runs every performance case, printing one table
# (docs/performance.md explains each row). About 4-5 minutes on 2 cores,
# the 60 s footprint window included (plus the first build).
#
#   tools/bench/run.sh [fabric-bench flags...]
#   env: BUILD=<build dir> (default build-bench)  FOOTPRINT_SECONDS=60
#        SKIP_FABRICCTL=1 (skip case 7)  JOBS=2
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$repo/build-bench}
FOOTPRINT_SECONDS=${FOOTPRINT_SECONDS:-60}

echo "machine: $(nproc) CPU(s), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
# The agent is measured as shipped: FABRIC_STATIC (cmake/FabricStatic.cmake), with its
# dynamically linked twin (fabric-agent-dynamic) in the same footprint window.
if [[ -f $BUILD/build.ninja || -f $BUILD/Makefile ]]; then
  cmake "$BUILD" -DFABRIC_STATIC=ON >/dev/null
else
  cmake -S "$repo" -B "$BUILD" -G Ninja -DFABRIC_STATIC=ON >/dev/null
fi
cmake --build "$BUILD" --target fabric-bench fabric-agent fabric-cni fabricctl -j"${JOBS:-2}" >/dev/null

# Case 7 first (it needs the CPU to itself as much as the others do): its
# table becomes rows of the main one.
extra=$(mktemp /tmp/fabric-bench-extra.XXXXXX)
trap 'rm -f "$extra"' EXIT
if [[ -z ${SKIP_FABRICCTL:-} ]]; then
  echo "case 7: fabricctl bench vs fi_pingpong ..." >&2
  if pp=$("$repo/tools/fabricctl/bench_vs_fi_pingpong.sh" "$BUILD/tools/fabricctl/fabricctl" 2>&1); then
    # provider size opened write read pingpong ratio (header skipped)
    awk 'NR > 1 && NF >= 7 {
           opened = ($3 == "fail") ? "" : $3
           note = ($3 == "fail") ? "fabricctl bench failed" : (($6 == "fail") ? "fi_pingpong failed" : "")
           w = ($3 == "fail") ? "" : $4; r = ($3 == "fail") ? "" : $5
           pp = ($6 == "fail") ? "" : $6
           printf "fabricctl\t%s %s write (fabricctl, %s)\t%s\tGB/s\t%s\tfi_pingpong\t\t%s\n", $1, $2, opened, w, pp, note
           printf "fabricctl\t%s %s read (fabricctl)\t%s\tGB/s\t%s\tfi_pingpong\t\t%s\n", $1, $2, r, pp, note
         }' <<<"$pp" >"$extra"
  else
    printf 'fabricctl\tfabricctl bench vs fi_pingpong\t\tGB/s\t\t\t\t%s\n' \
      "$(tail -1 <<<"$pp" | tr '\t' ' ')" >"$extra"
  fi
  [[ -s $extra ]] || printf 'fabricctl\tfabricctl bench vs fi_pingpong\t\tGB/s\t\t\t\tno output\n' >"$extra"
fi

rc=0
"$BUILD/tools/bench/fabric-bench" --footprint-seconds="$FOOTPRINT_SECONDS" \
  --json="$BUILD/bench.json" --extra-rows="$extra" "$@" || rc=$?
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (other work on the machine inflates every row; ratios less so)"
exit $rc
