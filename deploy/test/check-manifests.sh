#!/usr/bin/env bash
# Checks deploy/: kustomize base and overlays, the Helm chart (rendered without
# helm), the example workloads and the Dockerfile. Needs node (>= 18) and npm;
# kubectl, shellcheck and unshare are used when present. Installs its npm
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

exec node check-manifests.mjs "$@"
