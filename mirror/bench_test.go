package mirror

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
)

// benchMirror admits ten wheels of one project and ten npm versions.
func benchMirror(b *testing.B) (*Mirror, string) {
	b.Helper()
	ctx := context.Background()
	m := newTestMirror(b, true)
	for i := 0; i < 10; i++ {
		fn, data := buildWheel(b, wheelSpec{name: "benchpkg", version: fmt.Sprintf("1.%d", i)})
		if _, err := m.AddWheel(ctx, fn, data, "bench", nil); err != nil {
			b.Fatal(err)
		}
		if _, err := m.AddNPMTarball(ctx, npmFixture(b, "bench-pkg", fmt.Sprintf("1.%d.0", i)), "bench", nil); err != nil {
			b.Fatal(err)
		}
	}
	return m, serveMirror(b, m).URL
}

func benchGet(b *testing.B, u, accept string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			req.Header.Set("Accept", accept)
			r, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
			if r.StatusCode != 200 {
				b.Errorf("status %d", r.StatusCode)
				return
			}
		}
	})
}

func BenchmarkSimpleProjectHTML(b *testing.B) {
	_, u := benchMirror(b)
	benchGet(b, u+"/mirror/pypi/simple/benchpkg/", "text/html")
}

func BenchmarkSimpleProjectJSON(b *testing.B) {
	_, u := benchMirror(b)
	benchGet(b, u+"/mirror/pypi/simple/benchpkg/", "application/vnd.pypi.simple.v1+json")
}

func BenchmarkPackumentAbbreviated(b *testing.B) {
	_, u := benchMirror(b)
	benchGet(b, u+"/mirror/npm/bench-pkg", npmAbbreviated)
}

func BenchmarkPackumentFull(b *testing.B) {
	_, u := benchMirror(b)
	benchGet(b, u+"/mirror/npm/bench-pkg", "application/json")
}
