package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// logLines returns the log's JSON lines whose msg is msg.
func logLines(t *testing.T, l *testenv.LogBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// TestStoreOutageAnswers503 runs the API on a real PostgreSQL store (keys,
// session slots, rate buckets, metering) that it stops (pg_ctl stop -m
// fast) and starts again, as an operator's restart does. While it is
// down: a key the store resolved within the cache's TTL keeps working for
// calls that need nothing else from the store (the rate limit falls back
// to this node's bucket); any other call answers 503 store_unavailable
// with Retry-After at once, logged once with its cause; a key revoked
// before the outage works at most the TTL after its last lookup, and a
// key the store refused is refused. After the restart every call succeeds
// on the same server, and what was metered during the outage is counted.
func TestStoreOutageAnswers503(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	st, err := store.OpenURL(ctx, pg.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := map[string]string{"ka": "secret-a", "kb": "secret-b", "kc": "secret-c", "kd": "secret-d"}
	for id, secret := range keys {
		if err := st.InsertKey(ctx, store.KeyRow{ID: id, Name: id, Plan: "PRO", Hash: HashKey(secret), CreatedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	var logs testenv.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	w := store.NewUsageWriter(st, 50*time.Millisecond, log)
	defer w.Close()
	plans, err := LoadPlans(configs.Plans)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 3 * time.Second
	srv := New(Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16, MaxIdleTTL: time.Hour, KeyCacheTTL: ttl},
		Deps{Sandboxes: newFakeSandboxes(), Keys: sqliteKeys{st}, Plans: plans, Meter: sqliteMeter{w}, Log: log,
			Usage: sqliteUsage{st: st, w: w}, SessionSlots: st, RateTokens: st})
	unavailable := 0
	call := func(key, method, path, body string, want int) {
		t.Helper()
		start := time.Now()
		rec := send(t, srv, method, path, body, map[string]string{"X-API-Key": keys[key]})
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("%s %s (%s) took %v", method, path, key, d)
		}
		if rec.Code != want {
			t.Fatalf("%s %s (%s): %d, want %d: %s", method, path, key, rec.Code, want, rec.Body)
		}
		if want != 503 {
			return
		}
		unavailable++
		if ra := rec.Header().Get("Retry-After"); ra != "2" {
			t.Errorf("%s %s: Retry-After %q, want 2", method, path, ra)
		}
		var body2 errorBody
		if err := json.Unmarshal(rec.Body.Bytes(), &body2); err != nil || body2.Error.Code != "store_unavailable" || body2.Error.RequestID == "" {
			t.Errorf("%s %s: body %s, want code store_unavailable with a request id", method, path, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "SQLSTATE") || strings.Contains(rec.Body.String(), "127.0.0.1") {
			t.Errorf("%s %s: the reply echoes the cause: %s", method, path, rec.Body)
		}
	}
	const exec = `{"language":"python3","code":"print(1)"}`

	// Up: a, b and d are looked up (and cached); b is revoked and
	// refused on its next call, which forgets it; d is revoked without a
	// lookup since (another node revoked it just before the outage).
	call("ka", "GET", "/v1/runtimes", "", 200)
	call("kb", "GET", "/v1/runtimes", "", 200)
	call("kd", "GET", "/v1/runtimes", "", 200)
	for _, id := range []string{"kb", "kd"} {
		if err := st.RevokeKey(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	call("kb", "GET", "/v1/runtimes", "", 401)
	lastLookupD := time.Now()

	pg.Stop(t)
	stopped := time.Now()
	call("ka", "GET", "/v1/runtimes", "", 200)                        // cached key, in-memory rate bucket
	call("ka", "POST", "/v1/execute", exec, 200)                      // needs nothing else from the store
	call("kc", "GET", "/v1/runtimes", "", 503)                        // never looked up: cannot be checked
	call("kb", "GET", "/v1/runtimes", "", 503)                        // refused while up: not cached
	call("ka", "POST", "/v1/sessions", `{"language":"python3"}`, 503) // a session slot is a row
	call("ka", "GET", "/v1/usage", "", 503)                           // usage is read from the store
	if time.Since(lastLookupD) < ttl {
		call("kd", "GET", "/v1/runtimes", "", 200) // revoked, but within the TTL of its last lookup
	}
	// Past the TTL of their last lookup, cached keys stop working too.
	time.Sleep(ttl - time.Since(stopped) + 100*time.Millisecond)
	call("ka", "GET", "/v1/runtimes", "", 503)
	call("kd", "GET", "/v1/runtimes", "", 503)

	got := logLines(t, &logs, "store unavailable")
	if len(got) != unavailable {
		t.Errorf("%d 503 replies, %d 'store unavailable' log lines; want one each", unavailable, len(got))
	}
	for _, l := range got {
		if l["err"] == nil || l["err"] == "" || l["request_id"] == nil {
			t.Errorf("log line without cause or request id: %v", l)
		}
	}

	pg.Start(t)
	call("ka", "GET", "/v1/runtimes", "", 200)
	call("kc", "GET", "/v1/runtimes", "", 200)
	call("kd", "GET", "/v1/runtimes", "", 401) // revoked: the store says so again
	call("ka", "POST", "/v1/sessions", `{"language":"python3"}`, 201)
	rec := send(t, srv, "GET", "/v1/usage", "", map[string]string{"X-API-Key": keys["ka"]})
	if rec.Code != 200 {
		t.Fatalf("usage after the restart: %d %s", rec.Code, rec.Body)
	}
	var u struct {
		Usage []struct {
			Route    string `json:"route"`
			Requests int64  `json:"requests"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &u); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, r := range u.Usage {
		n += r.Requests
	}
	// Metered for ka: 1 before, 4 during the outage (the calls it was
	// authenticated for, 503s of sessions and usage included), 2 after.
	if n != 7 {
		t.Errorf("ka's usage after the restart: %d requests, want 7: %s", n, rec.Body)
	}
}

// TestKeyCache: entries live for the TTL after their last put, a forgotten
// key is gone at once, a negative TTL caches nothing, and a full cache
// makes room from expired entries only.
func TestKeyCache(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_000_000, 0)
	k := cachedKey{id: "k1", name: "one", plan: "PRO"}
	for _, tc := range []struct {
		name   string
		ttl    time.Duration
		steps  func(c *keyCache)
		at     time.Duration // when get asks, after t0
		wantOK bool
	}{
		{name: "default TTL, fresh", ttl: 0, steps: func(c *keyCache) { c.put("h", k, t0) }, at: DefaultKeyCacheTTL - time.Millisecond, wantOK: true},
		{name: "default TTL, expired", ttl: 0, steps: func(c *keyCache) { c.put("h", k, t0) }, at: DefaultKeyCacheTTL, wantOK: false},
		{name: "put again renews", ttl: time.Second, steps: func(c *keyCache) { c.put("h", k, t0); c.put("h", k, t0.Add(900*time.Millisecond)) }, at: 1500 * time.Millisecond, wantOK: true},
		{name: "forgotten", ttl: time.Second, steps: func(c *keyCache) { c.put("h", k, t0); c.forget("h") }, at: 0, wantOK: false},
		{name: "disabled", ttl: -1, steps: func(c *keyCache) { c.put("h", k, t0) }, at: 0, wantOK: false},
		{name: "full of live keys", ttl: time.Minute, steps: func(c *keyCache) {
			for i := range keyCacheMax {
				c.put(strconv.Itoa(i), k, t0)
			}
			c.put("h", k, t0)
		}, at: 0, wantOK: false},
		{name: "full of expired keys", ttl: time.Minute, steps: func(c *keyCache) {
			for i := range keyCacheMax {
				c.put(strconv.Itoa(i), k, t0.Add(-time.Hour))
			}
			c.put("h", k, t0)
		}, at: 0, wantOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newKeyCache(tc.ttl)
			tc.steps(c)
			got, ok := c.get("h", t0.Add(tc.at))
			if ok != tc.wantOK || (ok && (got.id != k.id || got.plan != k.plan)) {
				t.Fatalf("get = %+v, %v; want ok %v", got, ok, tc.wantOK)
			}
		})
	}
}
