// Command k8sschemas writes kubeconform's schema files for one Kubernetes
// version from that version's OpenAPI document (see package deploycheck):
//
//	go run ./internal/deploycheck/k8sschemas -swagger api/openapi-spec/swagger.json -out DIR
//
// scripts/k8s-tools.sh runs it on the k8s.io/kubernetes module that the Go
// module proxy serves; then
//
//	kubeconform -strict -schema-location 'DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json' FILE
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/sandboxapi/sandboxapi/internal/deploycheck"
)

func main() {
	swagger := flag.String("swagger", "", "the OpenAPI v2 document (api/openapi-spec/swagger.json of k8s.io/kubernetes)")
	out := flag.String("out", "", "folder to write the schemas into")
	flag.Parse()
	if *swagger == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	n, err := deploycheck.WriteSchemas(*swagger, *out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8sschemas:", err)
		os.Exit(1)
	}
	fmt.Printf("%d kinds in %s\n", n, *out)
}
