#!/usr/bin/env bash
# check-layers.sh: checks every `#include "..."` under agent/, plugin/, tools/
# and cmd/ against the layer table in docs/architecture.md (the ```layers
# block: one line per folder with its layer, its front and what it owns).
#
#   tools/check-layers.sh [--strict] [--graph] [--root DIR] [--table FILE]
#
# It reports, for production files (a `*_test.cc` beside its code is a test
# and is not checked; a fake or test helper in agent/, plugin/ or cmd/ is
# reported as one):
#   up      an include of a folder on a higher layer than the includer's
#   cycle   folders that include each other, directly or through others
#   front   a front including another front
#   test    agent/, plugin/ or cmd/ including test/ or tools/
#   fake    a fake or test helper in a production folder or header
#           (fake_*, *_test_util.*, a `class Fake...` in a production file)
#   table   a folder that has code or is included but is not in the table
# Includes outside agent/ plugin/ tools/ test/ cmd/ (abseil, the generated
# proto headers, ...) are not checked. Exit 0 with warnings by default;
# --strict exits 1 on any violation. 2: the table is missing or malformed.
# --graph also prints every folder-to-folder arrow with its include count.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
table=""
strict=0
graph=0
while [ $# -gt 0 ]; do
  case $1 in
    --strict) strict=1 ;;
    --graph) graph=1 ;;
    --root) root=$(cd "$2" && pwd); shift ;;
    --table) table=$2; shift ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "check-layers: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
table=${table:-$root/docs/architecture.md}
if [ ! -f "$table" ]; then
  echo "check-layers: no layer table: $table not found" >&2
  exit 2
fi

cd "$root"
scanned=()
for d in agent plugin tools cmd; do [ -d "$d" ] && scanned+=("$d"); done
mapfile -t files < <(find "${scanned[@]}" -type f \( -name '*.cc' -o -name '*.h' -o -name '*.c' \) |
                     LC_ALL=C sort)

