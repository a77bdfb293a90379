package cluster

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestVerifyHostile: a forwarded request verifies only as signed, for
// this node, within the skew, once.
func TestVerifyHostile(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	sender := newSigner(testSecret, nil, "a")
	signed := func() http.Header {
		h := http.Header{}
		sender.sign(h, "POST", "/v1/sessions/s1/execute?x=1", "b", now)
		return h
	}
	for _, tc := range []struct {
		name   string
		header func() http.Header
		method string
		uri    string
		self   string
		secret string
		at     time.Time
		ok     bool
	}{
		{name: "valid", header: signed, ok: true},
		{name: "valid at the skew's edge", header: signed, at: now.Add(MaxSkew), ok: true},
		{name: "stale", header: signed, at: now.Add(MaxSkew + time.Second)},
		{name: "from the future", header: signed, at: now.Add(-MaxSkew - time.Second)},
		{name: "wrong secret", header: signed, secret: "another-secret-0123456789abcdef-0123"},
		{name: "replayed to another path", header: signed, uri: "/v1/sessions/s2/execute?x=1"},
		{name: "replayed with another query", header: signed, uri: "/v1/sessions/s1/execute?x=2"},
		{name: "replayed with another method", header: signed, method: "DELETE"},
		{name: "replayed to another node", header: signed, self: "c"},
		{name: "forwarded header, no signature", header: func() http.Header {
			h := signed()
			h.Del(hdrForwardSig)
			return h
		}},
		{name: "only the forwarded-by header", header: func() http.Header { return http.Header{hdrForwardedBy: {"a"}} }},
		{name: "missing time", header: func() http.Header { h := signed(); h.Del(hdrForwardTime); return h }},
		{name: "missing nonce", header: func() http.Header { h := signed(); h.Del(hdrForwardNonce); return h }},
		{name: "two signatures", header: func() http.Header { h := signed(); h.Add(hdrForwardSig, h.Get(hdrForwardSig)); return h }},
		{name: "time with a plus sign", header: func() http.Header {
			h := signed()
			h.Set(hdrForwardTime, "+"+h.Get(hdrForwardTime))
			return h
		}},
		{name: "sender is the receiver", header: func() http.Header {
			h := http.Header{}
			newSigner(testSecret, nil, "b").sign(h, "POST", "/v1/sessions/s1/execute?x=1", "b", now)
			return h
		}},
		{name: "signature truncated", header: func() http.Header { h := signed(); h.Set(hdrForwardSig, h.Get(hdrForwardSig)[:10]); return h }},
		{name: "signature in upper case", header: func() http.Header {
			h := signed()
			h.Set(hdrForwardSig, strings.ToUpper(h.Get(hdrForwardSig)))
			return h
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, uri, self, secret, at := "POST", "/v1/sessions/s1/execute?x=1", "b", testSecret, now
			if tc.method != "" {
				method = tc.method
			}
			if tc.uri != "" {
				uri = tc.uri
			}
			if tc.self != "" {
				self = tc.self
			}
			if tc.secret != "" {
				secret = tc.secret
			}
			if !tc.at.IsZero() {
				at = tc.at
			}
			h := tc.header()
			if !isForwarded(h) {
				t.Fatal("not taken for a forwarded request")
			}
			from, err := newSigner(secret, nil, self).verify(h, method, uri, at)
			if tc.ok {
				if err != nil || from != "a" {
					t.Fatalf("verify = %q, %v", from, err)
				}
				return
			}
			if !errors.Is(err, ErrBadSignature) {
				t.Fatalf("verify = %q, %v; want ErrBadSignature", from, err)
			}
		})
	}
}

