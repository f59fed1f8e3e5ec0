#!/bin/bash
# Runs on the HOST (test/e2e/run.sh) when a selected case has a "# e2e: needs the API server" line:
# the real-kubelet suite's control plane (test/realkubelet/kube-api.sh: Debian's etcd, kube-apiserver
# v1.20.2 from build-apiserver.sh's cache, Node,RBAC, token auth, service-account keys), for the
# kubelet in the soft-RoCE VM to register with (lib/rk-vm.sh, RKVM_APISERVER=1).
# It runs here and not in the VM: under TCG every CPU cycle of the guest is emulated, and the API
# server would compete with the kubelet, containerd and the agent there. The VM reaches it at
# 10.0.2.2, QEMU user networking's address for the host's loopback; it listens on 127.0.0.1 only.
#
# Usage: host-api.sh start DIR   prints "ok" or one reason (then it started nothing) on stdout.
#        host-api.sh stop DIR
# DIR gets etcd's data, the logs, the keys and DIR/vm/: ca.crt, admin.token, env (sourced in the VM)
# and kubelet.kubeconfig / admin.kubeconfig that dial 10.0.2.2.
# Env: E2E_API_PORT (16443), E2E_ETCD_PORT (23790 and the next).
set -uo pipefail
CMD=${1:?usage: host-api.sh start|stop DIR}
DIR=$(realpath -m "${2:?usage: host-api.sh start|stop DIR}")
VM_HOST=10.0.2.2
HERE=$(dirname "$(realpath "$0")")
# shellcheck source=../../realkubelet/lib.sh
source "$HERE/../../realkubelet/lib.sh"

stop_pid() {  # NAME
  local p
  p=$(cat "$DIR/pids/$1" 2>/dev/null) || return 0
  kill "$p" 2>/dev/null
  for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$p" 2>/dev/null
  rm -f "$DIR/pids/$1"
}
if [[ $CMD == stop ]]; then
  stop_pid kube-apiserver
  stop_pid etcd
  rm -rf "$DIR/etcd-data"
  exit 0
fi

mkdir -p "$DIR/pids" "$DIR/vm"
# shellcheck disable=SC2034  # read by kube-api.sh's functions
RK_WORK=$DIR RK_NODE=e2e-node RK_API_DIR=$DIR
RK_API_PORT=${E2E_API_PORT:-16443} RK_ETCD_PORT=${E2E_ETCD_PORT:-23790}
# shellcheck disable=SC2034
RK_API_BIND=127.0.0.1 RK_API_HOST=127.0.0.1 RK_NODE_IP=$VM_HOST RK_ETCD_DATA=$DIR/etcd-data
why=$(api_check_parts) || { echo "$why"; exit 0; }
for p in "$RK_API_PORT" "$RK_ETCD_PORT" $((RK_ETCD_PORT + 1)); do
  ss -Hltn "sport = :$p" 2>/dev/null | grep -q . && { echo "port $p is taken on this host"; exit 0; }
done
# No namespace here: the host's own loopback (QEMU's user network forwards 10.0.2.2 to it).
in_ns() { "$@"; }
ns_spawn() {  # NAME LOG CMD...
  local name=$1 lg=$2; shift 2
  setsid "$@" >>"$lg" 2>&1 </dev/null &
  echo $! >"$DIR/pids/$name"
}
t0=$(date +%s.%N)
if ! start_control_plane >>"$DIR/setup.log" 2>&1; then
  echo "the control plane did not start: $(tail -n 2 "$DIR/setup.log" | tr '\n' ' ')"
  "$0" stop "$DIR"
  exit 1
fi
# What the VM uses: the same files, dialling the host through QEMU.
cp "$DIR/ca.crt" "$DIR/admin.token" "$DIR/vm/"
for k in kubelet admin; do
  sed "s#https://127.0.0.1:$RK_API_PORT#https://$VM_HOST:$RK_API_PORT#" "$DIR/$k.kubeconfig" |
    sed "s#$DIR/ca.crt#$DIR/vm/ca.crt#" >"$DIR/vm/$k.kubeconfig"
done
kubectl=""
if [[ -f $HERE/../../../deploy/test/node_modules/.package-lock.json ]]; then
  kubectl=$("$HERE/../../../deploy/test/lib/k8s-tools.sh" 2>/dev/null)/kubectl
fi
cat >"$DIR/vm/env" <<ENV
RK_API=https://$VM_HOST:$RK_API_PORT
RK_API_DIR=$DIR/vm
RK_ADMIN_TOKEN=$RK_ADMIN_TOKEN
RK_KUBECTL=$kubectl
ENV
echo "ok $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')"
