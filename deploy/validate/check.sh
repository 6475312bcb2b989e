#!/usr/bin/env bash
# Offline validation of Strata's deployment, in layers:
#   render      `kubectl kustomize` builds every overlay and the TFJob
#   schema      every rendered object against the Kubernetes API types
#   policy      Strata's rules (probes, resources, security, PDBs, cluster
#               spec against replicas, elected coordinators and etcd,
#               replicated PS tasks, network policy)
#   dockerfile  the image's Dockerfile rules
#
# Usage:
#   check.sh [--out DIR]                 all layers over deploy/k8s/overlays/*,
#                                        deploy/kubeflow and deploy/docker
#                                        (rendered YAML kept in DIR, default
#                                        build/deploy)
#   check.sh render PATH OUT.yaml        one kustomization directory, or one
#                                        manifest file wrapped in a throwaway
#                                        kustomization
#   check.sh schema|policy FILE...       one layer over rendered files
#   check.sh dockerfile FILE
#
# Exit: 0 clean; 1 a layer reported findings; 2 usage; 3 a tool is missing
# (kubectl, node or npm: `make deploy-check` installs node and npm).
# Installs the pinned npm packages (package-lock.json) with `npm ci` when
# node_modules is missing or stale.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
deploy="$(dirname "$here")"
root="$(dirname "$deploy")"

need() {
  if ! command -v "$1" >/dev/null 2>&1; then
    echo "check: $1 not found; $2" >&2
    exit 3
  fi
}

# npm ci when node_modules does not match package-lock.json. Serialized, as
# several checks may start at once.
ensure_node_modules() {
  need node "install nodejs and npm (make deploy-check does)"
  need npm "install nodejs and npm (make deploy-check does)"
  local want stamp="$here/node_modules/.strata-lock-sha256"
  want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
  (
    flock 9
    if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
      echo "check: npm ci in $here (pinned by package-lock.json)" >&2
      (cd "$here" && npm ci --no-audit --no-fund --prefer-offline >&2)
      echo "$want" >"$stamp"
    fi
  ) 9>"${TMPDIR:-/tmp}/strata-deploy-validate.lock"
}

render() {
  need kubectl "the render layer needs kubectl (with kustomize)"
  local src="$1" out="$2" dir tmp=""
  if [[ -d "$src" ]]; then
    dir="$src"
  else
    tmp="$(mktemp -d)"
    cp "$src" "$tmp/resources.yaml"
    printf 'apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - resources.yaml\n' \
      >"$tmp/kustomization.yaml"
    dir="$tmp"
  fi
  local rc=0 err
  err="$(kubectl kustomize "$dir" 2>&1 >"$out")" || rc=$?
  [[ -n "$tmp" ]] && rm -rf "$tmp"
  if [[ $rc -ne 0 ]]; then
    # kubectl prefixes its error with a klog header; keep the message.
    err="$(sed -E 's/^[EWIF][0-9]{4} [0-9:.]+ +[0-9]+ [^]]+\] //' <<<"$err")"
    echo "render: $src: ${err//$'\n'/ }"
    echo "render: 1 finding in $src"
    return 1
  fi
  echo "render: ok ($src -> $out)"
}

layer() {
  ensure_node_modules
  node "$here/validate.js" "$@"
}

all() {
  local out="$1" failed=0 name
  mkdir -p "$out"
  local rendered=()
  for dir in "$deploy"/k8s/overlays/*/ "$deploy/kubeflow/"; do
    dir="${dir%/}"
    name="$(basename "$dir")"
    if render "$dir" "$out/$name.yaml"; then
      rendered+=("$out/$name.yaml")
    else
      failed=1
    fi
  done
  for f in "${rendered[@]}"; do
    layer schema "$f" || failed=1
    layer policy "$f" || failed=1
  done
  layer dockerfile "$deploy/docker/Dockerfile" || failed=1
  if [[ $failed -ne 0 ]]; then
    echo "check: FAILED" >&2
    return 1
  fi
  echo "check: every overlay, the TFJob and the Dockerfile pass render, schema and policy"
}

case "${1:-}" in
  render)
    [[ $# -eq 3 ]] || { echo "usage: check.sh render PATH OUT.yaml" >&2; exit 2; }
    render "$2" "$3"
    ;;
  schema|policy|dockerfile)
    [[ $# -ge 2 ]] || { echo "usage: check.sh $1 FILE..." >&2; exit 2; }
    layer "$@"
    ;;
  ""|--out)
    out="$root/build/deploy"
    if [[ "${1:-}" == --out ]]; then
      [[ $# -eq 2 ]] || { echo "usage: check.sh --out DIR" >&2; exit 2; }
      out="$2"
    fi
    all "$out"
    ;;
  *)
    echo "usage: check.sh [--out DIR] | render PATH OUT.yaml | schema|policy FILE... | dockerfile FILE" >&2
    exit 2
    ;;
esac
