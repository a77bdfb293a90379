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

// FuzzPackageKey: a name the package page accepts is a plain package
// name (no path step, no markup, no control byte, bounded), and its key
// is accepted again as itself.
func FuzzPackageKey(f *testing.F) {
	for _, s := range [][2]string{
		{"pip", "Six"}, {"pip", "zope.interface"}, {"pip", "a__b..c"}, {"npm", "@scope/name"}, {"npm", "../x"},
		{"npm", "a\x00b"}, {"pip", "<script>"}, {"npm", "@a/@b/c"}, {"cargo", "serde"}, {"npm", ""},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, manager, name string) {
		key, ok := PackageKey(manager, name)
		if !ok {
			return
		}
		if len(name) > 214 || strings.Count(name, "/") > 1 || strings.HasPrefix(name, ".") || strings.Contains(name, "/.") ||
			strings.ContainsAny(name, "<>\"'&%\\ \x00\r\n") || key != strings.ToLower(key) {
			t.Fatalf("PackageKey(%q, %q) = %q, accepted", manager, name, key)
		}
		if again, ok := PackageKey(manager, key); !ok || again != key {
			t.Fatalf("the key %q of %q reads as %q, %v", key, name, again, ok)
		}
	})
}
