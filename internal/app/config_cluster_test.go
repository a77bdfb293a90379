package app

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/config"
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
		{name: "ca file missing", yaml: pg + "cluster:\n  node: n1\n  advertise_url: https://h:1\n  secret: " + secret + "\n  ca_file: /nonexistent/ca.pem\n",
			want: []string{"cluster.ca_file: reading the CA certificates", "/nonexistent/ca.pem"}},
		{name: "require_tls with http", yaml: pg + "cluster:\n  node: n1\n  advertise_url: http://h:1\n  secret: " + secret + "\n  require_tls: true\n",
			want: []string{`cluster.require_tls: advertise_url "http://h:1" is plain http`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "sandboxapi.yaml")
			if err := os.WriteFile(path, []byte("version: v1\n"+tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfigWith(path, tc.o)
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

// TestSplitSecrets: SANDBOXAPI_CLUSTER_PREVIOUS_SECRETS separates its
// secrets with commas, whitespace or both; empty pieces are dropped.
func TestSplitSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		raw  string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{"a,b", []string{"a", "b"}},
		{"a b", []string{"a", "b"}},
		{" a , b ", []string{"a", "b"}},
		{"a,,b,", []string{"a", "b"}},
		{"a\tb\nc\r\n", []string{"a", "b", "c"}},
		{",", nil},
		{" , \n", nil},
		{"x-y_z.=+/", []string{"x-y_z.=+/"}},
	} {
		if got := config.SplitSecrets(tc.raw); !slices.Equal(got, tc.want) {
			t.Errorf("config.SplitSecrets(%q) = %q, want %q", tc.raw, got, tc.want)
		}
	}
}

// TestClusterPreviousSecrets: cluster.previous_secrets is read from the
// file, SANDBOXAPI_CLUSTER_PREVIOUS_SECRETS replaces it (separators only:
// an empty list), an empty variable leaves it, and its problems are
// reported by position without the secrets.
func TestClusterPreviousSecrets(t *testing.T) {
	t.Parallel()
	const (
		secret = "0123456789abcdef0123456789abcdef"
		prev1  = "previous-one-0123456789abcdef-0123"
		prev2  = "previous-two-0123456789abcdef-0123"
		node   = "store:\n  url: postgres://u:p@db/x\ncluster:\n  node: n1\n  advertise_url: http://10.0.0.1:8080\n  secret: " + secret + "\n"
	)
	for _, tc := range []struct {
		name      string
		yaml      string
		env       string
		secretEnv string
		want      []string
		err       []string
	}{
		{name: "none", yaml: node},
		{name: "file", yaml: node + "  previous_secrets: [" + prev1 + "]\n", want: []string{prev1}},
		{name: "file, empty variable", yaml: node + "  previous_secrets:\n    - " + prev1 + "\n    - " + prev2 + "\n",
			want: []string{prev1, prev2}},
		{name: "variable", yaml: node, env: prev1, want: []string{prev1}},
		{name: "variable over file", yaml: node + "  previous_secrets: [" + prev1 + "]\n", env: prev2 + ", " + prev1 + "\n",
			want: []string{prev2, prev1}},
		{name: "variable of separators empties the file's", yaml: node + "  previous_secrets: [" + prev1 + "]\n", env: ","},
		{name: "variable with the current secret", yaml: node, env: prev1 + " " + secret,
			err: []string{"cluster.previous_secrets[1]: equal to secret"}},
		{name: "secret from the variable equal to a previous one", yaml: node + "  previous_secrets: [" + prev1 + "]\n",
			secretEnv: prev1, err: []string{"cluster.previous_secrets[0]: equal to secret"}},
		{name: "short and duplicate", yaml: node, env: prev1 + ",tooshort-secretpw," + prev1,
			err: []string{"cluster.previous_secrets[1]: must be at least 32 bytes, got 17", "cluster.previous_secrets[2]: the same as previous_secrets[0]"}},
		{name: "too many", yaml: node, env: strings.Join([]string{prev1 + "1", prev1 + "2", prev1 + "3", prev1 + "4", prev1 + "5"}, ","),
			err: []string{"cluster.previous_secrets: at most 4, got 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "sandboxapi.yaml")
			if err := os.WriteFile(path, []byte("version: v1\n"+tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			c, err := LoadConfigWith(path, Overrides{ClusterPreviousSecrets: tc.env, ClusterSecret: tc.secretEnv})
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatal("accepted")
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				for _, s := range append(config.SplitSecrets(tc.env), secret, prev1) {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error %q prints a secret", err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Cluster.PreviousSecrets, tc.want) && !(len(tc.want) == 0 && len(c.Cluster.PreviousSecrets) == 0) {
				t.Fatalf("previous_secrets = %q, want %q", c.Cluster.PreviousSecrets, tc.want)
			}
		})
	}
}
