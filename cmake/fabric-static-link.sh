#!/bin/sh
# Linker launcher set by fabric_static_executable() (cmake/FabricStatic.cmake):
#   fabric-static-link.sh deps|full <compiler> <link arguments...>
# Rewrites each shared library named by full path (as CMake's imported targets name them)
# into the static archive beside it, swaps gRPC for its unsecure build, wraps
# the libraries in one --start-group/--end-group (archives need their order; the shared
# objects never did), and adds the flags that let the linker drop unreached code.
set -eu
mode=$1
shift
[ "$mode" = deps ] || [ "$mode" = full ] || { echo "$0: mode must be deps or full" >&2; exit 2; }
cc=$1
shift

# Build the new argument list in "$@" (POSIX sh has no arrays): rotate through it once.
n=$#
grouped=0
i=0
while [ "$i" -lt "$n" ]; do
  arg=$1
  shift
  i=$((i + 1))
  case $arg in
    /*/lib*.so | /*/lib*.so.[0-9]*)
      dir=${arg%/*}
      base=${arg##*/}
      name=${base%%.so*}
      case $name in
        libspdlog | libfmt) continue ;;                  # cmake/static/fmt_spdlog.cc instead
        libgrpc) name=libgrpc_unsecure ;;
        libgrpc++) name=libgrpc++_unsecure ;;
      esac
      case $name in
        # libfabric's archive holds every provider and needs each provider's own
        # libraries (psm2, verbs, ...): only its shared object loads them on demand.
        # OpenSSL's archives are linked: --gc-sections keeps only what the
        # agent's HTTP layer (agent/http: the TLS /v1/pods listener and the API
        # client) uses, and an agent that uses neither maps none of it.
        libfabric | libibverbs | librdmacm) keep=1 ;;
        *) keep=0 ;;
      esac
      if [ "$keep" = 0 ] && [ -f "$dir/$name.a" ]; then
        arg=$dir/$name.a
      elif [ "$mode" = full ]; then
        # A fully static binary has no way to load a shared object at all.
        echo "fabric-static-link: no static archive for $arg ($dir/$name.a); cannot link fully static" >&2
        exit 1
      fi
      ;;
  esac
  case $arg in
    *.a | *.so | *.so.[0-9]* | -l*)
      if [ "$grouped" = 0 ]; then
        set -- "$@" -Wl,--start-group
        grouped=1
      fi
      ;;
  esac
  set -- "$@" "$arg"
done
[ "$grouped" = 0 ] || set -- "$@" -Wl,--end-group

set -- "$@" -static-libstdc++ -static-libgcc -Wl,--gc-sections -Wl,--as-needed -Wl,-O1
[ "$mode" = full ] && set -- "$@" -static
exec "$cc" "$@"
