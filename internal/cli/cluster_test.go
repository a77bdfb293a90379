package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// TestClusterStatus: `sandboxapi cluster status` lists the nodes of the
// store with their state and lease.
func TestClusterStatus(t *testing.T) {
	url := testenv.PostgresURL(t)
	t.Setenv("SANDBOXAPI_STORE_URL", url)
	st, err := store.OpenURL(t.Context(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	for _, n := range []store.NodeRow{
		{Name: "n1", URL: "http://10.0.0.1:8080", Capacity: 16, Free: 9, StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(10 * time.Second)},
		{Name: "n2", URL: "http://10.0.0.2:8080", Capacity: 16, StartedAt: now, RenewedAt: now, LeaseUntil: now.Add(-time.Minute)},
	} {
		if _, err := st.RegisterNode(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	var out, errw bytes.Buffer
	if code := Run(t.Context(), []string{"sandboxapi", "cluster", "status", "--data-dir", t.TempDir()}, &out, &errw); code != 0 {
		t.Fatalf("exit %d: %s", code, errw.String())
	}
	for _, want := range []string{"NODE", "n1", "alive", "9/16", "http://10.0.0.1:8080", "n2", "expired", "ran out"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestClusterStatusSingleNode: on a single node's store (SQLite, no node
// registered) `cluster status` prints no empty table: it says it is not in
// a cluster, on stderr, and exits 1.
func TestClusterStatusSingleNode(t *testing.T) {
	t.Setenv("SANDBOXAPI_STORE_URL", "")
	var out, errw bytes.Buffer
	code := Run(t.Context(), []string{"sandboxapi", "cluster", "status", "--data-dir", t.TempDir()}, &out, &errw)
	if code != 1 || out.Len() != 0 || !strings.Contains(errw.String(), "not in a cluster") || !strings.Contains(errw.String(), "cluster.node") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1, nothing, and a message that it is not in a cluster", code, out.String(), errw.String())
	}
}
