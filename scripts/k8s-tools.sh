#!/usr/bin/env bash
# Installs what the Kubernetes manifest checks (internal/deploycheck) need,
# from the Go module proxy only, into a cache folder (default
# /var/cache/sandboxapi/testtools, or $1):
#   - kubeconform, the validator;
#   - kustomize, only when there is no kubectl (whose `kubectl kustomize`
#     renders the same);
#   - the Kubernetes API's JSON schemas: the OpenAPI document of the
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
kubernetes_version=v1.34.4    # the API the manifests are checked against
mkdir -p "$tools/bin"
retry() { "$@" || { sleep 5; "$@"; } || { sleep 15; "$@"; }; }
retry env GOBIN="$tools/bin" go install "github.com/yannh/kubeconform/cmd/kubeconform@$kubeconform_version" >&2
if ! command -v kubectl >/dev/null; then
  retry env GOBIN="$tools/bin" go install "sigs.k8s.io/kustomize/kustomize/v5@$kustomize_version" >&2
  echo "export SANDBOXAPI_KUSTOMIZE=$tools/bin/kustomize"
fi
# The module zip (about 18 MB) lands in the Go module cache; the schemas are
# regenerated every time (a second), so a change of the converter applies.
k8s_dir=$(cd / && retry go mod download -json "k8s.io/kubernetes@$kubernetes_version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
schemas="$tools/k8s-schemas/$kubernetes_version"
rm -rf "$schemas.new"
go run ./internal/deploycheck/k8sschemas -swagger "$k8s_dir/api/openapi-spec/swagger.json" -out "$schemas.new" >&2
rm -rf "$schemas" && mv "$schemas.new" "$schemas"
echo "export SANDBOXAPI_KUBECONFORM=$tools/bin/kubeconform"
echo "export SANDBOXAPI_K8S_SCHEMAS=$schemas"
