#!/usr/bin/env bash
# Compares `fabricctl bench` with libfabric's own fi_pingpong (package
# libfabric-bin) on the same provider and message size, on this host.
#
#   tools/fabricctl/bench_vs_fi_pingpong.sh [path/to/fabricctl]
#   env: PROVIDERS="tcp shm"  SIZES="64k 1m"  DURATION=3 (fabricctl, s per op)
#        ITERS=200 (fi_pingpong iterations)  PORT=47611 (fi_pingpong control port)
#
# What the columns mean (they measure different things, hence the ratio):
#   fabricctl write/read  streaming RMA: --batch ops in flight, GB/s = 1e9 B/s
#   fi_pingpong           one message in flight, send/recv; its MB/sec counts the
#                         bytes of both directions (total = 2 x iters x size),
#                         converted here to GB/s (MB/sec / 1000)
#   ratio                 fabricctl write / fi_pingpong
# Needs jq. Both sides run on 127.0.0.1; numbers on a shared 2-vCPU VM are noisy.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
FABRICCTL=${1:-${FABRICCTL:-}}
if [[ -z $FABRICCTL ]]; then
  for b in "$here"/../../build*/tools/fabricctl/fabricctl; do
    [[ -x $b ]] && FABRICCTL=$b && break
  done
fi
[[ -x ${FABRICCTL:-} ]] || { echo "fabricctl binary not found; pass its path" >&2; exit 2; }
command -v fi_pingpong >/dev/null || { echo "fi_pingpong missing (apt-get install libfabric-bin)" >&2; exit 2; }
command -v jq >/dev/null || { echo "jq missing" >&2; exit 2; }

PROVIDERS=${PROVIDERS:-tcp shm}
SIZES=${SIZES:-1m}
DURATION=${DURATION:-3}
ITERS=${ITERS:-200}
PORT=${PORT:-47611}

bytes() {  # 4k -> 4096, 1m -> 1048576
  local s=${1,,}
  case $s in
    *k) echo $(( ${s%k} * 1024 )) ;;
    *m) echo $(( ${s%m} * 1024 * 1024 )) ;;
    *g) echo $(( ${s%g} * 1024 * 1024 * 1024 )) ;;
    *) echo "$s" ;;
  esac
}

pingpong() {  # provider size_bytes -> GB/s (or "fail")
  local out srv
  srv=$(mktemp)
  timeout 120 fi_pingpong -p "$1" -e rdm -S "$2" -I "$ITERS" -B "$PORT" >"$srv" 2>&1 &
  local spid=$!
  sleep 0.5
  out=$(timeout 120 fi_pingpong -p "$1" -e rdm -S "$2" -I "$ITERS" -P "$PORT" 127.0.0.1 2>&1) || true
  wait "$spid" || true
  rm -f "$srv"
  # header: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
  awk 'NR > 1 && NF >= 6 { v = $6 } END { if (v == "") print "fail"; else printf "%.3f\n", v / 1000 }' <<<"$out"
}

printf '%-8s %-6s %-9s %10s %10s %12s %7s\n' provider size opened "write GB/s" "read GB/s" "pingpong GB/s" ratio
for p in $PROVIDERS; do
  for s in $SIZES; do
    n=$(bytes "$s")
    if json=$("$FABRICCTL" bench --provider "$p" --size "$s" --duration "$DURATION" --quiet -o json 2>/dev/null); then
      opened=$(jq -r .provider <<<"$json")
      w=$(jq -r '.write_gbytes_per_s * 1000 | round / 1000' <<<"$json")
      r=$(jq -r '.read_gbytes_per_s * 1000 | round / 1000' <<<"$json")
    else
      opened=fail w=0 r=0
    fi
    pp=$(pingpong "$p" "$n")
    ratio=$(awk -v a="$w" -v b="$pp" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }')
    printf '%-8s %-6s %-9s %10s %10s %12s %7s\n' "$p" "$s" "${opened%%;*}" "$w" "$r" "$pp" "$ratio"
  done
done
