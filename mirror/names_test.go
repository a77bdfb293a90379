package mirror

import (
	"errors"
	"strings"
	"testing"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mgr     Manager
		in      string
		name    string
		version string
		ok      bool
	}{
		{Pip, "requests==2.32.4", "requests", "2.32.4", true},
		{Pip, "Jinja2==3.1.6", "Jinja2", "3.1.6", true},
		{Pip, "requests>=2", "", "", false},
		{Pip, "requests===2", "", "", false},
		{Pip, "../x==1", "", "", false},
		{NPM, "is-number@7.0.0", "is-number", "7.0.0", true},
		{NPM, "@types/node@20.1.0", "@types/node", "20.1.0", true},
		{NPM, "is-number@^7", "", "", false},
		{NPM, "@types/node", "", "", false},
		{NPM, "is-number", "", "", false},
	}
	for _, tt := range tests {
		s, err := ParseSpec(tt.mgr, tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseSpec(%s, %q) err = %v", tt.mgr, tt.in, err)
			continue
		}
		if err != nil && !errors.Is(err, ErrBadSpec) {
			t.Errorf("err %v is not ErrBadSpec", err)
		}
		if tt.ok && (s.Name != tt.name || s.Version != tt.version) {
			t.Errorf("ParseSpec(%q) = %+v", tt.in, s)
		}
	}
}

func TestNormalizePyPI(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"Jinja2": "jinja2", "zope.interface": "zope-interface", "A__b-.C": "a-b-c", "colorama_py": "colorama-py"} {
		if got := NormalizePyPI(in); got != want {
			t.Errorf("NormalizePyPI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseWheelFilename(t *testing.T) {
	t.Parallel()
	w, err := ParseWheelFilename("numpy-2.1.0-1-cp313-cp313-manylinux_2_17_x86_64.manylinux2014_x86_64.whl")
	if err != nil || w.Name != "numpy" || w.Build != "1" || w.Platform != "manylinux_2_17_x86_64.manylinux2014_x86_64" {
		t.Fatalf("got %+v, %v", w, err)
	}
	for _, bad := range []string{"x.whl", "a-1-py3-none.whl", "a-1-x-py3-none-any.whl", "../a-1-py3-none-any.whl", "a-1-py3-none-any.zip"} {
		if _, err := ParseWheelFilename(bad); err == nil {
			t.Errorf("ParseWheelFilename(%q) accepted", bad)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"requests==2.0", "@a/b@1.0.0", "x@", "==", "a==1==2", "@@1.0.0", "a@1.0.0-rc.1+b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, m := range []Manager{Pip, NPM} {
			spec, err := ParseSpec(m, s)
			if err != nil {
				continue
			}
			if strings.ContainsAny(spec.Name, "\\\x00 ") || strings.Contains(spec.Name, "..") && m == Pip {
				t.Fatalf("accepted name %q", spec.Name)
			}
			if strings.HasPrefix(spec.Name, ".") || strings.Contains(spec.Name, "/..") {
				t.Fatalf("accepted name %q", spec.Name)
			}
			if _, err := ParseSpec(m, spec.String()); err != nil {
				t.Fatalf("round trip of %q failed: %v", spec, err)
			}
		}
	})
}

func FuzzParseWheelFilename(f *testing.F) {
	for _, s := range []string{"a-1.0-py3-none-any.whl", "a-1.0-1-py3-none-any.whl", "-.whl", "a--py3-none-any.whl"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		w, err := ParseWheelFilename(s)
		if err != nil {
			return
		}
		if strings.ContainsAny(w.Name+w.Version, "/\\\x00") || !ValidName(Pip, w.Name) {
			t.Fatalf("accepted %q -> %+v", s, w)
		}
	})
}

func TestNegotiate(t *testing.T) {
	t.Parallel()
	pip := "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html; q=0.1, text/html; q=0.01"
	tests := []struct{ accept, want string }{
		{pip, simpleJSON},
		{"application/vnd.pypi.simple.v1+html; q=0.2, application/vnd.pypi.simple.v1+json; q=0.1", simpleHTML},
		{"text/html", textHTML},
		{"application/vnd.pypi.simple.latest+json", simpleLatestJSON},
		{"application/vnd.pypi.simple.v1+json;q=0", ""},
		{"image/png", ""},
		{"*/*", simpleJSON},
		{"text/*;q=0.5, application/vnd.pypi.simple.v1+html", simpleHTML},
	}
	for _, tt := range tests {
		if got := negotiate(tt.accept, simpleOffers); got != tt.want {
			t.Errorf("negotiate(%q) = %q, want %q", tt.accept, got, tt.want)
		}
	}
}

func FuzzParseNPMPath(f *testing.F) {
	for _, s := range []string{"is-number", "@scope%2fname", "@scope/name/-/name-1.0.0.tgz", "a/-/../../x", "%2e%2e/-/x.tgz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		name, file, ok := parseNPMPath(s)
		if !ok {
			return
		}
		if !ValidName(NPM, name) || strings.Contains(file, "/") {
			t.Fatalf("parseNPMPath(%q) = %q %q", s, name, file)
		}
	})
}
