package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzConsoleRequest: any path, query and key an outsider sends gets an
// answer, never a panic or a 500, and no page for anyone but an admin.
func FuzzConsoleRequest(f *testing.F) {
	for _, s := range [][3]string{
		{"/console", "", "sk_admin"}, {"/console/mirror", "q=req&status=refused", "sk_admin"},
		{"/console/sessions/sess_b", "", "sk_client"}, {"/console/sessions/../usage", "", "sk_admin"},
		{"/console/mirror", "status=%00&q=%ff", "sk_admin"}, {"/console/login", "", ""}, {"/console/", "", "x"},
		{"/console/mirror/pip/six", "page=2", "sk_admin"}, {"/console/mirror/npm/@s/x", "", "sk_admin"}, {"/console/mirror/pip/..%2fsix", "", "sk_admin"},
		{"/console/mirror/pip/six", "", "sk_client"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	c := newTestConsole()
	f.Fuzz(func(t *testing.T, path, query, key string) {
		if !strings.HasPrefix(path, "/console") {
			path = "/console/" + path
		}
		req, err := http.NewRequest("GET", "http://h"+path, nil)
		if err != nil {
			return
		}
		req.URL.RawQuery = query
		if key != "" && !strings.ContainsAny(key, "\r\n\x00") {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		rec := httptest.NewRecorder()
		c.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s?%s: %d", path, query, rec.Code)
		}
		if rest, ok := strings.CutPrefix(strings.TrimSuffix(req.URL.Path, "/"), "/console/mirror/"); ok && rec.Code == 200 {
			if m, name, _ := strings.Cut(rest, "/"); !validKey(m, name) {
				t.Fatalf("%s: a package page for a name that is not one", path)
			}
		}
		if key != "sk_admin" && rec.Code == 200 && !strings.HasSuffix(strings.TrimSuffix(req.URL.Path, "/"), "/login") {
			t.Fatalf("%s with key %q: 200", path, key)
		}
	})
}

func validKey(manager, name string) bool {
	_, ok := PackageKey(manager, name)
	return ok
}
