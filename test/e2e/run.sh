#!/bin/bash
# Real-kernel end-to-end suite: boots Debian's kernel (linux-image-amd64, which
# ships rdma_rxe) in QEMU with this host's / as a read-only 9p root, creates a
# soft-RoCE device rxe0 and runs test/e2e/cases/*.sh inside against the
# binaries in BUILD_DIR. All cases share one boot (TCG boot+poweroff ~8 s).
#
# Usage: test/e2e/run.sh BUILD_DIR [OUTDIR]
#   Prints "e2e: PASS|FAIL|SKIP <case>[: why]" per case and a closing
#   "N passed, N failed, N skipped". Exit 1 on any failure. When the machine
#   cannot boot the VM it prints one "e2e: SKIP <reason>" line and exits 0.
# Env: E2E_CASES="01 03" (run a subset by prefix), E2E_WORK (initramfs cache,
#   default /var/tmp/fabric-e2e), E2E_KVM=auto|0|1, E2E_CASE_TIMEOUT (s, 240),
#   E2E_VM_TIMEOUT (s, 2400: a guard against a hung VM, not a budget), E2E_VERBOSE=1 (print every case log).
# Install the host packages with test/e2e/setup.sh.
# The VM recipe (9p root + overlay + switch_root, TCG on PVM hosts) follows the
# RDMA testbed notes the project was started from.
set -uo pipefail
HERE=$(dirname "$(realpath "$0")")
BUILD_DIR=$(realpath -m "${1:?usage: run.sh BUILD_DIR [OUTDIR]}")
OUTDIR=$(realpath -m "${2:-$(mktemp -d /tmp/fabric-e2e.XXXXXX)}")
WORK=${E2E_WORK:-/var/tmp/fabric-e2e}

skip_all() { echo "e2e: SKIP $*"; exit 0; }