// TestVerifyOnce: a signature is good for one request; a second use of
// it (a replay on the wire) is refused.
func TestVerifyOnce(t *testing.T) {
	t.Parallel()
	now := time.Now()
	h := http.Header{}
	newSigner(testSecret, nil, "a").sign(h, "GET", "/v1/sessions/x", "b", now)
	v := newSigner(testSecret, nil, "b")
	if _, err := v.verify(h, "GET", "/v1/sessions/x", now); err != nil {
		t.Fatal(err)
	}
	if _, err := v.verify(h, "GET", "/v1/sessions/x", now.Add(time.Second)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("replay verified: %v", err)
	}
	v.prune(now.Add(3 * MaxSkew))
	if _, err := v.verify(h, "GET", "/v1/sessions/x", now.Add(3*MaxSkew)); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("a replay after the nonce was forgotten verified: %v", err)
	}
}

// TestIsForwarded: any header of the forward family, in any case, makes
// a request one that must verify.
func TestIsForwarded(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"X-Sandbox-Forwarded-By", "x-sandbox-forward-signature", "X-SANDBOX-FORWARD-X"} {
		h := http.Header{}
		h[k] = []string{"v"} // as a client could send it, not canonicalised
		if !isForwarded(h) {
			t.Errorf("%s: not taken for forwarded", k)
		}
		stripForward(h)
		if len(h) != 0 {
			t.Errorf("%s: not stripped: %v", k, h)
		}
	}
	if isForwarded(http.Header{"X-Sandbox-Node": {"a"}, "X-Request-Id": {"r"}}) {
		t.Error("ordinary headers taken for forwarded")
	}
}

// FuzzVerify: any header values and request line are refused or
// verified without panicking, and whatever a node signs verifies at the
// receiver for the same method and URI, once, also at a receiver that
// knows the sender's secret as a previous one; a receiver that knows
// only its new secret refuses it.
func FuzzVerify(f *testing.F) {
	f.Add("a", "1800000000", "00112233445566778899aabbccddeeff", "zz", "GET", "/v1/sessions/x?y=1")
	f.Add("", "", "", "", "POST", "/")
	f.Add("b", "-1", "x", strings.Repeat("0", 64), "PUT", "/v1/sessions/%2F/files?path=a b")
	f.Fuzz(func(t *testing.T, by, ts, nonce, sig, method, uri string) {
		now := time.Unix(1_800_000_000, 0)
		v := newSigner(testSecret, nil, "b")
		h := http.Header{hdrForwardedBy: {by}, hdrForwardTime: {ts}, hdrForwardNonce: {nonce}, hdrForwardSig: {sig}}
		if _, err := v.verify(h, method, uri, now); err == nil {
			t.Fatalf("forged headers verified: %v", h)
		}
		h = http.Header{}
		newSigner(testSecret, nil, "a").sign(h, method, uri, "b", now)
		if _, err := v.verify(h, method, uri, now); err != nil {
			t.Fatalf("signed %s %q does not verify: %v", method, uri, err)
		}
		if _, err := v.verify(h, method, uri+"x", now); err == nil {
			t.Fatal("verified twice or for another URI")
		}
		if _, err := strconv.ParseInt(h.Get(hdrForwardTime), 10, 64); err != nil {
			t.Fatal(err)
		}

		rotating := newSigner(newSecret, []string{unknownSecret, testSecret}, "b")
		forged := http.Header{hdrForwardedBy: {by}, hdrForwardTime: {ts}, hdrForwardNonce: {nonce}, hdrForwardSig: {sig}}
		if _, err := rotating.verify(forged, method, uri, now); err == nil {
			t.Fatalf("forged headers verified with previous secrets: %v", forged)
		}
		h = http.Header{}
		newSigner(testSecret, []string{newSecret}, "a").sign(h, method, uri, "b", now)
		if _, err := newSigner(newSecret, nil, "b").verify(h, method, uri, now); err == nil {
			t.Fatal("signed with a previous secret, or verified without knowing the sender's secret")
		}
		if _, err := rotating.verify(h, method, uri, now); err != nil {
			t.Fatalf("signed %s %q with a previous secret does not verify: %v", method, uri, err)
		}
		if _, err := rotating.verify(h, method, uri, now); err == nil {
			t.Fatal("a previous-secret signature verified twice")
		}
	})
}

