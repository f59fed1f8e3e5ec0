#!/usr/bin/env bash
# The README's test command (also what CI runs): installs what is needed,
# builds, and runs the whole suite:
#   1. style gate (clang-format),
#   2. unit + integration tests (ctest), then the hostile black-box tests
#      (test/hostile/run.sh, about 3 minutes) and fabric-dra end to end
#      (test/dra/run.sh: the fake API server and kubelet-sim's DRA side),
#   3. the same under ASan/UBSan, and the threaded parts under TSan; then
#      every parser of outside bytes under libFuzzer (clang, ASan+UBSan,
#      20 s per target, test/fuzz),
#   4. deploy manifest checks (real helm v4 / kubectl v1.34), the image built
#      and run as the chart renders it (podman; the real kubelet),
#   5. the real kubelet (v1.20.2, built once and cached) with containerd and runc,
#      registered as a Node with a real control plane (etcd 3.4 and kube-apiserver
#      v1.20.2, built once from the same source), running static Pods and Pods
#      created through the API against the agent (skips with a reason where a part
#      cannot be had),
#   6. the real-kernel e2e suite in a QEMU soft-RoCE VM, the real kubelet in it,
#      registered with the same control plane on the host for the API cases
#      (skips with a reason where the VM cannot boot).
# Env: FABRIC_SANITIZERS=0 skips 3, FABRIC_FUZZ=0 the fuzz part of it,
# FUZZ_SECONDS=n the time per fuzz target, FABRIC_IMAGE_TEST=0 skips the image,
# FABRIC_REALKUBELET=0 skips 5, FABRIC_E2E=0 skips 6, JOBS=n.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-$ROOT/build-test}
mkdir -p "$OUT"
failures=()
# Each step prints how long the one before took, so a slow step shows in CI logs.
step_started=$SECONDS step_name="set-up"
step() {
  echo "test.sh: '$step_name' took $((SECONDS - step_started)) s (total $SECONDS s)"
  step_started=$SECONDS step_name=$*
  echo; echo "=== $*"
}
record() { if [ "$1" -ne 0 ]; then failures+=("$2"); echo "test.sh: FAILED: $2"; fi; }

tools/install-deps.sh test || { echo "test.sh: dependency install failed"; exit 1; }
if [ "${FABRIC_E2E:-1}" != 0 ] && [ -x test/e2e/setup.sh ]; then
  test/e2e/setup.sh || echo "test.sh: e2e dependencies unavailable; the e2e suite will skip"
fi
if [ "${FABRIC_REALKUBELET:-1}" != 0 ] && [ -x test/realkubelet/setup.sh ]; then
  test/realkubelet/setup.sh || echo "test.sh: real-kubelet dependencies unavailable; that step will skip"
fi

step "style: clang-format"
mapfile -t srcs < <(git ls-files '*.cc' '*.h' | grep -v '^test/testdata/')
if clang-format --dry-run -Werror "${srcs[@]}" 2> "$OUT/format.log"; then
  echo "clang-format: ${#srcs[@]} files clean"
else
  head -40 "$OUT/format.log"; record 1 "clang-format"
fi
# Include layering against the table in docs/architecture.md: printed as
# warnings only, until issue 31's step 3 runs it with --strict.
tools/check-layers.sh || echo "test.sh: tools/check-layers.sh could not check (exit $?)"

# Line tables only (-g1): enough for sanitizer stack traces, and compiling
# gRPC-heavy code on 2 cores is the bulk of the run.
# ccache (cache kept outside the clone, in ccache's own directory) makes a CI
# run on a machine that built this tree before mostly cache hits; base_dir
# makes hits independent of where the clone lives.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
configure() {  # dir, optimisation, extra cmake args...
  local dir=$1 opt=$2; shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_FLAGS="$opt -g1" "${launcher[@]}" "$@" \
    > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
}

step "build (-O2)"
mkdir -p "$OUT/main"
if configure "$OUT/main" -O2 && cmake --build "$OUT/main" -j"$JOBS"; then
  step "unit + integration tests"
  (cd "$OUT/main" && ctest -LE 'e2e|hostile' --output-on-failure -j"$JOBS" --timeout 600)
  record $? "ctest (main)"
  step "hostile: kubelet restarts, flapping sysfs, SIGHUP storm (real fabric-agent)"
  test/hostile/run.sh "$OUT/main" "$OUT/hostile"
  record $? "hostile"
  step "DRA: fabric-dra against the API-server stand-in and kubelet-sim's DRA manager"
  test/dra/run.sh "$OUT/main"
  record $? "dra"
else
  record 1 "build (main)"
fi

