#!/bin/bash
# Runs on the HOST before the VM boots (test/e2e/run.sh, for 09-real-kubelet): writes the OCI image
# archives the in-VM kubelet's Pods use into OUT: pause.tar (registry.k8s.io/pause:3.6, a tiny static
# C program) and busybox.tar (docker.io/local/busybox:rk), with test/realkubelet/lib.sh's builders.
# Built here because gcc, tar and gzip under TCG take over a minute; on the host about a second.
# Usage: rk-images.sh OUT
set -euo pipefail
OUT=$(realpath -m "$1")
# shellcheck source=../../realkubelet/lib.sh
source "$(dirname "$(realpath "$0")")/../../realkubelet/lib.sh"
T=$(mktemp -d /tmp/e2e-rk-images.XXXXXX)
trap 'rm -rf "$T"' EXIT
rk_init "$T"
mkdir -p "$OUT"
build_pause_image "$OUT/pause.tar"
build_busybox_image "$OUT/busybox.tar" docker.io/local/busybox:rk
ls -l "$OUT"
