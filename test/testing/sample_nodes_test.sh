#!/bin/sh
# Regenerates every sample node tree and checks it: a checked-in tree is
# diffed against its copy (symlink targets compared as text, not followed); a
# tree generated at build time instead (listed in the manifest file) must
# match its manifest line, so a change to its generator shows in review.
# usage: sample_nodes_test.sh <gen-sample-nodes binary> <test/testdata/nodes dir> <manifest file>
#        sample_nodes_test.sh --manifest-line <tree dir>   (prints the line for one tree)
set -eu

# The manifest line of one tree: its name, how many directories, files and
# symlinks it has, and the sha256 over every path sorted (LC_ALL=C), each
# with its content's sha256 (files) or its target (symlinks).
manifest_line() {
  dir=$1
  listing=$(cd "$dir" && {
    find . -type d -printf 'd %p\n'
    find . -type l -printf 'l %p -> %l\n'
    find . -type f -print0 | xargs -0 -r sha256sum | sed -E 's/^([0-9a-f]+)  (.*)$/f \2 \1/'
  } | LC_ALL=C sort)
  dirs=$(printf '%s\n' "$listing" | grep -c '^d ')
  files=$(printf '%s\n' "$listing" | grep -c '^f ')
  links=$(printf '%s\n' "$listing" | grep -c '^l ')
  sum=$(printf '%s\n' "$listing" | sha256sum | cut -d' ' -f1)
  echo "$(basename "$dir") dirs=$dirs files=$files links=$links sha256=$sum"
}

if [ "${1:-}" = "--manifest-line" ]; then
  manifest_line "$2"
  exit 0
fi

gen=$1
golden=$2
manifest=$3
# ~15k small files: tmpfs makes this seconds instead of tens of seconds.
base=/tmp
if [ -d /dev/shm ] && [ -w /dev/shm ]; then base=/dev/shm; fi
tmp=$(mktemp -d "$base/fabric-sample-nodes-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$gen" "$tmp"
status=0
for name in $("$gen" --list); do
  want=$(awk -v name="$name" '$1 == name' "$manifest")
  if [ -n "$want" ]; then
    got=$(manifest_line "$tmp/$name")
    if [ "$got" != "$want" ]; then
      echo "FAIL: $name differs from its line in $manifest:" >&2
      echo "  want: $want" >&2
      echo "  got:  $got" >&2
      echo "  after a deliberate change to the generator, put the 'got' line in the manifest" >&2
      status=1
    fi
  elif ! diff -r --no-dereference "$tmp/$name" "$golden/$name"; then
    echo "FAIL: $golden/$name differs from the generator output;" \
         "regenerate with: gen-sample-nodes $golden $name" >&2
    status=1
  fi
done
[ "$status" = 0 ] && echo "all sample trees match the generator"
exit "$status"
