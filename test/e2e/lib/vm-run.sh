#!/bin/bash
# Boots the Debian kernel in QEMU with the host's / as a read-only 9p root
# (tmpfs overlay: writable, discarded at power-off) and runs one command inside,
# in the host's current directory. OUTDIR is shared read-write at the same path.
# Returns the command's exit code, 125 if the VM never reported one.
# Serial console: OUTDIR/console.log.
# Adapted from the RDMA testbed recipe (shared testbed vm-run.sh).
# Usage: vm-run.sh KVER INITRD OUTDIR CMD [ARGS...]
# no_timer_check: under TCG on a loaded host the kernel's IO-APIC timer check
# can time out and panic ("IO-APIC + timer doesn't work").
# Env: E2E_KVM=auto|0|1  E2E_MEM=1024  E2E_CPUS=2  E2E_VM_TIMEOUT=2400
set -euo pipefail
KVER=$1 INITRD=$2 OUTDIR=$3
shift 3
mkdir -p "$OUTDIR"
{
  echo '#!/bin/sh'
  printf 'cd %q || exit 99\n' "$PWD"
  # The VM sees the host's / but not its environment: pass on what in-vm.sh reads.
  [[ -n ${E2E_CASE_TIMEOUT:-} ]] && printf 'export E2E_CASE_TIMEOUT=%q\n' "$E2E_CASE_TIMEOUT"
  printf '%q ' "$@"
  echo
} > "$OUTDIR/.vm-cmd.sh"
chmod +x "$OUTDIR/.vm-cmd.sh"
rm -f "$OUTDIR/vm-exit-code"
case "${E2E_KVM:-auto}" in
  1) ACCEL=(-enable-kvm -cpu host) ;;
  0) ACCEL=(-accel tcg -cpu max) ;;
  # /dev/kvm alone is not enough: on PVM hosts (kvm_pvm, no vmx/svm flag) a
  # stock kernel hangs after "Probing EDD", so require hardware virt flags.
  *) if [[ -w /dev/kvm ]] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
       ACCEL=(-enable-kvm -cpu host)
     else
       ACCEL=(-accel tcg -cpu max)
     fi ;;
esac
set +e
timeout "${E2E_VM_TIMEOUT:-2400}" qemu-system-x86_64 "${ACCEL[@]}" \
  -m "${E2E_MEM:-2048}" -smp "${E2E_CPUS:-2}" \
  -nodefaults -no-reboot -display none -serial stdio -monitor none \
  -kernel "/boot/vmlinuz-$KVER" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=4 panic=-1 no_timer_check vm.out=$OUTDIR vm.cmd=$OUTDIR/.vm-cmd.sh" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$OUTDIR,mount_tag=out,security_model=none,multidevs=remap" \
  -netdev user,id=n0 -device virtio-net-pci,netdev=n0 \
  > "$OUTDIR/console.log" 2>&1
qrc=$?
set -e
echo "accel=${ACCEL[*]} qemu_rc=$qrc" > "$OUTDIR/vm-info"
[[ -f $OUTDIR/vm-exit-code ]] || exit 125
exit "$(cat "$OUTDIR/vm-exit-code")"
