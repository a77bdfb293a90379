package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// chromiumPath finds Debian's chromium; without it the test skips, and
// fails when SANDBOXAPI_REQUIRE_CLIENTS=1 (scripts/test.sh installs it).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SANDBOXAPI_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("SANDBOXAPI_REQUIRE_CLIENTS") == "1" {
		t.Fatal("chromium missing: apt-get install -y chromium (scripts/test.sh does)")
	}
	t.Skip("chromium missing: apt-get install -y chromium")
	return ""
}

// browser is one headless Chromium tab that records console errors,
// uncaught exceptions and browser log errors (CSP violations among them).
type browser struct {
	t      *testing.T
	ctx    context.Context
	mu     sync.Mutex
	errors []string
}

func newBrowser(t *testing.T, parent context.Context, headers map[string]string) *browser {
	t.Helper()
	ctx, cancel := chromedp.NewContext(parent)
	t.Cleanup(cancel)
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		var msg string
		switch e := ev.(type) { // values or pointers, as the version sends them
		case runtime.EventConsoleAPICalled:
			ev = &e
		case runtime.EventExceptionThrown:
			ev = &e
		case cdplog.EventEntryAdded:
			ev = &e
		}
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError || e.Type == runtime.ConsoleAPICalledTypeWarning {
				msg = fmt.Sprintf("console.%s %v", e.Type, e.Args)
			}
		case *runtime.EventExceptionThrown:
			msg = "exception: " + e.ExceptionDetails.Text
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
				msg = fmt.Sprintf("log %s %s: %s %s", e.Entry.Level, e.Entry.Source, e.Entry.Text, e.Entry.URL)
			}
		}
		if msg != "" {
			b.mu.Lock()
			b.errors = append(b.errors, msg)
			b.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if len(headers) > 0 {
		h := network.Headers{}
		for k, v := range headers {
			h[k] = v
		}
		if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: h}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// open loads url and returns the HTTP status of the page.
func (b *browser) open(url string) int64 {
	b.t.Helper()
	resp, err := chromedp.Run(b.ctx, chromedp.NavigateResponse(url))
	if err != nil {
		b.t.Fatalf("loading %s: %v", url, err)
	}
	if err := chromedp.Do(b.ctx, chromedp.WaitReady("main")); err != nil {
		b.t.Fatalf("waiting for %s: %v", url, err)
	}
	return resp.Status
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(sel))
	if err != nil {
		b.t.Fatalf("reading %s: %v", sel, err)
	}
	return s
}