if [ "${FABRIC_SANITIZERS:-1}" != 0 ]; then
  step "ASan + UBSan"
  mkdir -p "$OUT/asan"
  if configure "$OUT/asan" -O1 -DFABRIC_SANITIZE=address,undefined && cmake --build "$OUT/asan" -j"$JOBS"; then
    (cd "$OUT/asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      LSAN_OPTIONS="suppressions=$ROOT/test/lsan.supp:print_suppressions=0" \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest -LE 'e2e|nosan' --output-on-failure -j"$JOBS" --timeout 900)
    record $? "ctest (asan+ubsan)"
  else
    record 1 "build (asan)"
  fi
  step "TSan (agent threads, device-plugin servers, registration, simulator)"
  mkdir -p "$OUT/tsan"
  # Debian's abseil is not TSan-instrumented, so absl::Mutex would be invisible
  # to TSan: the threaded code locks with std::mutex, which TSan sees.
  # The gRPC-facing tests: device-plugin servers, registration (both paths) and
  # the simulator (agent_integration_test, kubelet_sim_test), the PodResources
  # client against its fake server, the CNI agent server. test/tsan.supp names
  # only gRPC/abseil internals, so races in our handlers and reactors report.
  tsan_targets=(agent_integration_test kubelet_sim_test health_monitor_test allocation_test
                podresources_test cni_service_test http_server_test inventory_test
                pools_integration_test pool_registry_test doctor_loopback_test
                sampler_test observe_test observe_integration_test dra_plugin_test dra_integration_test
                kubeapi_test kubeapi_fake_apiserver_test dra_front_test podconditions_writer_test
                podsapi_test)
  if configure "$OUT/tsan" -O1 -DFABRIC_SANITIZE=thread && \
     cmake --build "$OUT/tsan" -j"$JOBS" --target "${tsan_targets[@]}" fabric-agent kubelet-sim; then
    (cd "$OUT/tsan" && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/test/tsan.supp" \
      ctest -R "^($(IFS='|'; echo "${tsan_targets[*]}"))\$" --output-on-failure --timeout 900)
    record $? "ctest (tsan)"
  else
    record 1 "build (tsan)"
  fi

  if [ "${FABRIC_FUZZ:-1}" != 0 ]; then
    step "fuzz: libFuzzer on every parser of outside bytes (clang, ASan+UBSan)"
    # Its own clang build dir, the fuzz targets and their libraries only.
    clangxx=$(command -v clang++-14 || command -v clang++ || true)
    clangcc=$(command -v clang-14 || command -v clang || true)
    if [ -z "$clangxx" ] || [ -z "$clangcc" ]; then
      echo "fuzz: skipped: no clang++ (install-deps.sh test installs clang)"
    elif [ ! -f "$("$clangxx" -print-runtime-dir)/libclang_rt.fuzzer-$(uname -m).a" ]; then
      echo "fuzz: skipped: no libFuzzer runtime for $clangxx (libclang-rt-14-dev)"
    else
      mkdir -p "$OUT/fuzz"
      if CC=$clangcc CXX=$clangxx configure "$OUT/fuzz" -O1 -DFABRIC_FUZZ=ON -DFABRIC_BUILD_TESTS=OFF && \
         cmake --build "$OUT/fuzz" -j"$JOBS" --target fuzz; then
        JOBS=$JOBS test/fuzz/run.sh "$OUT/fuzz" "$OUT/fuzz-run"
        record $? "fuzz"
      else
        record 1 "build (fuzz)"
      fi
    fi
  fi
fi

if [ -x deploy/test/check-manifests.sh ]; then
  step "deploy manifests"
  FABRIC_BINARY_DIR="$OUT/main" deploy/test/check-manifests.sh
  record $? "deploy manifests"
fi

if [ "${FABRIC_REALKUBELET:-1}" != 0 ] && [ -x test/realkubelet/run.sh ]; then
  step "real kubelet: kubelet v1.20.2 + containerd + runc, registered with kube-apiserver v1.20.2 + etcd"
  test/realkubelet/run.sh "$OUT/main" "$OUT/realkubelet"
  record $? "real kubelet"
fi

if [ "${FABRIC_IMAGE_TEST:-1}" != 0 ] && [ -x deploy/test/image-test.sh ]; then
  step "image and install: build the image, static host binaries in an empty container, chart as rendered"
  FABRIC_BINARY_DIR="$OUT/main" deploy/test/image-test.sh
  record $? "image and install"
  if [ -x deploy/test/realkubelet-chart.sh ]; then
    step "chart DaemonSet as a static Pod under the real kubelet"
    deploy/test/realkubelet-chart.sh
    record $? "chart under the real kubelet"
  fi
fi

if [ -x test/doctor/run.sh ]; then
  step "fabric doctor: 3 agents in network namespaces (tcp provider, iptables/link faults)"
  test/doctor/run.sh "$OUT/main"
  record $? "fabric doctor"
fi

if [ "${FABRIC_E2E:-1}" != 0 ] && [ -x test/e2e/run.sh ]; then
  step "e2e: real kernel, soft-RoCE VM"
  test/e2e/run.sh "$OUT/main" "$OUT/e2e"
  record $? "e2e"
fi

echo "test.sh: '$step_name' took $((SECONDS - step_started)) s (total $SECONDS s)"
echo
if [ ${#failures[@]} -eq 0 ]; then
  echo "test.sh: all steps passed"
  exit 0
fi
echo "test.sh: failed steps: ${failures[*]}"
exit 1