// FuzzRoute: the session id of a path is one non-empty segment under
// /v1/sessions/, of bounded length; anything else is served locally.
func FuzzRoute(f *testing.F) {
	for _, p := range []string{"/v1/sessions", "/v1/sessions/", "/v1/sessions/abc/execute", "/v1/sessionsx", "/v1/sessions/%2F..%2F/files",
		"/v1/sessions/%zz", "/v1/execute", "//v1/sessions/a"} {
		f.Add("POST", p)
	}
	f.Fuzz(func(t *testing.T, method, path string) {
		kind, id := route(method, path)
		switch kind {
		case routeSession:
			if id == "" || len(id) > maxIDLen || !strings.HasPrefix(path, "/v1/sessions/") {
				t.Fatalf("route(%q) = session %q", path, id)
			}
		case routeCreate:
			if method != http.MethodPost || path != "/v1/sessions" {
				t.Fatalf("route(%s %q) = create", method, path)
			}
		default:
			if id != "" {
				t.Fatalf("route(%q) = local with id %q", path, id)
			}
		}
	})
}

// TestRoute pins the classification of the API's paths.
func TestRoute(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method, path string
		kind         routeKind
		id           string
	}{
		{"POST", "/v1/sessions", routeCreate, ""},
		{"GET", "/v1/sessions", routeLocal, ""},
		{"GET", "/v1/sessions/", routeLocal, ""},
		{"GET", "/v1/sessions/s1", routeSession, "s1"},
		{"POST", "/v1/sessions/s1/execute", routeSession, "s1"},
		{"PUT", "/v1/sessions/s%201/files", routeSession, "s 1"},
		{"PATCH", "/v1/sessions/s1/network", routeSession, "s1"},
		{"GET", "/v1/sessionsx/s1", routeLocal, ""},
		{"POST", "/v1/execute", routeLocal, ""},
		{"GET", "/v1/sessions/%zz/x", routeLocal, ""},
		{"GET", "/v1/sessions/%00", routeLocal, ""},
		{"GET", "/v1/sessions/s%00/execute", routeLocal, ""},
		{"GET", "/v1/sessions/%ff", routeLocal, ""},
		{"GET", "/v1/sessions/%E2%80%AEs1", routeSession, "\u202es1"},
		{"GET", "/v1/sessions/" + strings.Repeat("a", maxIDLen+1), routeLocal, ""},
	} {
		kind, id := route(tc.method, tc.path)
		if kind != tc.kind || id != tc.id {
			t.Errorf("route(%s %s) = %v %q, want %v %q", tc.method, tc.path, kind, id, tc.kind, tc.id)
		}
	}
}

// Secrets of a rotation from oldSecret to newSecret, and one neither
// knows.
const (
	oldSecret     = "old-secret-0123456789abcdef-0123456789"
	newSecret     = "new-secret-0123456789abcdef-0123456789"
	unknownSecret = "unknown-secret-0123456789abcdef-01234"
)