func (b *browser) screenshot(dir, name string) string {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	p := filepath.Join(dir, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return p
}

// consoleErrors returns what was recorded; allowStatus drops the network
// log lines for pages that were meant to answer 401 or 403.
func (b *browser) consoleErrors(allowStatus ...int) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
next:
	for _, e := range b.errors {
		for _, st := range allowStatus {
			if strings.Contains(e, fmt.Sprintf("status of %d", st)) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// TestConsoleInChromium drives the operator console of the real server in
// Debian's headless Chromium: every page loads with no console error, CSP
// violation or exception; the catalogue search and status filter work
// through the form; a client key and no key are refused; the sign-in form
// works; a screenshot of each page is written to
// $SANDBOXAPI_CONSOLE_SCREENSHOTS (default: the test's temp folder). On
// the way, the session's SBOM from the real install is validated with the
// CycloneDX library.
func TestConsoleInChromium(t *testing.T) {
	chrome := chromiumPath(t)
	s, _, _ := installServer(t, "")
	dir := t.TempDir()
	s.importOSV()
	for _, f := range []string{writeWheel(t, dir, "alpha-pkg", "1.0.0"), writeWheel(t, dir, "beta", "0.1"), writeTarball(t, dir, "hello-npm", "1.0.0")} {
		s.cliArgs([]string{"mirror", "add"}, f)
	}
	// Refused: an advisory in the test OSV records matches it.
	refused := writeWheel(t, dir, "requests", "2.30.0")
	if out, err := exec.Command(s.bin, "mirror", "add", refused, "--config", s.config, "--data-dir", s.dataDir).CombinedOutput(); err == nil {
		t.Fatalf("requests 2.30.0 was admitted: %s", out)
	}
	client := s.key("PRO")
	admin := strings.TrimSpace(s.cli("keys", "create", "--admin", "--name", "ops"))
	admin = admin[strings.LastIndexByte(admin, '\n')+1:]
	sess := s.session(client, "python3")
	s.exec(client, sess, "print(1)")
	s.waitReadyz(200, 90*time.Second)
	if r := s.install(client, sess, "pip", "alpha-pkg==1.0.0"); r.status != 200 {
		t.Fatalf("install: %d %s", r.status, r.body)
	}

	// The session's SBOM, from the real install, through the API.
	r := s.do("GET", "/v1/sessions/"+sess+"/sbom", client, nil)
	if r.status != 200 || !strings.Contains(string(r.body), `"pkg:pypi/alpha-pkg@1.0.0?file_name=alpha_pkg-1.0.0-py3-none-any.whl"`) {
		t.Fatalf("sbom: %d %s", r.status, r.body)
	}
	var doc struct{ SpecVersion string }
	if err := json.Unmarshal(r.body, &doc); err != nil || doc.SpecVersion != "1.6" {
		t.Fatalf("sbom: %v %s", err, r.body)
	}
	sbomFile := filepath.Join(dir, "session.cdx.json")
	os.WriteFile(sbomFile, r.body, 0o644)
	if os.Getenv("SANDBOXAPI_REQUIRE_CLIENTS") == "1" || testenv.HasCycloneDX() {
		testenv.ValidateWithCycloneDX(t, testenv.CycloneDXModules(t), sbomFile)
	}
	if r := s.do("GET", "/v1/sessions/"+sess+"/sbom", admin, nil); r.status != 401 {
		t.Fatalf("admin key on the API: %d, want 401", r.status)
	}

	shots := os.Getenv("SANDBOXAPI_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	alloc, cancel := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.WindowSize(1280, 900), chromedp.Flag("disable-gpu", true))...)
	defer cancel()

	// Plain HTTP first: statuses without a browser in the way.
	for key, want := range map[string]int{client: 403, "": 401, "sk_wrong": 401, admin: 200} {
		if r := s.do("GET", "/console", key, nil); r.status != want {
			t.Fatalf("GET /console with %q: %d, want %d", key, r.status, want)
		}
	}

	b := newBrowser(t, alloc, map[string]string{"Authorization": "Bearer " + admin})
	pages := []struct{ name, path, want string }{
		{"overview", "/console", "Readiness checks"},
		{"mirror", "/console/mirror", "alpha-pkg"},
		{"mirror-refused", "/console/mirror?status=refused", "GHSA-"},
		{"package", "/console/mirror/pip/alpha-pkg", sess}, // the session that installed it
		{"sessions", "/console/sessions", sess},
		{"session", "/console/sessions/" + sess, "Egress decisions"},
		{"usage", "/console/usage", "Per key and day"},
	}
	for _, p := range pages {
		if st := b.open(s.url(p.path)); st != 200 {
			t.Fatalf("%s: status %d", p.path, st)
		}
		if txt := b.text("main"); !strings.Contains(txt, p.want) {
			t.Fatalf("%s does not show %q:\n%s", p.path, p.want, txt)
		}
		t.Logf("screenshot %s", b.screenshot(shots, p.name))
	}
	// The live session's disk, read from its mounted home.
	b.open(s.url("/console/sessions"))
	if txt := b.text("table.sessions"); !strings.Contains(txt, "iB of ") {
		t.Fatalf("sessions page shows no disk use:\n%s", txt)
	}
	// The search and the status filter, through the form.
	b.open(s.url("/console/mirror"))
	if err := chromedp.Do(b.ctx, chromedp.SetValue(`input[name="q"]`, "beta"), chromedp.Submit(`form.filter`), chromedp.WaitReady(`#count`)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if names := b.text("#artifacts tbody"); !strings.Contains(names, "beta") || strings.Contains(names, "alpha-pkg") || strings.Contains(names, "hello-npm") {
		t.Fatalf("search for beta shows:\n%s", names)
	}
	b.screenshot(shots, "mirror-search")
	b.open(s.url("/console/mirror?status=admitted&manager=npm"))
	if names := b.text("#artifacts tbody"); !strings.Contains(names, "hello-npm") || strings.Contains(names, "beta") || strings.Contains(names, "requests") {
		t.Fatalf("admitted npm shows:\n%s", names)
	}
	if errs := b.consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}

	// A client key is refused, in the browser too.
	c := newBrowser(t, alloc, map[string]string{"Authorization": "Bearer " + client})
	if st := c.open(s.url("/console")); st != 403 {
		t.Fatalf("client key: status %d", st)
	}
	if txt := c.text("main"); strings.Contains(txt, sess) || !strings.Contains(txt, "not an admin key") {
		t.Fatalf("client key sees:\n%s", txt)
	}
	c.screenshot(shots, "client-refused")

	// No key: the sign-in form, then the console with the cookie.
	n := newBrowser(t, alloc, nil)
	if st := n.open(s.url("/console/usage")); st != 401 {
		t.Fatalf("no key: status %d", st)
	}
	n.screenshot(shots, "login")
	if err := chromedp.Do(n.ctx, chromedp.SetValue(`input[name="key"]`, admin), chromedp.Submit(`form`), chromedp.WaitReady(`#ready`)); err != nil {
		t.Fatal(err)
	}
	if errs := append(c.consoleErrors(403), n.consoleErrors(401)...); len(errs) > 0 {
		t.Fatalf("console errors:\n%s", strings.Join(errs, "\n"))
	}
	t.Logf("screenshots in %s", shots)
}
