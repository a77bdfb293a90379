package api

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// BenchmarkRateTokens is the per-request cost of the rate bucket, side by
// side: the in-memory bucket and the store's on SQLite and PostgreSQL
// (the throwaway local server), each as the seam alone (take) and as a
// whole authenticated request, GET /v1/runtimes through ServeHTTP
// (request). Every token is granted (a plan of 10^9 a minute), the path
// of nearly every request. Run:
//
//	go test -run '^$' -bench BenchmarkRateTokens -benchtime 2s -count 3 ./api
func BenchmarkRateTokens(b *testing.B) {
	ctx := context.Background()
	openStore := func(b *testing.B, url string) RateTokens {
		st, err := store.OpenURL(ctx, url, filepath.Join(b.TempDir(), "sandboxapi.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { st.Close() })
		return st
	}
	backends := []struct {
		name string
		open func(b *testing.B) RateTokens
	}{
		{"memory", func(*testing.B) RateTokens { return &rateLimiter{} }},
		{"sqlite", func(b *testing.B) RateTokens { return openStore(b, "") }},
		{"postgres", func(b *testing.B) RateTokens { return openStore(b, testenv.PostgresURL(b)) }},
	}
	plans, err := LoadPlans([]byte("version: v1\nplans:\n  PRO: {sessions: true, max_sessions: 2, max_timeout: 30s, requests_per_minute: 1000000000}\n"))
	if err != nil {
		b.Fatal(err)
	}
	for _, be := range backends {
		b.Run(be.name+"/take", func(b *testing.B) {
			rt := be.open(b)
			for b.Loop() {
				if ok, _, err := rt.TakeRateToken(ctx, "id-PRO", 1_000_000_000, time.Now()); !ok || err != nil {
					b.Fatalf("refused: %v", err)
				}
			}
		})
		b.Run(be.name+"/request", func(b *testing.B) {
			srv := New(Config{MaxBodyBytes: 1 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16, MaxIdleTTL: time.Hour},
				Deps{Sandboxes: newFakeSandboxes(), Keys: fakeKeys{}, Plans: plans, Log: slog.New(slog.NewJSONHandler(io.Discard, nil)),
					RateTokens: be.open(b)})
			for b.Loop() {
				req := httptest.NewRequest("GET", "/v1/runtimes", nil)
				req.Header.Set("X-RapidAPI-Key", "key-PRO")
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatalf("status %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}
