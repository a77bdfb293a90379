package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// maxErrorReply bounds the message of an error about client input: it
// quotes at most a few entries, each cut short.
const maxErrorReply = 2048

// FuzzNormalizeNetwork checks allowed_domains handling on any list (the
// entries are the lines of the input, repeated rep times): either a 400
// invalid_allowed_domains with a short message, or a list within the cap
// whose entries all parse, are pairwise distinct once canonical, keep the
// order sent, and cover every entry sent.
func FuzzNormalizeNetwork(f *testing.F) {
	f.Add("api.example.com\n*.example.com\nAPI.example.com.", 1)
	f.Add("a.example.com", sandbox.MaxAllowedDomains)
	f.Add("a.example.com", sandbox.MaxAllowedDomains+1)
	f.Add("*\n*.com\n1.2.3.4\nexample.com:443\n\x00", 1)
	f.Add("1.2.3.4\n1.2.3.4/32\n::ffff:1.2.3.4\n10.0.0.0/8\n1.2.3.4/24", 1)
	f.Add(strings.Repeat("a", 300)+".com", 3)
	f.Add("xn--bcher-kva.example\nbücher.example", 2)
	f.Fuzz(func(t *testing.T, lines string, rep int) {
		rep = max(1, min(rep, 2*sandbox.MaxAllowedDomains)) // the body cap bounds the rest
		var sent []string
		for range rep {
			sent = append(sent, strings.Split(lines, "\n")...)
		}
		n := &NetworkRequest{Enabled: true, AllowedDomains: append([]string(nil), sent...)}
		err := normalizeNetwork(n)
		if err != nil {
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != 400 || ae.Code != "invalid_allowed_domains" {
				t.Fatalf("error %v is not a 400 invalid_allowed_domains", err)
			}
			if len(ae.Message) > maxErrorReply {
				t.Fatalf("a %d-byte message", len(ae.Message))
			}
			return
		}
		if len(sent) > sandbox.MaxAllowedDomains {
			t.Fatalf("%d entries accepted over the cap of %d", len(sent), sandbox.MaxAllowedDomains)
		}
		got := n.AllowedDomains
		seen := map[string]bool{}
		i := 0
		for _, e := range got {
			if len(e) > sandbox.MaxDomainEntryBytes {
				t.Fatalf("entry of %d bytes accepted", len(e))
			}
			p, err := policy.ParseEntry(policy.ListAllowed, e)
			if err != nil {
				t.Fatalf("kept %q, which does not parse: %v", e, err)
			}
			if seen[p.String()] {
				t.Fatalf("kept %q twice: %q", p.String(), got)
			}
			seen[p.String()] = true
			for i < len(sent) && sent[i] != e { // got is a subsequence of sent
				i++
			}
			if i == len(sent) {
				t.Fatalf("%q out of order or not sent: %q from %q", e, got, sent)
			}
		}
		for _, e := range sent {
			if p, err := policy.ParseEntry(policy.ListAllowed, e); err != nil || !seen[p.String()] {
				t.Fatalf("sent %q lost (%v): %q", e, err, got)
			}
		}
	})
}

// FuzzExecuteShape checks env and files on any input: the env is the
// lines of names (name=value), the files the lines of paths, each list
// repeated rep times. Accepted input is within every cap; refused input
// is a 400 with a short message.
func FuzzExecuteShape(f *testing.F) {
	f.Add("A=1\nB=2", "a.txt\nb/c.txt", 1)
	f.Add("PATH=/x", "", 1)
	f.Add(strings.Repeat("N", 200)+"=v", strings.Repeat("p", 300), 1)
	f.Add("A=x", "f", sandbox.MaxFiles+1)
	f.Add("=\n1A=b\nA\x00=c", "\x00", 2)
	f.Fuzz(func(t *testing.T, env, files string, rep int) {
		rep = max(1, min(rep, 4*sandbox.MaxFiles))
		req := wire.ExecuteRequest{Env: map[string]string{}}
		for i := range rep {
			for _, line := range strings.Split(env, "\n") {
				k, v, _ := strings.Cut(line, "=")
				if i > 0 {
					k += strings.Repeat("_", i)
				}
				req.Env[k] = v
			}
			if files != "" {
				for _, p := range strings.Split(files, "\n") {
					req.Files = append(req.Files, wire.File{Path: p})
				}
			}
		}
		err := checkExecuteShape(&req)
		if err != nil {
			ae := toAPIError(err)
			if ae == nil || ae.Status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			if len(ae.Message) > maxErrorReply {
				t.Fatalf("a %d-byte message", len(ae.Message))
			}
			return
		}
		if len(req.Env) > sandbox.MaxEnvVars || len(req.Files) > sandbox.MaxFiles {
			t.Fatalf("accepted %d env, %d files", len(req.Env), len(req.Files))
		}
		size := 0
		for k, v := range req.Env {
			if len(k) > sandbox.MaxEnvNameBytes || k == "" || strings.ContainsRune(v, 0) {
				t.Fatalf("accepted env %q=%q", k, v)
			}
			size += len(k) + len(v)
		}
		if size > sandbox.MaxEnvBytes {
			t.Fatalf("accepted %d bytes of env", size)
		}
		for _, f := range req.Files {
			if len(f.Path) > sandbox.MaxFilePathBytes {
				t.Fatalf("accepted a %d-byte path", len(f.Path))
			}
		}
	})
}

