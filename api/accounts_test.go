package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// The adapters below join the API to a real SQLite store the way the CLI
// does (internal/cli/serve.go).

type sqliteKeys struct{ st *store.Store }

func (k sqliteKeys) Lookup(ctx context.Context, hash string) (string, string, string, error) {
	row, err := k.st.KeyByHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return "", "", "", ErrUnknownKey
	}
	if err != nil {
		return "", "", "", err
	}
	return row.ID, row.Name, row.Plan, nil
}

type sqliteMeter struct{ w *store.UsageWriter }

func (m sqliteMeter) Record(u Usage) {
	m.w.Record(store.UsageRow{KeyID: u.KeyID, Route: u.Route, Status: u.Status, DurationMS: u.Duration.Milliseconds(),
		BytesIn: u.BytesIn, BytesOut: u.BytesOut, ExecMS: u.ExecMillis, At: u.At})
}

type sqliteUsage struct {
	st *store.Store
	w  *store.UsageWriter
}

func (u sqliteUsage) UsageTotals(ctx context.Context, keyID string, since time.Time) ([]wire.UsageTotal, error) {
	u.w.Flush(ctx)
	rows, err := u.st.UsageTotals(ctx, keyID, since)
	out := make([]wire.UsageTotal, 0, len(rows))
	for _, r := range rows {
		out = append(out, wire.UsageTotal(r))
	}
	return out, err
}

// slowSandboxes makes stateless executions take at least d, so the
// metered duration has something to show.
type slowSandboxes struct {
	*fakeSandboxes
	d time.Duration
}

func (s slowSandboxes) ExecuteStateless(ctx context.Context, owner string, req sandbox.ExecRequest) (sandbox.Result, error) {
	time.Sleep(s.d)
	return s.fakeSandboxes.ExecuteStateless(ctx, owner, req)
}

