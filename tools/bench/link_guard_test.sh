#!/usr/bin/env bash
# What a FABRIC_STATIC build must not link dynamically (docs/performance.md,
# footprint). Not timed: it reads the ELF dynamic sections.
#   link_guard_test.sh <fabric-agent> <fabric-cni>
set -uo pipefail
agent=$1
cni=$2
pass=0
fail=0
check() { # name, command...
  local name=$1
  shift
  if "$@"; then
    echo "PASS $name"
    pass=$((pass + 1))
  else
    echo "FAIL $name"
    fail=$((fail + 1))
  fi
}
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

for f in "$agent" "$cni"; do
  [ -x "$f" ] || { echo "FAIL $f is not an executable"; echo "0 passed, 1 failed"; exit 1; }
done
agent_needed=$(needed "$agent")
echo "fabric-agent NEEDED: $(echo $agent_needed)"
no_match() { ! grep -Eq "$1" <<<"$agent_needed"; }
# OpenSSL: the kubelet APIs are plaintext on unix sockets (grpc_unsecure); the
# /v1/pods TLS listener links OpenSSL's archives. Never as a shared object,
# directly or through any library it needs.
check "fabric-agent does not need OpenSSL (libssl, libcrypto)" no_match '^lib(ssl|crypto)\.so'
openssl_via() {
  local lib path
  for lib in $agent_needed; do
    path=$(ldd "$agent" | awk -v l="$lib" '$1 == l { print $3 }')
    [ -n "$path" ] && ldd "$path" | grep -Eq 'lib(ssl|crypto)\.so' && { echo "  $lib pulls OpenSSL"; return 1; }
  done
  return 0
}
check "no library fabric-agent needs pulls OpenSSL" openssl_via
# libcurl maps ~30 libraries (about 10 MiB of RSS); the API client is agent/http's.
check "fabric-agent does not need libcurl (agent/http is the HTTP client)" no_match '^libcurl'
check "fabric-agent does not need cpp-httplib (agent/http has its own server and client)" no_match '^libcpp-httplib'
# gRPC, protobuf and abseil come from their static archives.
check "fabric-agent does not need libgrpc/libgrpc++ (nor their unsecure .so)" no_match '^lib(grpc|gpr|upb|address_sorting)'
check "fabric-agent does not need libprotobuf" no_match '^libprotobuf'
check "fabric-agent does not need libabsl_*" no_match '^libabsl_'
# libfabric maps a dozen provider libraries (about 1.35 MiB of RSS) at load;
# agent/libfabric loads it with dlopen only when --doctor opens endpoints.
check "fabric-agent does not need libfabric (dlopen'ed for --doctor only)" no_match '^lib(fabric|ibverbs|rdmacm|psm)'
check "fabric-agent does not need spdlog/fmt (cmake/static/fmt_spdlog.cc)" no_match '^lib(spdlog|fmt)\.so'
check "fabric-agent does not need libstdc++ itself (-static-libstdc++)" \
  bash -c "! readelf -sW --dyn-syms '$agent' | grep -q 'UND.*GLIBCXX_'"
# The host runs fabric-cni outside our image: no interpreter, no NEEDED at all.
check "fabric-cni is fully static" bash -c "! readelf -lW '$cni' | grep -q INTERP && [ -z \"\$(readelf -d '$cni' 2>/dev/null | grep NEEDED)\" ]"
echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
