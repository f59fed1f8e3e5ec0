#!/usr/bin/env bash
# Tests tools/check-layers.sh on fixture trees written here: one violation of
# each kind is reported and --strict fails on them, what the rules exempt is
# not reported, a clean tree passes --strict, a malformed table is an error;
# then the repository's own table is read without error.
# usage: check-layers_test.sh <tools/check-layers.sh> [<repo root>]
set -uo pipefail
check=$1
repo=${2:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/check-layers-test-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# put <root> <path> <line>...: writes a file, one argument per line.
put() {
  local root=$1 path=$2
  shift 2
  mkdir -p "$(dirname "$root/$path")"
  printf '%s\n' "$@" > "$root/$path"
}

table() {  # <root> <extra rows...>
  local root=$1
  shift
  put "$root" docs/architecture.md '# Fixture' '' '```layers' \
    '# folder        layer front owns' \
    'agent/base      0     -     the vocabulary' \
    'agent/low       1     -     a reader' \
    'agent/high      2     -     the state' \
    'agent/cyc_a     1     -     one third of a cycle' \
    'agent/cyc_b     1     -     one third of a cycle' \
    'agent/cyc_c     1     -     one third of a cycle' \
    'agent/front_x   3     fx    front x' \
    'agent/front_x2  3     fx    the rest of front x' \
    'agent/front_y   3     fy    front y' \
    'agent/daemon    4     -     wiring' \
    'tools/tool      5     -     a tool' \
    'test/helpers    test  -     test helpers' \
    "$@" '```'
}

# The clean tree: every arrow points down or stays within its front.
clean=$tmp/clean
table "$clean"
put "$clean" agent/base/base.h '#pragma once' '#include "absl/status/status.h"'
put "$clean" agent/low/low.h '#include "agent/base/base.h"'
put "$clean" agent/high/high.cc '#include "agent/low/low.h"' '#include "agent/base/base.h"'
put "$clean" agent/cyc_a/a.h '#include "agent/cyc_b/b.h"'
put "$clean" agent/cyc_b/b.h '#include "agent/cyc_c/c.h"'
put "$clean" agent/cyc_c/c.h '#include "agent/base/base.h"'
put "$clean" agent/front_x/x.cc '#include "agent/front_x2/x2.h"' '#include "agent/high/high.h"'
put "$clean" agent/front_x2/x2.h '#include "agent/low/low.h"'
put "$clean" agent/front_y/y.h '#include "agent/base/base.h"'
put "$clean" agent/daemon/main.cc '#include "agent/front_x/x.h"' '#include "agent/front_y/y.h"'
# Exempt: a test beside its code may include anything; tools may use test helpers.
put "$clean" agent/low/low_test.cc '#include "agent/high/high.h"' '#include "test/helpers/h.h"' \
  'class FakeForThisTest {};'
put "$clean" tools/tool/t.cc '#include "agent/daemon/main.h"' '#include "test/helpers/h.h"'

out=$("$check" --root "$clean" --strict 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "clean tree: --strict exited $rc, want 0; output:"$'\n'"$out"
grep -q '0 violations' <<<"$out" || fail "clean tree: no '0 violations' in:"$'\n'"$out"
grep -q '12 folders in the table, 13 arrows between them' <<<"$out" ||
  fail "clean tree: want 12 folders and 13 arrows in:"$'\n'"$out"
graph=$("$check" --root "$clean" --graph 2>&1)
grep -qx 'agent/front_x (L3) -> agent/high (L2): 1 include' <<<"$graph" ||
  fail "--graph: no arrow front_x -> high in:"$'\n'"$graph"

# The bad tree: the clean one plus one violation of each kind.
bad=$tmp/bad
cp -a "$clean" "$bad"
put "$bad" agent/low/up.h '#include "agent/high/high.h"'                  # up
put "$bad" agent/cyc_c/c.cc '#include "agent/cyc_a/a.h"'                  # cycle a->b->c->a
put "$bad" agent/front_x/cross.h '#include "agent/front_y/y.h"'           # front
put "$bad" agent/high/uses_helpers.cc '#  include "test/helpers/h.h"'         # test
put "$bad" agent/high/uses_tool.cc '#include "tools/tool/t.h"'             # test (tools/)
put "$bad" agent/low/fake_reader.h '#include "agent/low/low.h"'           # fake (file)
put "$bad" agent/base/sink.h 'class Sink {};' 'class FakeSink : public Sink {};'  # fake (class)
put "$bad" agent/unlisted/u.h '#include "agent/base/base.h"'              # table

out=$("$check" --root "$bad" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "bad tree: exited $rc without --strict, want 0 (warnings); output:"$'\n'"$out"
expect() {  # <description> <fixed string>
  grep -qF -- "$2" <<<"$out" || fail "bad tree: $1 not reported (want a line with '$2')"
}
expect "the up arrow" 'up:    agent/low (L1) -> agent/high (L2): 1 include at agent/low/up.h:1'
expect "the cycle" 'cycle: {agent/cyc_a, agent/cyc_b, agent/cyc_c}'
expect "the cycle's closing arrow" 'agent/cyc_c -> agent/cyc_a at agent/cyc_c/c.cc:1'
expect "the front including another front" \
  'front: agent/front_x (front fx) -> agent/front_y (front fy): 1 include at agent/front_x/cross.h:1'
expect "agent/ including test/" 'test:  agent/high -> test/helpers: 1 include at agent/high/uses_helpers.cc:1'
expect "agent/ including tools/" 'test:  agent/high -> tools/tool: 1 include at agent/high/uses_tool.cc:1'
expect "the fake file" 'fake:  agent/low/fake_reader.h: test code in a production folder'
expect "the fake class" 'fake:  agent/base/sink.h:2: a fake class in a production file'
expect "the folder with no row" 'table: agent/unlisted has code but no row in the layer table'
expect "the count" '9 violations (warnings; --strict fails on them)'
if grep -qE 'low_test|tools/tool/t\.cc|front_x2' <<<"$out"; then
  fail "bad tree: an exempt include was reported:"$'\n'"$out"
fi
"$check" --root "$bad" --strict > /dev/null 2>&1
rc=$?
[ "$rc" = 1 ] || fail "bad tree: --strict exited $rc, want 1"

# A row without its layer or its one line on what the folder owns is an error.
broken=$tmp/broken
cp -a "$clean" "$broken"
table "$broken" 'agent/extra     1'
"$check" --root "$broken" > "$tmp/broken.out" 2>&1
rc=$?
[ "$rc" = 2 ] || fail "malformed row: exited $rc, want 2"
grep -q 'want "folder layer front owns' "$tmp/broken.out" || fail "malformed row: no message naming it"
rm "$broken/docs/architecture.md"
"$check" --root "$broken" > /dev/null 2>&1
rc=$?
[ "$rc" = 2 ] || fail "missing table: exited $rc, want 2"

# The repository's own table parses and every folder with code has a row.
out=$("$check" --root "$repo" 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "repository: exited $rc, want 0 (warnings only); output:"$'\n'"$out"
if grep -q '^table:' <<<"$out"; then
  fail "repository: folders without a row in docs/architecture.md:"$'\n'"$(grep '^table:' <<<"$out")"
fi

if [ "$failures" = 0 ]; then
  echo "check-layers: every kind of violation reported, --strict fails on them, clean tree passes"
  exit 0
fi
exit 1
