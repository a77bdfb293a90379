package console

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

func networkJSON(n int) string {
	d := make([]string, n)
	for i := range d {
		d[i] = fmt.Sprintf("host-%06d.%s.example.com", i, strings.Repeat("x", 40))
	}
	b, _ := json.Marshal(map[string]any{"enabled": true, "allowed_domains": d})
	return string(b)
}

func TestReadNetwork(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		raw     string
		enabled bool
		n, more int
	}{
		{name: "none", raw: ``},
		{name: "empty object", raw: `{}`},
		{name: "on without a list", raw: `{"enabled":true}`, enabled: true},
		{name: "null list", raw: `{"allowed_domains":null,"enabled":true}`, enabled: true},
		{name: "short list", raw: `{"enabled":true,"allowed_domains":["a.example.com","b.example.com"]}`, enabled: true, n: 2},
		{name: "list at the shown cap", raw: networkJSON(MaxShownDomains), enabled: true, n: MaxShownDomains},
		{name: "long list", raw: networkJSON(5000), enabled: true, n: MaxShownDomains, more: 5000 - MaxShownDomains},
		{name: "other fields", raw: `{"x":{"y":[1,2]},"enabled":true,"allowed_domains":["a.example.com"],"z":null}`, enabled: true, n: 1},
		{name: "not an object", raw: `["a"]`},
		{name: "a number in the list", raw: `{"enabled":true,"allowed_domains":["a",1]}`},
		{name: "a list that is an object", raw: `{"enabled":true,"allowed_domains":{"a":1}}`},
		{name: "cut short", raw: `{"enabled":true,"allowed_domains":["a.example.com"`},
		{name: "enabled not a bool", raw: `{"enabled":"yes"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			enabled, domains, more := readNetwork(tc.raw, MaxShownDomains)
			if enabled != tc.enabled || len(domains) != tc.n || more != tc.more {
				t.Fatalf("readNetwork = %v, %d domains, %d more; want %v, %d, %d", enabled, len(domains), more, tc.enabled, tc.n, tc.more)
			}
		})
	}
}

// FuzzReadNetwork checks the stored network reader on any text: it keeps
// at most the entries asked for, and on a well-formed block agrees with
// encoding/json (the same flag, the first entries, the rest counted).
func FuzzReadNetwork(f *testing.F) {
	f.Add(`{"enabled":true,"allowed_domains":["a.example.com","b.example.com","c.example.com"]}`, 2)
	f.Add(`{"enabled":true,"allowed_domains":null}`, 1)
	f.Add(networkJSON(300), MaxShownDomains)
	f.Add(`{"allowed_domains":[`, 5)
	f.Add(`{"enabled":false,"enabled":true}`, 0)
	f.Fuzz(func(t *testing.T, raw string, keep int) {
		keep = max(0, min(keep, 1000))
		enabled, domains, more := readNetwork(raw, keep)
		if len(domains) > keep || more < 0 {
			t.Fatalf("kept %d of %d asked, %d more", len(domains), keep, more)
		}
		var want wire.Network // the block as the API writes it and the store keeps it
		if json.Unmarshal([]byte(raw), &want) != nil || !strings.HasPrefix(strings.TrimSpace(raw), "{") {
			return
		}
		if enabled != want.Enabled || more != max(0, len(want.AllowedDomains)-keep) ||
			!slices.Equal(domains, want.AllowedDomains[:min(keep, len(want.AllowedDomains))]) {
			// encoding/json matches keys without regard to case and keeps
			// the last of repeated keys; the reader is exact. Only a
			// block the API would write must agree.
			if strings.Contains(raw, `"enabled"`) && strings.Count(raw, `"enabled"`) == 1 && strings.Count(raw, `"allowed_domains"`) <= 1 &&
				!strings.ContainsAny(raw, "\\") && strings.Count(strings.ToLower(raw), `"enabled"`) == 1 &&
				strings.Count(strings.ToLower(raw), `"allowed_domains"`) <= 1 {
				t.Fatalf("readNetwork(%q, %d) = %v %q %d; encoding/json reads %+v", raw, keep, enabled, domains, more, want)
			}
		}
	})
}

// TestConsoleSessionsBounded fills a real SQLite store with sessions
// holding long allowed_domains lists (some far over today's cap, as rows
// stored before it) and checks that the sessions page is one small page
// with a link to the next, that the pages together list every session
// once, and that a session's page cuts its list.
func TestConsoleSessionsBounded(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, now := storeWithKey(t, "ULTRA")
	const total = 120
	big, huge := networkJSON(256), networkJSON(20000)
	for i := range total {
		nw := big
		if i%40 == 0 {
			nw = huge
		}
		r := store.SessionRow{ID: fmt.Sprintf("sess_%04d", i), KeyID: "key_a", Language: "python3", State: "running", Network: nw,
			CreatedAt: now.Add(time.Duration(i) * time.Second), LastUsedAt: now}
		if err := st.InsertSession(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	c := New(Deps{Admins: fakeAdmins{}, Readiness: fakeReadiness{}, Catalogue: fakeCatalogue{}, Sessions: NewStoreSessions(st, nil), Usage: fakeUsage{},
		Now: func() time.Time { return now }}, nil)
	seen := map[string]int{}
	path := "/console/sessions"
	for pages := 0; path != ""; pages++ {
		if pages > total {
			t.Fatal("the pages do not end")
		}
		resp, body := get(t, c, path, "sk_admin")
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d %.300s", path, resp.StatusCode, body)
		}
		if len(body) > 128<<10 {
			t.Fatalf("GET %s: a %d-byte page", path, len(body))
		}
		if !strings.Contains(body, "more</span>") {
			t.Fatalf("GET %s: no row says how many domains it leaves out", path)
		}
		for _, id := range sessionIDs(body) {
			seen[id]++
		}
		path = ""
		if _, rest, ok := strings.Cut(body, `rel="next" href="`); ok {
			path = strings.ReplaceAll(rest[:strings.IndexByte(rest, '"')], "&amp;", "&")
		}
	}
	if len(seen) != total {
		t.Fatalf("the pages list %d sessions, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s listed %d times", id, n)
		}
	}
	resp, body := get(t, c, "/console/sessions/sess_0040", "sk_admin")
	if resp.StatusCode != 200 || len(body) > 64<<10 || !strings.Contains(body, fmt.Sprintf("+%d more", 20000-MaxShownDomains)) {
		t.Fatalf("session page: %d, %d bytes: %.300s", resp.StatusCode, len(body), body)
	}
	for _, bad := range []string{"0", "-1", "x", "10001", "1&page=2", "99999999999999999999"} {
		if resp, _ := get(t, c, "/console/sessions?page="+bad, "sk_admin"); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("page=%s: %d, want 400", bad, resp.StatusCode)
		}
	}
}

