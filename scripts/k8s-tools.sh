#!/usr/bin/env bash
# Installs what the Kubernetes manifest checks (internal/deploycheck) need,
# from the Go module proxy only, into a cache folder (default
# /var/cache/sandboxapi/testtools, or $1):
#   - kubeconform, the validator;
#   - kustomize, only when there is no kubectl (whose `kubectl kustomize`
#     renders the same);
#   - the Kubernetes API's JSON schemas, for the oldest and the newest
#     Kubernetes the manifests are meant for: the OpenAPI document of the
#     k8s.io/kubernetes module (api/openapi-spec/swagger.json) converted for
#     kubeconform by ./internal/deploycheck/k8sschemas (strict: unknown
#     fields are errors). kubeconform's usual schema source is not reachable
#     from here; this one is the API's own definition, offline.
# Prints the environment the tests read, for eval:
#   eval "$(scripts/k8s-tools.sh)"
#   go test ./internal/deploycheck
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local
tools=${1:-/var/cache/sandboxapi/testtools}
kubeconform_version=v0.8.0
kustomize_version=v5.8.1      # v5.8.2 and later need a newer Go than 1.26
kubernetes_versions="v1.35.4 v1.37.2"   # the APIs the manifests are checked against
mkdir -p "$tools/bin"
retry() { "$@" || { sleep 5; "$@"; } || { sleep 15; "$@"; }; }
retry env GOBIN="$tools/bin" go install "github.com/yannh/kubeconform/cmd/kubeconform@$kubeconform_version" >&2
if ! command -v kubectl >/dev/null; then
  retry env GOBIN="$tools/bin" go install "sigs.k8s.io/kustomize/kustomize/v5@$kustomize_version" >&2
  echo "export SANDBOXAPI_KUSTOMIZE=$tools/bin/kustomize"
fi
# Each module zip (about 20 MB) lands in the Go module cache; the schemas are
# regenerated every time (a second each), so a change of the converter applies.
go build -o "$tools/bin/k8sschemas" ./internal/deploycheck/k8sschemas
out="$tools/k8s-schemas"
rm -rf "$out.new" && mkdir -p "$out.new"
schema_dirs=
for v in $kubernetes_versions; do
  k8s_dir=$(cd / && retry go mod download -json "k8s.io/kubernetes@$v" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  "$tools/bin/k8sschemas" -swagger "$k8s_dir/api/openapi-spec/swagger.json" -out "$out.new/$v" >&2
  schema_dirs=${schema_dirs:+$schema_dirs:}$out/$v
done
rm -rf "$out" && mv "$out.new" "$out"
echo "export SANDBOXAPI_KUBECONFORM=$tools/bin/kubeconform"
echo "export SANDBOXAPI_K8S_SCHEMAS=$schema_dirs"
