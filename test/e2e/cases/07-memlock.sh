#!/bin/bash
# 07-memlock: RDMA memory registration is charged to RLIMIT_MEMLOCK. Root in
# the VM has CAP_SYS_RESOURCE (the CI host's container may not), so a runc
# container whose spec raises RLIMIT_MEMLOCK sees the raised limit; and our
# OCI hook (fabric-memlock-hook) raises it too, via its own runc test script.
# shellcheck source=../lib/case-lib.sh
source "$E2E_LIB/case-lib.sh"
command -v runc >/dev/null || skip "runc not installed"
capeff=$(awk '/^CapEff:/{print $2}' /proc/self/status)
(( (16#$capeff >> 24) & 1 )) || fail "root in the VM lacks CAP_SYS_RESOURCE (CapEff $capeff)"
B=$TMP/bundle
make_bundle "$B" || fail "runc spec failed"
want=$((1 << 30))
script='awk "/Max locked memory/ {print \$4, \$5}" /proc/self/limits'
# runc (and so the container) inherits a low 64 KiB limit; the spec must win.
out=$(ulimit -l 64 && runc_run "$B" e2e-memlock \
  '.process.args=["/bin/sh","-c",$s] | .process.rlimits += [{type:"RLIMIT_MEMLOCK",soft:$w,hard:$w}]' \
  --arg s "$script" --argjson w "$want" 2>&1)
rc=$?
log "spec rlimit $want, inherited 65536: exit $rc, container sees '$out'"
((rc == 0)) || fail "runc with RLIMIT_MEMLOCK in the spec: exit $rc: $out"
[[ $out == "$want $want" ]] || fail "container memlock '$out', want '$want $want'"
[[ -x $MEMLOCK_HOOK ]] || pass "spec rlimit raised to 1 GiB; fabric-memlock-hook not built yet"
HOOK_TEST=$E2E_SRC_DIR/tools/oci-hook/runc-memlock-test.sh
[[ -x $HOOK_TEST ]] || fail "$HOOK_TEST missing"
# Only the cases that need CAP_SYS_RESOURCE (plus a control); the host-side
# runc_memlock_test covers the rest.
"$HOOK_TEST" "$MEMLOCK_HOOK" no-hook unlimited > "$OUT/hook-test.log" 2>&1
hrc=$?
cat "$OUT/hook-test.log"
((hrc == 0)) || fail "runc-memlock-test.sh: $(grep -E '^FAIL' "$OUT/hook-test.log" | head -n 2 | tr '\n' ' ')"
grep -q '^PASS unlimited' "$OUT/hook-test.log" || fail "hook 'unlimited' case did not pass (needs CAP_SYS_RESOURCE)"
pass "spec rlimit 1 GiB; hook: $(grep -c '^PASS' "$OUT/hook-test.log") runc cases pass"
