#!/usr/bin/env bash
# The README's test command (also what CI runs): installs what is needed,
# builds, and runs the whole suite. docs/testing.md has how long each step
# takes and how to run one part alone.
#   1. style gate (clang-format) and the include-layer check (warnings),
#   2. the main build: the shipped configuration (Release, -O2, the static
#      agent) and every tool the black-box steps run; its tests (the bench
#      smoke test, the static-link guard, sample trees, layer check), the
#      hostile black-box tests (test/hostile/run.sh) and fabric-dra end to end
#      (test/dra/run.sh),
#   3. the sanitizers: every unit and integration test (the GoogleTest
#      binaries) under ASan+UBSan, and libFuzzer on every parser of outside
#      bytes, from ONE clang build; TSan over the threaded parts (GCC). These
#      build in the background at the lowest priority while the main build's
#      steps run, and their tests run as soon as they are built. The
#      GoogleTest binaries run once, here: the main build feeds the shipped
#      binaries to steps 2, 4, 5 and 6 (FABRIC_MAIN_CC_TESTS=1, the default
#      with FABRIC_SANITIZERS=0, builds and runs them here too),
#   4. deploy manifest checks (real helm v4 / kubectl v1.34), the image built
#      (it reuses the main build's compiler cache) and run as the chart renders
#      it (podman; the real kubelet),
#   5. the real kubelet (v1.20.2, built once and cached) with containerd and runc,
#      registered as a Node with a real control plane (etcd 3.4 and kube-apiserver
#      v1.20.2, built once from the same source), running static Pods and Pods
#      created through the API against the agent (skips with a reason where a part
#      cannot be had),
#   6. in the background once the main build and the sanitizer builds are
#      done: the real-kernel e2e suite in a QEMU soft-RoCE VM, the real kubelet in it, registered with a
#      control plane of its own on the host for the API cases (skips with a
#      reason where the VM cannot boot).
# Ends with a table of every step's seconds and result.
# Env: FABRIC_SANITIZERS=0 skips 3, FABRIC_FUZZ=0 the fuzz part of it,
# FUZZ_SECONDS=n the time per fuzz target, FABRIC_IMAGE_TEST=0 skips the image,
# FABRIC_REALKUBELET=0 skips 5, FABRIC_E2E=0 skips 6, FABRIC_MAIN_CC_TESTS=1
# (see 3), JOBS=n.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
JOBS=${JOBS:-$(nproc)}
OUT=${OUT:-$ROOT/build-test}
mkdir -p "$OUT"
TIMES=$OUT/step-times.tsv  # step, seconds, result (both lanes append)
# The whole run is also kept in $OUT/test.log: CI shows only the end of the
# output, so the end repeats the lines that say why a step failed.
exec > >(tee "$OUT/test.log") 2>&1
tee_pid=$!
finish() {  # exit code; lets tee write the last lines before the caller reads on
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
  exit "$1"
}
: > "$TIMES"
failures=()
# Each step prints how long the one before took, so a slow step shows in CI logs.
step_started=$SECONDS step_name="set-up" step_failed=0
end_step() {
  local took=$((SECONDS - step_started))
  echo "test.sh: '$step_name' took $took s (total $SECONDS s)"
  printf '%s\t%s\t%s\n' "$step_name" "$took" "$([ "$step_failed" = 0 ] && echo ok || echo FAILED)" >> "$TIMES"
}
step() {
  end_step
  step_started=$SECONDS step_name=$* step_failed=0
  echo; echo "=== $*"
}
record() { if [ "$1" -ne 0 ]; then failures+=("$2"); step_failed=1; echo "test.sh: FAILED: $2"; fi; }

tools/install-deps.sh test || { echo "test.sh: dependency install failed"; exit 1; }
if [ "${FABRIC_E2E:-1}" != 0 ] && [ -x test/e2e/setup.sh ]; then
  test/e2e/setup.sh || echo "test.sh: e2e dependencies unavailable; the e2e suite will skip"
fi
if [ "${FABRIC_REALKUBELET:-1}" != 0 ] && [ -x test/realkubelet/setup.sh ]; then
  test/realkubelet/setup.sh || echo "test.sh: real-kubelet dependencies unavailable; that step will skip"
fi

