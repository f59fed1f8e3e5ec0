#!/bin/bash
# Builds a small busybox initramfs for the e2e VM. Its /init mounts the HOST's
# root filesystem read-only over virtio-9p with a tmpfs overlay on top, mounts
# the read-write 9p "out" share at the path it has on the host, switch_roots
# into the overlay and runs the command named on the kernel cmdline, writes the
# command's exit code to OUTDIR/vm-exit-code and powers off.
# Adapted from the RDMA testbed recipe (shared testbed build-initramfs.sh,
# reproduced on Debian 12 with kernel 6.1.0-57-amd64).
# Usage: build-initramfs.sh KVER OUT_CPIO_GZ
set -euo pipefail
KVER=${1:?kernel version}
OUT=${2:?output path}
WORK=$(mktemp -d "${OUT%/*}/initramfs-build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK"/{bin,dev,proc,sys,mnt/lower,mnt/rw,newroot,lib/modules}
cp /bin/busybox "$WORK/bin/busybox"
# Only what is needed before the host root is reachable; everything else
# (rdma_rxe, ...) is modprobed later from the host's /lib/modules.
: > "$WORK/modules.order"
for m in virtio_pci virtio_net 9pnet_virtio 9p overlay; do
  modprobe -S "$KVER" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
  cp "$ko" "$WORK/lib/modules/"
  basename "$ko" >> "$WORK/modules.order"
done
cat > "$WORK/init" <<'INIT'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in $(cat /modules.order); do insmod /lib/modules/$m 2>/dev/null; done
arg() { for a in $(cat /proc/cmdline); do case $a in $1=*) echo "${a#*=}";; esac; done; }
OUTPATH=$(arg vm.out); CMD=$(arg vm.cmd)
i=0; while [ ! -e /sys/bus/virtio/drivers/9pnet_virtio ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
O9P=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o ro,$O9P hostroot /mnt/lower || { echo "VM-INIT: 9p root mount failed"; poweroff -f; }
mount -t tmpfs -o size=2g tmpfs /mnt/rw; mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work /newroot \
  || { echo "VM-INIT: overlay mount failed"; poweroff -f; }
mount -t proc proc /newroot/proc; mount -t sysfs sys /newroot/sys; mount -t devtmpfs dev /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm; mount -t devpts devpts /newroot/dev/pts; mount -t tmpfs shm /newroot/dev/shm
mount -t tmpfs tmpfs /newroot/run
if [ -n "$OUTPATH" ]; then mkdir -p /newroot$OUTPATH; mount -t 9p -o $O9P out /newroot$OUTPATH; fi
# devtmpfs has no /dev/fd: bash process substitution needs it
ln -sf /proc/self/fd /newroot/dev/fd; ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout; ln -sf /proc/self/fd/2 /newroot/dev/stderr
hostname e2evm; ip link set lo up
# Stage 2 runs as PID 1 inside the new root, not under chroot: the kernel's
# request_module() helper runs /sbin/modprobe in PID 1's root, and with a
# chroot that root is this initramfs (no modules) and `rdma link add` fails.
cat > /newroot/run/vm-stage2.sh <<STAGE2
#!/bin/sh
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TERM=dumb
echo "VM-INIT: uptime \$(cut -d' ' -f1 /proc/uptime)s, running: $CMD"
/bin/sh -c "$CMD" </dev/null
rc=\$?
echo "VM-INIT: command exit code \$rc"
[ -n "$OUTPATH" ] && echo \$rc > "$OUTPATH/vm-exit-code"
sync; echo o > /proc/sysrq-trigger
# PID 1 must not exit before the power-off lands (that would panic).
while :; do sleep 1; done
STAGE2
chmod +x /newroot/run/vm-stage2.sh
exec switch_root /newroot /run/vm-stage2.sh
INIT
chmod +x "$WORK/init"
(cd "$WORK" && find . | cpio -o -H newc --quiet | gzip -1) > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
