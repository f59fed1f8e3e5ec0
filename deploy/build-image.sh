#!/usr/bin/env bash
# Builds deploy/Dockerfile with podman and no registry.
#
#   deploy/build-image.sh [-t fabric-agent:0.1.0] [-- extra podman build args]
#
# The Debian 12 base image comes from the machine's Debian mirror (the first
# .../debian URI in /etc/apt/sources.list*): mmdebstrap --variant=minbase,
# with docs, man pages and locales left out as in debian:bookworm-slim, is
# imported as localhost/fabric-debian:bookworm-minbase-<recipe hash>. It is
# built only when podman's store lacks it (the tarball is kept under
# $FABRIC_IMAGE_CACHE, so a pruned store re-imports in seconds). With a registry, build the same file
# from debian:bookworm-slim instead:
#   podman build -f deploy/Dockerfile -t fabric-agent .     (DEBIAN_IMAGE default)
#
# Warm rebuilds are fast because podman keeps the layers (apt installs) and the
# compile runs with a ccache cache mount (RUN --mount=type=cache).
#
# Env: FABRIC_IMAGE_CACHE (default /var/cache/fabric-test/image),
#      FABRIC_BASE_IMAGE (skip mmdebstrap: use this base, e.g. debian:bookworm-slim),
#      DEBIAN_MIRROR (default: from /etc/apt/sources.list*),
#      FABRIC_IMAGE_CCACHE_DIR (a host ccache directory the compile uses instead
#        of the cache mount; tools/test.sh sets it to its own, so the image
#        reuses the main build's objects).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag=fabric-agent:0.1.0
extra=()
while (($#)); do
  case "$1" in
    -t) tag="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "usage: $0 [-t image:tag] [-- podman build args]" >&2; exit 2 ;;
  esac
done

cache="${FABRIC_IMAGE_CACHE:-/var/cache/fabric-test/image}"
log() { echo "build-image: $*" >&2; }

mirror_from_sources() {
  # deb822 "URIs:" lines and one-line "deb URI suite" entries alike.
  cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
    | grep -oE '(https?|file)://[^ ]+/debian/?( |$)' | head -n1 | tr -d ' ' | sed 's|/$||' || true
}

# The base recipe. merged-usr hook: /usr merged without the usrmerge package,
# which would pull in perl (~47 MB). The dpkg excludes are those of
# debian:bookworm-slim: no docs, man pages or translations (copyright stays).
mirror="${DEBIAN_MIRROR:-$(mirror_from_sources)}"
mm_args=(--variant=minbase --mode=root --format=tar
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/lintian/*')
mm_sources=("deb $mirror bookworm main" "deb $mirror bookworm-updates main"
  "deb ${mirror%/debian}/debian-security bookworm-security main")
# The base is named after its recipe, so a changed recipe builds a new one.
recipe=$(printf '%s\n' "${mm_args[@]}" "${mm_sources[@]}" | sha256sum | cut -c1-12)
base="${FABRIC_BASE_IMAGE:-localhost/fabric-debian:bookworm-minbase-$recipe}"

ensure_base() {
  if podman image exists "$base"; then return; fi
  if [[ -n "${FABRIC_BASE_IMAGE:-}" ]]; then
    log "base image $base not in the local store (pull it, or unset FABRIC_BASE_IMAGE)"; exit 1
  fi
  local tarball="$cache/bookworm-minbase-$recipe.tar"
  if [[ ! -s "$tarball" ]]; then
    command -v mmdebstrap >/dev/null || { log "mmdebstrap not found (apt-get install mmdebstrap)"; exit 1; }
    [[ -n "$mirror" ]] || { log "no Debian mirror in /etc/apt/sources.list*; set DEBIAN_MIRROR"; exit 1; }
    log "mmdebstrap bookworm minbase from $mirror"
    mkdir -p "$cache"
    mmdebstrap "${mm_args[@]}" bookworm "$tarball.tmp" "${mm_sources[@]}" >&2
    mv "$tarball.tmp" "$tarball"
  fi
  log "importing $tarball as $base"
  podman import --change 'CMD ["/bin/bash"]' "$tarball" "$base" >/dev/null
}

ensure_base
log "podman build $tag (FROM $base)"
# --network=host: apt reaches the mirror without podman creating a bridge or
# firewall rules on the build machine. --layers: keep the apt layers.
ccache_args=()
if [[ -n "${FABRIC_IMAGE_CCACHE_DIR:-}" ]]; then
  mkdir -p "$FABRIC_IMAGE_CCACHE_DIR"
  # Keep the host cache's size limit: the Dockerfile's 2G default would evict
  # the host's other builds.
  ccache_args=(--volume "$FABRIC_IMAGE_CCACHE_DIR:/var/cache/ccache-host"
    --build-arg FABRIC_CCACHE_DIR=/var/cache/ccache-host
    --build-arg "FABRIC_CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-$(ccache -k max_size 2>/dev/null || echo 5G)}")
  log "compiler cache: $FABRIC_IMAGE_CCACHE_DIR (host)"
fi
podman build --layers --network=host \
  --build-arg "DEBIAN_IMAGE=$base" "${ccache_args[@]}" \
  --ignorefile "$repo/deploy/Dockerfile.dockerignore" \
  -f "$repo/deploy/Dockerfile" -t "$tag" "${extra[@]}" "$repo"

# Each source change leaves the previous build stage (sources + build tree,
# ~150 MB of its own) untagged in the store; keep only the newest. Shared
# layers (the -dev packages) stay with it.
mapfile -t stale < <(podman images --noheading --filter dangling=true \
  --filter label=io.fabric-device-plugin.stage=build --format '{{.CreatedAt}} {{.ID}}' \
  | sort -r | tail -n +2 | awk '{print $NF}')
if ((${#stale[@]})); then podman rmi "${stale[@]}" >/dev/null 2>&1 || true; fi