// sessionIDs are the session links of a sessions page.
func sessionIDs(body string) []string {
	var out []string
	for _, part := range strings.Split(body, `href="/console/sessions/`)[1:] {
		out = append(out, part[:strings.IndexByte(part, '"')])
	}
	return out
}

// manyArtifacts is a catalogue of n artifacts.
type manyArtifacts struct {
	fakeCatalogue
	n int
}

func (m manyArtifacts) Artifacts(context.Context) ([]Artifact, error) {
	out := make([]Artifact, m.n)
	for i := range out {
		out[i] = Artifact{Manager: "pip", Name: fmt.Sprintf("pkg-%05d", i), Version: "1.0", Status: "admitted", Filename: "x.whl"}
	}
	return out, nil
}

// manyUsage is n keys' usage on one day.
type manyUsage struct{ n int }

func (m manyUsage) Usage(context.Context, time.Time) ([]UsageRow, error) {
	out := make([]UsageRow, m.n)
	for i := range out {
		out[i] = UsageRow{KeyID: fmt.Sprintf("key_%05d", i), Day: now.Format("2006-01-02"), Requests: 1}
	}
	return out, nil
}

// TestConsoleListPagesPaginated: the mirror and usage pages show one page
// of rows with a next link that keeps the filter.
func TestConsoleListPagesPaginated(t *testing.T) {
	t.Parallel()
	c := New(Deps{Admins: fakeAdmins{}, Readiness: fakeReadiness{}, Catalogue: manyArtifacts{n: 1050}, Sessions: fakeSessions{}, Usage: manyUsage{n: 450},
		Now: func() time.Time { return now }}, nil)
	cases := []struct {
		path, row string
		rows      int
		next      string
	}{
		{path: "/console/mirror?manager=pip", row: `<tr class="artifact">`, rows: artifactsPerPage, next: "/console/mirror?manager=pip&amp;page=2"},
		{path: "/console/mirror?manager=pip&page=11", row: `<tr class="artifact">`, rows: 50},
		{path: "/console/usage", row: `<td class="mono muted">`, rows: 0, next: "/console/usage?page=2"},
		{path: "/console/usage?page=3", row: "", rows: 0},
	}
	for _, tc := range cases {
		resp, body := get(t, c, tc.path, "sk_admin")
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", tc.path, resp.StatusCode)
		}
		if tc.row != "" && tc.rows > 0 {
			if n := strings.Count(body, tc.row); n != tc.rows {
				t.Errorf("GET %s: %d rows, want %d", tc.path, n, tc.rows)
			}
		}
		if got := strings.Contains(body, `rel="next"`); got != (tc.next != "") || tc.next != "" && !strings.Contains(body, `href="`+tc.next+`"`) {
			t.Errorf("GET %s: next link %v, want %q", tc.path, got, tc.next)
		}
	}
	if _, body := get(t, c, "/console/usage", "sk_admin"); strings.Count(body, "<tr><td>") != usageRowsPerPage {
		t.Errorf("usage page: %d rows, want %d", strings.Count(body, "<tr><td>"), usageRowsPerPage)
	}
	if resp, _ := get(t, c, "/console/mirror?page=x", "sk_admin"); resp.StatusCode != 400 {
		t.Errorf("mirror page=x: %d", resp.StatusCode)
	}
}
