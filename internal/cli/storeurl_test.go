package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

// TestStoreURLFromEnvironment: with SANDBOXAPI_STORE_URL set, the CLI's
// store is that PostgreSQL database (keys land there, no SQLite file is
// made) and doctor checks it.
func TestStoreURLFromEnvironment(t *testing.T) {
	url := testenv.PostgresURL(t)
	t.Setenv("SANDBOXAPI_STORE_URL", url)
	dir := t.TempDir()
	run := func(args ...string) (string, int) {
		var out, errw bytes.Buffer
		code := Run(t.Context(), append(append([]string{"sandboxapi"}, args...), "--data-dir", dir), &out, &errw)
		return out.String() + errw.String(), code
	}
	if out, code := run("keys", "create", "--plan", "PRO", "--name", "pg-test"); code != 0 {
		t.Fatalf("keys create: exit %d\n%s", code, out)
	}
	st, err := store.OpenURL(t.Context(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys, err := st.ListKeys(t.Context())
	if err != nil || len(keys) != 1 || keys[0].Name != "pg-test" {
		t.Fatalf("keys in PostgreSQL: %+v, %v", keys, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sandboxapi.db")); !os.IsNotExist(err) {
		t.Fatalf("a SQLite file was made next to the PostgreSQL store: %v", err)
	}
	out, _ := run("doctor")
	if !strings.Contains(out, "PostgreSQL store opens at schema version") {
		t.Fatalf("doctor does not check the PostgreSQL store:\n%s", out)
	}
	if strings.Contains(out, url) {
		t.Fatalf("doctor prints the store URL:\n%s", out)
	}
}