// TestVerifyRotation: a node signs with its secret only and accepts a
// forward signed with its secret or any of its previous secrets, each
// signature once.
func TestVerifyRotation(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	type keys struct {
		secret   string
		previous []string
	}
	for _, tc := range []struct {
		name     string
		sender   keys
		receiver keys
		ok       bool
	}{
		{name: "current secret", sender: keys{newSecret, nil}, receiver: keys{newSecret, []string{oldSecret}}, ok: true},
		{name: "previous secret", sender: keys{oldSecret, nil}, receiver: keys{newSecret, []string{oldSecret}}, ok: true},
		{name: "second previous secret", sender: keys{oldSecret, nil},
			receiver: keys{newSecret, []string{unknownSecret, oldSecret}}, ok: true},
		{name: "the new secret while it is still a previous one", sender: keys{newSecret, []string{oldSecret}},
			receiver: keys{oldSecret, []string{newSecret}}, ok: true},
		{name: "unknown secret", sender: keys{unknownSecret, nil}, receiver: keys{newSecret, []string{oldSecret}}},
		{name: "unknown secret, sender knows ours as previous", sender: keys{unknownSecret, []string{newSecret}},
			receiver: keys{newSecret, []string{oldSecret}}},
		{name: "previous secret never signs", sender: keys{oldSecret, []string{newSecret}}, receiver: keys{newSecret, nil}},
		{name: "previous secret dropped", sender: keys{oldSecret, nil}, receiver: keys{newSecret, nil}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			newSigner(tc.sender.secret, tc.sender.previous, "a").sign(h, "POST", "/v1/sessions/s1/execute", "b", now)
			v := newSigner(tc.receiver.secret, tc.receiver.previous, "b")
			from, err := v.verify(h, "POST", "/v1/sessions/s1/execute", now)
			if !tc.ok {
				if !errors.Is(err, ErrBadSignature) {
					t.Fatalf("verify = %q, %v; want ErrBadSignature", from, err)
				}
				return
			}
			if err != nil || from != "a" {
				t.Fatalf("verify = %q, %v", from, err)
			}
			if _, err := v.verify(h, "POST", "/v1/sessions/s1/execute", now.Add(time.Second)); !errors.Is(err, ErrBadSignature) {
				t.Fatalf("replay verified: %v", err)
			}
		})
	}
}

// TestVerifyRotationReplay: a signature made with a previous secret
// spends its nonce like any other: its replay is refused, and so is a
// forward that reuses the nonce under the current secret.
func TestVerifyRotationReplay(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	v := newSigner(newSecret, []string{oldSecret}, "b")
	h := http.Header{}
	newSigner(oldSecret, nil, "a").sign(h, "GET", "/v1/sessions/x", "b", now)
	if _, err := v.verify(h, "GET", "/v1/sessions/x", now); err != nil {
		t.Fatal(err)
	}
	if n := len(v.seen); n != 1 {
		t.Fatalf("%d nonces recorded, want 1", n)
	}
	if _, err := v.verify(h, "GET", "/v1/sessions/x", now.Add(time.Second)); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("replay of a previous-secret signature: %v", err)
	}
	// The same nonce signed anew with the current secret.
	nonce, ts := h.Get(hdrForwardNonce), h.Get(hdrForwardTime)
	h.Set(hdrForwardSig, hex.EncodeToString(mac([]byte(newSecret), "GET", "/v1/sessions/x", "a", "b", ts, nonce)))
	if _, err := v.verify(h, "GET", "/v1/sessions/x", now.Add(time.Second)); !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), "replayed") {
		t.Fatalf("a spent nonce under the current secret: %v", err)
	}
}

// TestRotationSteps walks the documented rolling rotation: at each step
// every node is on that step or the one before, and each of those pairs
// verifies the other's forwards both ways. Skipping step (a) is shown to
// refuse calls: a node on (b) signs with a secret a node not yet past
// the start does not know.
func TestRotationSteps(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	type step struct {
		name     string
		secret   string
		previous []string
	}
	steps := []step{
		{"before", oldSecret, nil},
		{"a: previous_secrets [NEW]", oldSecret, []string{newSecret}},
		{"b: secret NEW, previous_secrets [OLD]", newSecret, []string{oldSecret}},
		{"c: previous_secrets dropped", newSecret, nil},
	}
	works := func(from, to step) error {
		h := http.Header{}
		newSigner(from.secret, from.previous, "a").sign(h, "GET", "/v1/sessions/x", "b", now)
		_, err := newSigner(to.secret, to.previous, "b").verify(h, "GET", "/v1/sessions/x", now)
		return err
	}
	for i := 1; i < len(steps); i++ {
		for _, pair := range [][2]step{{steps[i-1], steps[i]}, {steps[i], steps[i-1]}, {steps[i], steps[i]}} {
			if err := works(pair[0], pair[1]); err != nil {
				t.Errorf("%s -> %s: %v", pair[0].name, pair[1].name, err)
			}
		}
	}
	if err := works(steps[2], steps[0]); !errors.Is(err, ErrBadSignature) {
		t.Errorf("two steps: a node on (b) got through to a node before (a): %v", err)
	}
}