step "style: clang-format, include layers"
mapfile -t srcs < <(git ls-files '*.cc' '*.h' | grep -v '^test/testdata/')
if clang-format --dry-run -Werror "${srcs[@]}" 2> "$OUT/format.log"; then
  echo "clang-format: ${#srcs[@]} files clean"
else
  head -40 "$OUT/format.log"; record 1 "clang-format"
fi
# Include layering against the table in docs/architecture.md: printed as
# warnings only, until issue 31's step 3 runs it with --strict.
tools/check-layers.sh || echo "test.sh: tools/check-layers.sh could not check (exit $?)"

# ccache (cache kept outside the clone, in ccache's own directory) makes a CI
# run on a machine that built this tree before mostly cache hits; base_dir
# makes hits independent of where the clone lives, and the image build (in
# podman, /src) hits the main build's objects. A cold run stores about 0.15 GB
# (compressed), well inside ccache's default 5 GB.
# ccache hashes the locale variables too; the image's Dockerfile sets LANG=C.UTF-8.
export LANG=C.UTF-8
unset LC_ALL LC_CTYPE LC_MESSAGES
launcher=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  export FABRIC_IMAGE_CCACHE_DIR=${FABRIC_IMAGE_CCACHE_DIR:-$(ccache -k cache_dir)}
fi
configure() {  # dir, extra cmake args... (SRC: the source path, default $ROOT)
  local dir=$1 src=${SRC:-$ROOT}; shift
  mkdir -p "$dir"
  # A build dir configured from another source path cannot be reconfigured.
  if [ -f "$dir/CMakeCache.txt" ] && \
     ! grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$dir/CMakeCache.txt"; then
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  cmake -S "$src" -B "$dir" -G Ninja "${launcher[@]}" "$@" \
    > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; return 1; }
}
# The sanitizer builds are unity builds, and CMake writes each unity source with
# absolute #include paths, which ccache hashes as they are: from a clone at
# another path every unity object would miss. They configure through one stable
# path instead, a symlink to this clone held under a lock for the run; a second
# run at the same time uses its own path (correct, but no cache hits there).
SAN_SRC=$ROOT
link_dir=${XDG_CACHE_HOME:-$HOME/.cache}/fabric-test
if mkdir -p "$link_dir" && exec 9> "$link_dir/src.lock" && flock -n 9; then
  ln -sfn "$ROOT" "$link_dir/src" && SAN_SRC=$link_dir/src
else
  echo "test.sh: $link_dir/src is held by another run; the sanitizer builds use $ROOT"
fi
# Sanitizer builds: line tables only (-g1), enough for stack traces. Unity
# translation units everywhere (the main build keeps one TU per shipped file).
san_flags=(-DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DFABRIC_UNITY=ALL)
# In the clang build the test sources compile at -O0, the code under test
# (libraries, binaries, fuzz targets) at -O1: a GoogleTest file under
# ASan+UBSan compiles about 2x faster at -O0 (json_text_test 20.5 -> 9.0 s,
# observe_test 36.9 -> 17.3) and test files are most of that build. The code
# under test stays at -O1: at -O0 the CPU-bound tests ran 1.3-5x longer
# (fabricctl_test 47 -> 116 s, cni_config_fuzz_test 4 -> 19.5 s). TSan stays at
# -O1 throughout: at -O0 gRPC's header atomics get frames of their own
# (std::__atomic_base::fetch_sub) that test/tsan.supp cannot name without
# hiding our own atomics.
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

