#!/bin/sh
# Regenerates every sample node tree and diffs it against the checked-in copy
# (symlink targets compared as text, not followed).
# usage: sample_nodes_test.sh <gen-sample-nodes binary> <test/testdata/nodes dir>
set -eu
gen=$1
golden=$2
# ~15k small files: tmpfs makes this seconds instead of tens of seconds.
base=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ]; then base=/dev/shm; fi
tmp=$(mktemp -d "$base/fabric-sample-nodes-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$gen" "$tmp"
status=0
for name in $("$gen" --list); do
  if ! diff -r --no-dereference "$tmp/$name" "$golden/$name"; then
    echo "FAIL: $golden/$name differs from the generator output;" \
         "regenerate with: gen-sample-nodes $golden" >&2
    status=1
  fi
done
[ "$status" = 0 ] && echo "all sample trees match the generator"
exit "$status"