# One record stream for awk: T (table rows), F (files), I (includes), K (fakes).
# awk prints "<section>\t<line>" records (a cycle's lines joined by \036),
# sorted below so the report reads the same on every machine.
set +e
report=$({
  awk '/^```layers[[:space:]]*$/ { inside = 1; next }
       inside && /^```/ { inside = 0; next }
       inside && NF && $1 !~ /^#/ { print "T\t" FNR "\t" $0 }' "$table"
  for f in "${files[@]}"; do printf 'F\t%s\n' "$f"; done
  if [ ${#files[@]} -gt 0 ]; then
    printf '%s\0' "${files[@]}" |
      xargs -0 grep -nHE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[^"]+"' |
      sed -E 's/^([^:]+):([0-9]+):[^"]*"([^"]+)".*/I\t\1\t\2\t\3/' || true
    printf '%s\0' "${files[@]}" |
      xargs -0 grep -nHE '^[[:space:]]*class[[:space:]]+Fake[A-Za-z0-9_]*' |
      sed -E 's/^([^:]+):([0-9]+):.*/K\t\1\t\2/' || true
  fi
} | LC_ALL=C awk -F'\t' -v strict="$strict" -v graph="$graph" -v table="$table" '
function folder(p,   n, a) { n = split(p, a, "/"); return n >= 3 ? a[1] "/" a[2] : "" }
function base(p,   n, a) { n = split(p, a, "/"); return a[n] }
function is_test(p) { return base(p) ~ /_test\.(cc|h)$/ }
function is_helper(p) { return base(p) ~ /^fake_/ || base(p) ~ /_test_util\.(cc|h)$/ }
function production_area(f) { return f ~ /^(agent|plugin|cmd)\// }
function lname(f) { return (f in layer) ? (layer[f] == "test" ? "test" : "L" layer[f]) : "?" }
function report(key, text) { out[++nout] = key "\t" text; violations++ }
function note_arrow(kind, a, b, where,   k) {
  k = kind SUBSEP a SUBSEP b
  if (k in arrow_at) {
    arrow_at[k] = arrow_at[k] ", " where
  } else {
    arrow_kind[++narrows] = k
    arrow_at[k] = where
  }
  arrow_n[k]++
}
# Sorts names[1..n] in place (insertion sort: a few dozen names).
function sort_names(names, n,   i, j, t) {
  for (i = 2; i <= n; i++) {
    t = names[i]
    for (j = i - 1; j >= 1 && names[j] > t; j--) names[j + 1] = names[j]
    names[j + 1] = t
  }
}
$1 == "T" {
  n = split($3, w, /[ \t]+/)
  if (n < 4 || (w[2] !~ /^[0-9]+$/ && w[2] != "test")) {
    printf "check-layers: %s:%d: want \"folder layer front owns...\", got: %s\n", table, $2, $3 > "/dev/stderr"
    bad = 1; next
  }
  layer[w[1]] = w[2]; front[w[1]] = w[3]; rows++
  next
}
$1 == "F" {
  f = folder($2)
  if (f != "") { has_code[f] = 1 }
  if (production_area($2) && is_helper($2)) {
    report("5 fake", sprintf("fake:  %s: test code in a production folder (its home is test/)", $2))
  }
  next
}
$1 == "K" {
  if (production_area($2) && !is_test($2) && !is_helper($2)) {
    report("5 fake", sprintf("fake:  %s:%s: a fake class in a production file", $2, $3))
  }
  next
}
$1 == "I" {
  file = $2; target = $4
  if (target !~ /^(agent|plugin|tools|test|cmd)\//) next
  if (is_test(file) || is_helper(file)) next
  a = folder(file); b = folder(target)
  if (a == "" || b == "" || a == b) next
  where = file ":" $3
  if (production_area(file) && b ~ /^(test|tools)\//) { note_arrow("test", a, b, where); next }
  included[b] = 1
  if (!(a in layer) || !(b in layer)) next   # reported once per folder below
  if (layer[b] == "test") next               # tools may use the test helpers
  if (layer[a] == "test") next
  note_arrow("edge", a, b, where)
  if (layer[b] + 0 > layer[a] + 0) note_arrow("up", a, b, where)
  if (front[a] != "-" && front[b] != "-" && front[a] != front[b]) note_arrow("front", a, b, where)
  next
}
END {
  if (bad) exit 2
  if (rows == 0) {
    printf "check-layers: %s has no ```layers block\n", table > "/dev/stderr"
    exit 2
  }
  for (f in has_code) if (!(f in layer)) report("6 table", sprintf("table: %s has code but no row in the layer table", f))
  for (f in included) if (!(f in layer)) report("6 table", sprintf("table: %s is included but has no row in the layer table", f))

  nodes = 0; nedges = 0
  for (i = 1; i <= narrows; i++) {
    k = arrow_kind[i]; split(k, p, SUBSEP)
    kind = p[1]; a = p[2]; b = p[3]
    n = arrow_n[k]; inc = n == 1 ? "include" : "includes"
    if (kind == "edge") {
      nedges++; total_includes += n
      edge[a SUBSEP b] = 1
      if (!(a in node_id)) { node_id[a] = ++nodes; node[nodes] = a }
      if (!(b in node_id)) { node_id[b] = ++nodes; node[nodes] = b }
      if (graph) graph_out[++ngraph] = sprintf("%s (%s) -> %s (%s): %d %s", a, lname(a), b, lname(b), n, inc)
    } else if (kind == "up") {
      report("1 up", sprintf("up:    %s (%s) -> %s (%s): %d %s at %s", a, lname(a), b, lname(b), n, inc, arrow_at[k]))
    } else if (kind == "front") {
      report("3 front", sprintf("front: %s (front %s) -> %s (front %s): %d %s at %s", a, front[a], b, front[b], n, inc, arrow_at[k]))
    } else if (kind == "test") {
      report("4 test", sprintf("test:  %s -> %s: %d %s at %s", a, b, n, inc, arrow_at[k]))
    }
  }
  # Folder cycles: the strongly connected components of the folder graph
  # (transitive closure; a few dozen folders).
  for (i = 1; i <= nodes; i++) for (j = 1; j <= nodes; j++) reach[i, j] = ((node[i] SUBSEP node[j]) in edge)
  for (m = 1; m <= nodes; m++) for (i = 1; i <= nodes; i++) if (reach[i, m]) for (j = 1; j <= nodes; j++) if (reach[m, j]) reach[i, j] = 1
  for (i = 1; i <= nodes; i++) {
    if (done[i] || !reach[i, i]) continue
    nm = 0
    for (j = 1; j <= nodes; j++) {
      if (reach[i, j] && reach[j, i]) { done[j] = 1; names[++nm] = node[j] }
    }
    sort_names(names, nm)
    members = ""; arrows = ""
    for (j = 1; j <= nm; j++) members = members (j == 1 ? "" : ", ") names[j]
    for (j = 1; j <= nm; j++) for (l = 1; l <= nm; l++) {
      if ((names[j] SUBSEP names[l]) in edge) {
        arrows = arrows sprintf("\036         %s -> %s at %s", names[j], names[l],
                                arrow_at["edge" SUBSEP names[j] SUBSEP names[l]])
      }
    }
    report("2 cycle", sprintf("cycle: {%s}%s", members, arrows))
  }

  for (i = 1; i <= ngraph; i++) print "0 graph\t" graph_out[i]
  for (i = 1; i <= nout; i++) print out[i]
  printf "9 summary\tcheck-layers: %d folders in the table, %d arrows between them (%d includes; tests not counted), %d violation%s%s\n",
    rows, nedges, total_includes, violations, violations == 1 ? "" : "s",
    violations == 0 ? "" : (strict ? "" : " (warnings; --strict fails on them)")
  exit violations > 0 && strict ? 1 : 0
}')
status=$?
set -e
if [ -n "$report" ]; then
  printf '%s\n' "$report" | LC_ALL=C sort -t$'\t' -k1,1 -k2 | cut -f2- | tr '\036' '\n'
fi
exit "$status"