# The sanitizer lane, run in the background: it records its steps in $TIMES
# and its failures in $OUT/sanitizers.failed; its log is printed when it ends.
sanitizer_lane() {
  local t0 failed=()
  lane_step() {  # name, command...
    local name=$1; shift
    t0=$SECONDS
    echo; echo "=== [sanitizers] $name"
    if "$@"; then r=ok; else r=FAILED; failed+=("$name"); echo "test.sh: FAILED: $name"; fi
    printf '[sanitizers] %s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$r" >> "$TIMES"
    [ "$r" = ok ]
  }
  # One clang build serves the ASan+UBSan tests and the fuzz targets (every
  # object carries -fsanitize=fuzzer-no-link; only the fuzz targets link
  # libFuzzer's main). Without clang's libFuzzer, GCC builds the ASan tests.
  local clangxx clangcc clang=0 fuzz=0
  clangxx=$(command -v clang++-14 || command -v clang++ || true)
  clangcc=$(command -v clang-14 || command -v clang || true)
  if [ -n "$clangxx" ] && [ -n "$clangcc" ] && \
     [ -f "$("$clangxx" -print-runtime-dir)/libclang_rt.fuzzer-$(uname -m).a" ]; then
    clang=1
    [ "${FABRIC_FUZZ:-1}" != 0 ] && fuzz=1
  else
    echo "fuzz: skipped: no clang++ with libFuzzer (install-deps.sh test installs clang, libclang-rt-14-dev)"
  fi
  local san_args=("${san_flags[@]}" -DFABRIC_TEST_OPT=-O0 -DFABRIC_SANITIZE=address,undefined)
  [ "$fuzz" = 1 ] && san_args+=(-DFABRIC_FUZZ=ON)
  san_build() {
    if [ "$clang" = 1 ]; then
      SRC=$SAN_SRC CC=$clangcc CXX=$clangxx configure "$OUT/san" "${san_args[@]}" || return 1
    else
      SRC=$SAN_SRC configure "$OUT/san" "${san_args[@]}" || return 1
    fi
    nice -n 19 cmake --build "$OUT/san" -j"$JOBS"
  }
  tsan_build() { SRC=$SAN_SRC configure "$OUT/tsan" "${san_flags[@]}" -DFABRIC_SANITIZE=thread && \
                 nice -n 19 cmake --build "$OUT/tsan" -j"$JOBS" --target "${tsan_targets[@]}" fabric-agent kubelet-sim; }
  asan_tests() {
    (cd "$OUT/san" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
      LSAN_OPTIONS="suppressions=$ROOT/test/lsan.supp:print_suppressions=0" \
      UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest -LE 'e2e|nosan' --output-on-failure -j"$JOBS" --timeout 900)
  }
  tsan_tests() {
    (cd "$OUT/tsan" && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$ROOT/test/tsan.supp" \
      ctest -R "^($(IFS='|'; echo "${tsan_targets[*]}"))\$" --output-on-failure -j"$JOBS" --timeout 900)
  }
  # The TSan build (nice 19) runs beside the ASan tests and the fuzz targets:
  # it takes the CPU the tests leave idle (many wait on timers and sockets).
  # Its output goes to its own log, printed once it is done.
  local tsan_name="build: GCC TSan, unity" tsan_pid=
  tsan_build_beside() {
    (
      lane_step "$tsan_name" tsan_build > "$OUT/tsan-build.log" 2>&1
      rc=$?
      : > "$OUT/lane-builds.done"  # the e2e VM waits for it (start_e2e)
      exit $rc
    ) &
    tsan_pid=$!
  }
  if lane_step "build: clang ASan+UBSan (+ fuzz targets), unity" san_build; then
    tsan_build_beside
    lane_step "ASan + UBSan: every unit and integration test" asan_tests
    [ "$fuzz" = 1 ] && lane_step "fuzz: libFuzzer on every parser of outside bytes, ${FUZZ_SECONDS:-20} s each" \
      env JOBS="$JOBS" test/fuzz/run.sh "$OUT/san" "$OUT/fuzz-run"
  else
    tsan_build_beside
  fi
  local tsan_rc=0
  wait "$tsan_pid" || tsan_rc=$?
  echo; cat "$OUT/tsan-build.log"
  if [ "$tsan_rc" = 0 ]; then
    lane_step "TSan: agent threads, device-plugin servers, registration, simulator" tsan_tests
  else
    failed+=("$tsan_name")
  fi
  printf '%s\n' "${failed[@]}" > "$OUT/sanitizers.failed"
}
lane_pid=
rm -f "$OUT/lane-builds.done"
if [ "${FABRIC_SANITIZERS:-1}" != 0 ]; then
  # Its builds run at the lowest priority: they use what the main steps leave
  # idle (those wait on timers, sockets and the real kubelet much of the time).
  # Its tests run at normal priority, so their timeouts mean what they say.
  sanitizer_lane > "$OUT/sanitizers.log" 2>&1 &
  lane_pid=$!
  echo "test.sh: sanitizer lane started in the background (log: $OUT/sanitizers.log)"
fi

# The real-kernel e2e suite, in the background once the main build has its
# binaries and the sanitizer lane's builds are done. Run after everything
# else, a warm run's second core idled for the VM's ~12 minutes. Started
# before the lane's builds end, the VM (QEMU under TCG, two vCPUs, busy
# guests) starved them: the lane is a cold run's critical path (run c7: the
# clang build 20 % done after 1,370 s). Its control plane on the host takes
# ports of its own: the real-kubelet steps run theirs (16443, 23790-1) at
# the same time.
e2e_pid=
start_e2e() {
  [ "${FABRIC_E2E:-1}" != 0 ] && [ -x test/e2e/run.sh ] || return 0
  local name="e2e: real kernel, soft-RoCE VM"
  (
    if [ -n "$lane_pid" ]; then
      while [ ! -e "$OUT/lane-builds.done" ] && kill -0 "$lane_pid" 2>/dev/null; do sleep 5; done
    fi
    t0=$SECONDS
    echo "=== [e2e] $name"
    E2E_API_PORT=${E2E_API_PORT:-16643} E2E_ETCD_PORT=${E2E_ETCD_PORT:-23990} \
      test/e2e/run.sh "$OUT/main" "$OUT/e2e"
    rc=$?
    printf '[e2e] %s\t%s\t%s\n' "$name" "$((SECONDS - t0))" "$([ $rc = 0 ] && echo ok || echo FAILED)" >> "$TIMES"
    exit $rc
  ) > "$OUT/e2e.log" 2>&1 &
  e2e_pid=$!
  echo "test.sh: e2e VM started in the background once the sanitizer builds are done (log: $OUT/e2e.log)"
}

main_tests=(-DFABRIC_CC_TESTS=OFF -DFABRIC_TEST_OPT= -DFABRIC_UNITY=OFF)
# Without the sanitizer lane the GoogleTest binaries run here, or nowhere.
main_cc_default=0
[ "${FABRIC_SANITIZERS:-1}" = 0 ] && main_cc_default=1
[ "${FABRIC_MAIN_CC_TESTS:-$main_cc_default}" = 1 ] && main_tests=(-DFABRIC_CC_TESTS=ON -DFABRIC_TEST_OPT=-O1 -DFABRIC_UNITY=TESTS)
step "build: main (Release -O2, the shipped configuration)"
if configure "$OUT/main" -DCMAKE_BUILD_TYPE=Release \
     "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" \
     "${main_tests[@]}" && cmake --build "$OUT/main" -j"$JOBS"; then
  start_e2e
  step "main build's tests: bench smoke, static-link guard, sample trees, layers"
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

if [ -n "$lane_pid" ]; then
  step "waiting for the sanitizer lane"
  wait "$lane_pid"
  cat "$OUT/sanitizers.log"
  # The lane's steps carry their own results in the table; waiting did not fail.
  while read -r f; do [ -n "$f" ] && failures+=("$f"); done < "$OUT/sanitizers.failed" 2>/dev/null
  [ -f "$OUT/sanitizers.failed" ] || record 1 "sanitizer lane (ended without a result)"
fi

if [ -n "$e2e_pid" ]; then
  step "waiting for the e2e VM"
  wait "$e2e_pid"
  e2e_rc=$?
  cat "$OUT/e2e.log"
  # Its step carries its own result in the table; waiting did not fail.
  [ "$e2e_rc" = 0 ] || failures+=("e2e")
fi

end_step
# The lines that say why a step failed, taken before the table is printed.
# Passing lines that merely mention a failure (a PASS line quoting an error
# the test expected, the hostile tests' outcome tables) are left out.
why=$(grep -aE 'FAILED|Failed|FAIL[: ]|ERROR|SUMMARY:|runtime error|Timeout|out-of-memory|deadly signal|Test unit written|Expected|Which is|error:' "$OUT/test.log" | \
        grep -avE 'PASS|^ +(outcome|admission) ' | tail -60)
echo
echo "test.sh: step times (seconds; [sanitizers] and [e2e] ran in the background beside the others)"
awk -F'\t' '{printf "  %-100s %6s  %s\n", $1, $2, $3}' "$TIMES"
echo "  total: $SECONDS s"
echo
if [ ${#failures[@]} -eq 0 ]; then
  echo "test.sh: all steps passed"
  finish 0
fi
echo "test.sh: why (the lines of $OUT/test.log that name a failure):"
sed 's/^/  | /' <<<"$why"
echo
echo "test.sh: failed steps: ${failures[*]}"
finish 1