// TestAccountsOnSQLite drives keys and metering through the API on a real
// store: each request's status, bytes, duration and execution time are
// recorded under its key; GET /v1/usage shows the caller only its own
// rows; a revoked key is refused on its very next request.
func TestAccountsOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, k := range []store.KeyRow{
		{ID: "ka", Name: "a", Plan: "PRO", Hash: HashKey("secret-a"), CreatedAt: time.Now()},
		{ID: "kb", Name: "b", Plan: "BASIC", Hash: HashKey("secret-b"), CreatedAt: time.Now()},
	} {
		if err := st.InsertKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	w := store.NewUsageWriter(st, time.Hour, log)
	defer w.Close()
	plans, err := LoadPlans(configs.Plans)
	if err != nil {
		t.Fatal(err)
	}
	const execDelay = 30 * time.Millisecond
	srv := New(Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16, MaxIdleTTL: time.Hour},
		Deps{Sandboxes: slowSandboxes{newFakeSandboxes(), execDelay}, Keys: sqliteKeys{st}, Plans: plans, Meter: sqliteMeter{w}, Log: log,
			Usage: sqliteUsage{st: st, w: w}})
	a := map[string]string{"X-API-Key": "secret-a"}
	b := map[string]string{"Authorization": "Bearer secret-b"}

	type sent struct {
		key, route     string
		status         int
		in, out        int64
		exec, minDurMS int64
	}
	var want []sent
	do := func(h map[string]string, key, method, path, route, body string, status int, exec, minDur int64) {
		t.Helper()
		rec := send(t, srv, method, path, body, h)
		if rec.Code != status {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, rec.Code, status, rec.Body)
		}
		want = append(want, sent{key: key, route: route, status: status, in: int64(len(body)), out: int64(rec.Body.Len()), exec: exec, minDurMS: minDur})
	}
	execBody := `{"language":"python3","code":"print(1)"}`
	do(a, "ka", "POST", "/v1/execute", "POST /v1/execute", execBody, 200, 3, execDelay.Milliseconds())
	do(a, "ka", "GET", "/v1/sessions", "GET /v1/sessions", "", 200, 0, 0)
	do(a, "ka", "POST", "/v1/execute", "POST /v1/execute", `{"language":`, 400, 0, 0)
	do(b, "kb", "POST", "/v1/execute", "POST /v1/execute", execBody, 200, 3, execDelay.Milliseconds())
	do(b, "kb", "POST", "/v1/sessions", "POST /v1/sessions", `{"language":"python3"}`, 403, 0, 0)

	// Each caller's usage holds its own rows only.
	usage := func(h map[string]string) (string, []wire.UsageTotal) {
		t.Helper()
		rec := send(t, srv, "GET", "/v1/usage", "", h)
		if rec.Code != 200 {
			t.Fatalf("usage: %d %s", rec.Code, rec.Body)
		}
		doc := loadOpenAPI(t)
		if err := newSchemaValidator(t, doc).validate(map[string]any{"$ref": "#/components/schemas/Usage"}, rec.Body.Bytes()); err != nil {
			t.Errorf("usage reply does not match the document: %v\n%s", err, rec.Body)
		}
		var r struct {
			KeyID string            `json:"key_id"`
			Usage []wire.UsageTotal `json:"usage"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		return r.KeyID, r.Usage
	}
	for _, tc := range []struct {
		name      string
		h         map[string]string
		key       string
		requests  int64
		errors    int64
		execMS    int64
		minDurMS  int64
		bytesSent int64
	}{
		{name: "a", h: a, key: "ka", requests: 3, errors: 1, execMS: 3, minDurMS: execDelay.Milliseconds(), bytesSent: int64(len(execBody) + len(`{"language":`))},
		{name: "b", h: b, key: "kb", requests: 2, errors: 1, execMS: 3, minDurMS: execDelay.Milliseconds(), bytesSent: int64(len(execBody) + len(`{"language":"python3"}`))},
	} {
		id, rows := usage(tc.h)
		if id != tc.key {
			t.Errorf("%s: usage of key %q", tc.name, id)
		}
		var n, errs, exec, dur, in int64
		for _, r := range rows {
			if r.KeyID != tc.key {
				t.Errorf("%s: usage shows a row of key %q: %+v", tc.name, r.KeyID, r)
			}
			n, errs, exec, dur, in = n+r.Requests, errs+r.Errors, exec+r.ExecMS, dur+r.DurationMS, in+r.BytesIn
		}
		if n != tc.requests || errs != tc.errors || exec != tc.execMS || dur < tc.minDurMS || in != tc.bytesSent {
			t.Errorf("%s: totals requests %d errors %d exec %d ms duration %d ms bytes in %d; want %d, %d, %d, >= %d, %d",
				tc.name, n, errs, exec, dur, in, tc.requests, tc.errors, tc.execMS, tc.minDurMS, tc.bytesSent)
		}
	}

	// The rows as stored, one per request, in order.
	w.Flush(ctx)
	rows, err := st.DB().QueryContext(ctx, `SELECT key_id, route, status, duration_ms, bytes_in, bytes_out, exec_ms FROM usage WHERE route != 'GET /v1/usage' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var got []sent
	durs := []int64{}
	for rows.Next() {
		var s sent
		var dur int64
		if err := rows.Scan(&s.key, &s.route, &s.status, &dur, &s.in, &s.out, &s.exec); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
		durs = append(durs, dur)
	}
	rows.Close()
	if len(got) != len(want) {
		t.Fatalf("%d usage rows, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		w := want[i]
		if durs[i] < w.minDurMS {
			t.Errorf("row %d: duration %d ms, want at least %d", i, durs[i], w.minDurMS)
		}
		w.minDurMS, got[i].minDurMS = 0, 0
		if got[i] != w {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], w)
		}
	}

	// Revoked: the next request is a 401 with the JSON error, and is not
	// metered as the key's.
	if err := st.RevokeKey(ctx, "ka"); err != nil {
		t.Fatal(err)
	}
	rec := send(t, srv, "GET", "/v1/sessions", "", a)
	var eb errorBody
	if rec.Code != 401 || json.Unmarshal(rec.Body.Bytes(), &eb) != nil || eb.Error.Code != "unauthenticated" {
		t.Fatalf("revoked key: %d %s", rec.Code, rec.Body)
	}
	if rec := send(t, srv, "GET", "/v1/sessions", "", b); rec.Code != 200 {
		t.Fatalf("the other key after the revoke: %d %s", rec.Code, rec.Body)
	}
	w.Flush(ctx)
	var after int
	if err := st.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM usage WHERE key_id='ka' AND status=401`).Scan(&after); err != nil || after != 0 {
		t.Fatalf("the refused request was metered as the key's: %d %v", after, err)
	}
}
