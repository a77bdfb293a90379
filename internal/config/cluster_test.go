package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterSection: a node needs an advertise URL, a secret of 32 bytes
// or more (from the file or SANDBOXAPI_CLUSTER_SECRET) and a PostgreSQL
// store; every problem is reported at once, and a short secret is never
// echoed. No node name is a single node, whatever else is set.
func TestClusterSection(t *testing.T) {
	t.Parallel()
	const secret = "0123456789abcdef0123456789abcdef"
	const pg = "store:\n  url: postgres://u:p@db/x\n"
	for _, tc := range []struct {
		name string
		yaml string
		o    Overrides
		want []string // empty: valid
	}{
		{name: "single node", yaml: "cluster:\n  lease: 1h\n"},
		{name: "node", yaml: pg + "cluster:\n  node: n1\n  advertise_url: http://10.0.0.1:8080\n  secret: " + secret + "\n"},
		{name: "secret and store from the environment", yaml: "cluster:\n  node: n1\n  advertise_url: https://n1.internal:8443\n",
			o: Overrides{ClusterSecret: secret, StoreURL: "postgres://db/x"}},
		{name: "everything missing", yaml: "cluster:\n  node: n1\n",
			want: []string{"cluster.advertise_url: required with node", "cluster.secret: required with node", "cluster.node: needs a PostgreSQL store"}},
		{name: "short secret", yaml: pg + "cluster:\n  node: n1\n  advertise_url: http://h:1\n  secret: tooshort-secretpw\n",
			want: []string{"cluster.secret: must be at least 32 bytes, got 17"}},
		{name: "bad name and url", yaml: pg + "cluster:\n  node: n 1\n  advertise_url: http://h:1/api\n  secret: " + secret + "\n",
			want: []string{`cluster.node: "n 1" is not a node name`, "cluster.advertise_url: \"http://h:1/api\": only scheme, host and port"}},
		{name: "url without port", yaml: pg + "cluster:\n  node: n1\n  advertise_url: http://h\n  secret: " + secret + "\n",
			want: []string{"is not http(s)://HOST:PORT"}},
		{name: "lease", yaml: pg + "cluster:\n  node: n1\n  advertise_url: http://h:1\n  secret: " + secret + "\n  lease: 500ms\n",
			want: []string{"cluster.lease: must be from 2s to 10m, got 500ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "sandboxapi.yaml")
			if err := os.WriteFile(path, []byte("version: v1\n"+tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadWith(path, tc.o)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if c.Cluster.Enabled() && len(c.Cluster.Secret) < 32 {
					t.Fatalf("secret not applied: %+v", c.Cluster)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secretpw") {
				t.Errorf("error echoes the secret: %v", err)
			}
		})
	}
}