// FuzzPackagesShape checks an install's package list (the lines of the
// input, repeated rep times): accepted lists are within the caps, refused
// ones a 400 with a short message.
func FuzzPackagesShape(f *testing.F) {
	f.Add("requests==2.32.3\nleft-pad@1.3.0", 1)
	f.Add("x==1", sandbox.MaxPackages+1)
	f.Add(strings.Repeat("a", 400), 1)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, lines string, rep int) {
		rep = max(1, min(rep, 4*sandbox.MaxPackages))
		var pkgs []string
		if lines != "" {
			for range rep {
				pkgs = append(pkgs, strings.Split(lines, "\n")...)
			}
		}
		err := checkPackagesShape("install", pkgs)
		if err != nil {
			ae := toAPIError(err)
			if ae == nil || ae.Status != 400 || len(ae.Message) > maxErrorReply {
				t.Fatalf("error %v is not a short 400", err)
			}
			return
		}
		if len(pkgs) == 0 || len(pkgs) > sandbox.MaxPackages {
			t.Fatalf("accepted %d packages", len(pkgs))
		}
		for _, p := range pkgs {
			if len(p) > sandbox.MaxPackageSpecBytes {
				t.Fatalf("accepted a %d-byte spec", len(p))
			}
		}
	})
}

// FuzzStoredSessionReply sends a session create over the fakes with any
// language and allowed_domains: a created session's reply holds at most
// the cap of entries, and an error reply stays short.
func FuzzStoredSessionReply(f *testing.F) {
	f.Add("python3", "a.example.com\nA.example.com.", 1)
	f.Add(strings.Repeat("x", 1000), "a.example.com", 1)
	f.Add("python3", "h.example.com", sandbox.MaxAllowedDomains+1)
	plans, err := LoadPlans(configs.Plans)
	if err != nil {
		f.Fatal(err)
	}
	sb := newFakeSandboxes()
	srv := New(Config{MaxBodyBytes: 4 << 20, MaxCodeBytes: 1 << 16, MaxStdinBytes: 1 << 16, MaxIdleTTL: time.Hour},
		Deps{Sandboxes: sb, Keys: fakeKeys{}, Plans: plans, Log: slog.New(slog.DiscardHandler)})
	h := map[string]string{"X-API-Key": "key-MEGA"}
	f.Fuzz(func(t *testing.T, lang, lines string, rep int) {
		rep = max(1, min(rep, 2*sandbox.MaxAllowedDomains))
		var domains []string
		for i := range rep {
			for _, l := range strings.Split(lines, "\n") {
				if i > 0 && strings.HasSuffix(l, ".com") {
					l = strings.Repeat("a", i%50+1) + "." + l
				}
				domains = append(domains, l)
			}
		}
		body, _ := json.Marshal(map[string]any{"language": lang, "network": map[string]any{"enabled": true, "allowed_domains": domains}})
		rec := doFuzz(srv, "POST", "/v1/sessions", string(body), h)
		switch {
		case rec.Code == 201:
			var s wire.Session
			if err := json.Unmarshal(rec.Body.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
			if len(s.Network.AllowedDomains) > sandbox.MaxAllowedDomains {
				t.Fatalf("%d domains stored", len(s.Network.AllowedDomains))
			}
			_ = sb.DeleteSession(t.Context(), "id-MEGA", s.ID)
		case rec.Code >= 400 && rec.Code < 500:
			if rec.Body.Len() > maxErrorReply+512 {
				t.Fatalf("a %d-byte error reply", rec.Body.Len())
			}
		default:
			t.Fatalf("status %d: %.300s", rec.Code, rec.Body)
		}
	})
}