# --- can this machine boot the VM? ---
[[ $(uname -m) == x86_64 ]] || skip_all "not an x86_64 host"
[[ $(id -u) == 0 ]] || skip_all "needs root (9p export of /, device cgroups, runc)"
command -v qemu-system-x86_64 >/dev/null || skip_all "qemu-system-x86_64 not installed (run test/e2e/setup.sh)"
KVER=${E2E_KVER:-$(for m in /lib/modules/*-amd64; do [[ -d $m ]] && echo "${m##*/}"; done | sort -V | tail -1)}
[[ -n $KVER && -f /boot/vmlinuz-$KVER ]] || skip_all "no Debian kernel (linux-image-amd64) in /boot (run test/e2e/setup.sh)"
find "/lib/modules/$KVER" -name 'rdma_rxe.ko*' | grep -q . || skip_all "kernel $KVER has no rdma_rxe module"
for tool in busybox cpio modprobe rdma jq runc ibv_rc_pingpong fi_info; do
  command -v "$tool" >/dev/null || skip_all "$tool not installed (run test/e2e/setup.sh)"
done
[[ -x /bin/busybox ]] || skip_all "/bin/busybox missing (busybox-static)"
[[ -d $BUILD_DIR ]] || { echo "e2e: FAIL setup: build dir $BUILD_DIR does not exist"; echo "0 passed, 1 failed"; exit 1; }

# --- initramfs, cached per kernel version and recipe ---
mkdir -p "$WORK" "$OUTDIR"
recipe=$(md5sum "$HERE/lib/build-initramfs.sh" | cut -c1-8)
INITRD=$WORK/initramfs-$KVER-$recipe.cpio.gz
if [[ ! -f $INITRD ]]; then
  t0=$(date +%s.%N)
  if ! "$HERE/lib/build-initramfs.sh" "$KVER" "$INITRD" > "$OUTDIR/initramfs.log" 2>&1; then
    echo "e2e: FAIL setup: initramfs build failed"; cat "$OUTDIR/initramfs.log"
    echo "0 passed, 1 failed"; exit 1
  fi
  echo "e2e: built $INITRD in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')s"
fi

# --- cases ---
cases=()
for c in "$HERE"/cases/[0-9][0-9]-*.sh; do
  n=$(basename "$c")
  if [[ -n ${E2E_CASES:-} ]]; then
    sel=0
    for p in $E2E_CASES; do [[ $n == "$p"* ]] && sel=1; done
    ((sel)) || continue
  fi
  cases+=("$c")
done
((${#cases[@]})) || skip_all "no case selected"

# --- one boot for all cases ---
VMOUT=$OUTDIR/vm
rm -rf "$VMOUT"; mkdir -p "$VMOUT"
# The real-kubelet cases (a "# e2e: needs the real kubelet" line: 09, 10): their Pod images are built
# here on the host (a second; over a minute under TCG), and the cached kubelet's path is passed on
# (the VM sees the host's / but not its environment).
if grep -qx '# e2e: needs the real kubelet' "${cases[@]}"; then
  "$HERE/lib/rk-images.sh" "$VMOUT/rk-images" > "$OUTDIR/rk-images.log" 2>&1 ||
    echo "e2e: note: real-kubelet images not built (see $OUTDIR/rk-images.log); those cases will fail"
  echo "${FABRIC_TEST_CACHE:-/var/cache/fabric-test}/kubelet/kubelet-v1.20.2" > "$VMOUT/rk-images/kubelet-path"
fi
# The cases that register the VM's kubelet with a real API server ("# e2e: needs the API server"): the
# control plane runs on the host for the whole boot (lib/host-api.sh); the VM dials it at 10.0.2.2.
if grep -qx '# e2e: needs the API server' "${cases[@]}"; then
  mkdir -p "$VMOUT/api"
  r=$("$HERE/lib/host-api.sh" start "$VMOUT/api" 2>>"$OUTDIR/host-api.log")
  if [[ $r == ok* ]]; then
    echo "e2e: control plane for the VM on the host (etcd + kube-apiserver v1.20.2), up in ${r#ok }s"
    trap '"$HERE/lib/host-api.sh" stop "$VMOUT/api"' EXIT
  else
    echo "${r:-host-api.sh failed (see $OUTDIR/host-api.log)}" > "$VMOUT/api/why"
    echo "e2e: note: no control plane for the VM ($(cat "$VMOUT/api/why")); those cases will skip"
  fi
fi
boot() {
  (cd "$HERE/../.." && "$HERE/lib/vm-run.sh" "$KVER" "$INITRD" "$VMOUT" \
    "$HERE/lib/in-vm.sh" "$BUILD_DIR" "$VMOUT" "${cases[@]}")
}
t0=$(date +%s.%N)
boot
vmrc=$?
# A VM that died before reaching the command (a guest kernel panic under an
# overloaded TCG host) is retried once; a failure inside the command is not.
if [[ $vmrc == 125 ]] && ! grep -q '^VM-INIT: uptime' "$VMOUT/console.log" 2>/dev/null; then
  echo "e2e: VM did not reach the command, booting again; first console tail:"
  tail -n 5 "$VMOUT/console.log" 2>/dev/null | sed 's/^/  /'
  boot
  vmrc=$?
fi
wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')

passed=0 failed=0 skipped=0
for c in "${cases[@]}"; do
  name=$(basename "$c" .sh)
  line=$(grep -E "^(PASS|FAIL|SKIP) $name(:|$)" "$VMOUT/results.txt" 2>/dev/null | tail -1)
  [[ -n $line ]] || line="FAIL $name: no result (VM exit $vmrc; did the VM die or time out?)"
  echo "e2e: $line"
  case ${line%% *} in
    PASS) passed=$((passed + 1)) ;;
    SKIP) skipped=$((skipped + 1)) ;;
    *) failed=$((failed + 1))
       d=$VMOUT/cases/$name
       if [[ -f $d/log ]]; then
         echo "---- $name: case log (tail) ----"; tail -n 40 "$d/log"
       fi
       for f in "$d"/agent*.log "$d"/kubelet-sim*.log; do
         [[ -f $f ]] || continue
         echo "---- $name: $(basename "$f") (tail) ----"; tail -n 40 "$f"
       done ;;
  esac
  [[ ${E2E_VERBOSE:-0} == 1 && -f $VMOUT/cases/$name/log ]] && sed "s/^/  $name| /" "$VMOUT/cases/$name/log"
done
if ((failed)) || [[ $vmrc != 0 && $vmrc != 1 ]]; then
  [[ -f $VMOUT/fixture.log ]] && { echo "---- fixture.log ----"; cat "$VMOUT/fixture.log"; }
  echo "---- VM console (tail) ----"; tail -n 30 "$VMOUT/console.log" 2>/dev/null
fi
times=$(tr '\n' ' ' 2>/dev/null < "$VMOUT/case-times.txt")
echo "e2e: VM $(cat "$VMOUT/vm-info" 2>/dev/null), wall ${wall}s; case seconds: ${times:-none}; logs in $VMOUT"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
