// Package console is the operator console at /console: server-rendered
// pages (html/template, no scripts, no external assets, inline CSS and SVG
// under a strict Content-Security-Policy) over small read-only interfaces
// that it declares and internal/app implements. Only admin keys open it;
// client keys get 403, no key or an unknown one 401.
package console

import (
	"context"
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// Errors an Admins implementation returns.
var (
	// ErrUnknownKey: no such key, or revoked (401).
	ErrUnknownKey = errors.New("unknown key")
	// ErrNotAdmin: a valid key that is not an admin key (403).
	ErrNotAdmin = errors.New("not an admin key")
)

// Admins checks console keys.
type Admins interface {
	// Admin returns the name of the admin key whose secret is given, or an
	// error wrapping ErrUnknownKey or ErrNotAdmin.
	Admin(ctx context.Context, secret string) (name string, err error)
}

// Check is one readiness check.
type Check struct {
	Name, Status, Detail string
	LastRun              time.Time
}

// Readiness reports the server's readiness checks.
type Readiness interface {
	Checks(ctx context.Context) (ready bool, checks []Check)
}

// Artifact is one mirror catalogue entry.
type Artifact struct {
	Manager, Name, Version, Filename, Status string
	Reasons, Advisories, Accepted            []string
	// Stripped says what admission removed from the artifact (npm
	// dependencies, scripts), when the mirror reports it.
	Stripped    []string
	OSVSnapshot string
	UpdatedAt   time.Time
}

// OSV describes the current OSV snapshot; Err is set when there is none.
type OSV struct {
	SnapshotID string
	ImportedAt time.Time
	Newest     time.Time
	Records    int
	MaxAge     time.Duration
	Stale      bool
	Err        string
}

// Catalogue is the mirror as the console shows it.
type Catalogue interface {
	Artifacts(ctx context.Context) ([]Artifact, error)
	OSV(ctx context.Context) OSV
}

// Session is one session, live or ended.
type Session struct {
	ID, KeyID, KeyName, Language, State string
	NetworkEnabled                      bool
	// AllowedDomains is the start of the session's allowed_domains (at
	// most MaxShownDomains entries); MoreDomains counts the entries left
	// out.
	AllowedDomains                 []string
	MoreDomains                    int
	CreatedAt, LastUsedAt, EndedAt time.Time
	EndReason                      string
	// DiskUsed and DiskSize are the home's bytes used and its size; both
	// zero when unknown (ended, or another node's).
	DiskUsed, DiskSize int64
}

// Decision is one egress decision (or a row standing for Count of them).
type Decision struct {
	Time               time.Time
	Mode, Host, Addr   string
	Port               int
	Outcome, Reason    string
	Count              int
	BytesUp, BytesDown int64
	Summary            bool
}

// Sessions lists sessions and their egress decisions.
type Sessions interface {
	// Sessions returns at most limit sessions, newest first, after
	// skipping the offset newest.
	Sessions(ctx context.Context, offset, limit int) ([]Session, error)
	Session(ctx context.Context, id string) (Session, error)
	Egress(ctx context.Context, id string, limit int) ([]Decision, error)
}

// UsageRow is one key's usage on one UTC day.
type UsageRow struct {
	KeyID, KeyName, Day string
	Requests, Errors    int64
	ExecMS              int64
}

// Usage sums usage per key and day.
type Usage interface {
	Usage(ctx context.Context, since time.Time) ([]UsageRow, error)
}

// PackageVersion is one catalogue entry of a package (one file of one
// version).
type PackageVersion struct {
	Version, Filename, Status     string
	Reasons, Advisories, Accepted []string
	Stripped                      []string
	OSVSnapshot                   string
	UpdatedAt                     time.Time
}

// Dependent is a catalogued package version that depends on another.
type Dependent struct{ Name, Version string }

// Install is a session's latest install of a package.
type Install struct {
	SessionID, KeyID, Version, Filename string
	InstalledAt                         time.Time
}

// Package is what the console shows of one package: one page of its
// catalogue entries and capped lists of the rest. Names says how it was
// catalogued (one normalised name, maybe several spellings).
type Package struct {
	Manager, Name  string
	Names          []string
	Versions       []PackageVersion
	TotalVersions  int
	Advisories     []string
	MoreAdvisories bool
	Dependents     []Dependent
	MoreDependents bool
	Installs       []Install
}

// Packages reads one package of the mirror catalogue.
type Packages interface {
	// Package returns the package whose normalised name is nameKey, with
	// at most limit of its entries after skipping offset, at most
	// maxList advisories, dependents and installing sessions (the most
	// recent), or ErrNotFound when the catalogue has no entry of it.
	Package(ctx context.Context, manager, nameKey string, offset, limit, maxList int) (Package, error)
}

// Deps are what the console reads. Every field must be set but Packages
// (without it, package pages are 404 pages).
type Deps struct {
	Admins    Admins
	Readiness Readiness
	Catalogue Catalogue
	Sessions  Sessions
	Usage     Usage
	Packages  Packages
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// CookieName holds the key after a login with the form.
const CookieName = "sandboxapi_console"

//go:embed templates/*.html
var templateFS embed.FS

// Console serves the pages. Build it with New; it is safe for concurrent
// use.
type Console struct {
	d    Deps
	log  *slog.Logger
	tmpl map[string]*template.Template
}

// New returns the console; log may be nil.
func New(d Deps, log *slog.Logger) *Console {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	c := &Console{d: d, log: log, tmpl: map[string]*template.Template{}}
	for _, page := range []string{"overview", "mirror", "sessions", "session", "usage", "package", "login", "error"} {
		c.tmpl[page] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+page+".html"))
	}
	return c
}

// ServeHTTP routes /console and /console/...
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	nonce := newNonce()
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'nonce-"+nonce+"'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	// same-origin, not no-referrer: under no-referrer a browser sends
	// "Origin: null" with the console's own sign-in form, which the
	// sign-in would then have to accept from anywhere (a sandboxed frame,
	// a data: or file: page). Other sites still get no Referer.
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	path := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/console"), "/")
	v := view{Nonce: nonce, Now: c.d.Now()}
	if path == "/login" {
		c.login(w, r, v)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		c.fail(w, v, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	name, err := c.authorize(r)
	switch {
	case errors.Is(err, store.ErrUnavailable):
		c.unavailable(w, v, err)
		return
	case errors.Is(err, ErrNotAdmin):
		c.fail(w, v, http.StatusForbidden, "this key is not an admin key: the console is for operators (keys create --admin)")
		return
	case err != nil:
		h.Set("WWW-Authenticate", `Bearer realm="sandboxapi console"`)
		v.Title = "sign in"
		c.render(w, http.StatusUnauthorized, "login", v)
		return
	}
	v.Admin = name
	ctx := r.Context()
	switch {
	case path == "":
		c.overview(ctx, w, v)
	case path == "/mirror":
		c.mirror(ctx, w, r, v)
	case strings.HasPrefix(path, "/mirror/"):
		c.pkg(ctx, w, r, v, strings.TrimPrefix(path, "/mirror/"))
	case path == "/sessions":
		c.sessions(ctx, w, r, v)
	case strings.HasPrefix(path, "/sessions/"):
		c.session(ctx, w, v, strings.TrimPrefix(path, "/sessions/"))
	case path == "/usage":
		c.usage(ctx, w, r, v)
	default:
		c.fail(w, v, http.StatusNotFound, "no such page")
	}
}

// authorize reads the key as the API does (Authorization: Bearer,
// X-API-Key, X-RapidAPI-Key), else from the login cookie.
func (c *Console) authorize(r *http.Request) (string, error) {
	key := ""
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		key = strings.TrimSpace(a[7:])
	} else if k := r.Header.Get("X-API-Key"); k != "" {
		key = k
	} else if k := r.Header.Get("X-RapidAPI-Key"); k != "" {
		key = k
	} else if ck, err := r.Cookie(CookieName); err == nil {
		key = ck.Value
	}
	if key == "" || len(key) > 256 {
		return "", ErrUnknownKey
	}
	return c.d.Admins.Admin(r.Context(), key)
}

// login shows the form (GET) or checks a key and sets the cookie (POST).
func (c *Console) login(w http.ResponseWriter, r *http.Request, v view) {
	v.Title = "sign in"
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		c.render(w, http.StatusOK, "login", v)
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		c.fail(w, v, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	// A browser names the page's origin; "null" (an opaque origin: a
	// sandboxed frame, a data: or file: page, a cross-origin redirect) is
	// cross-origin like any other. A client without Origin (curl, a
	// script) is not a browser carrying an operator's cookie.
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(o, r) {
		c.fail(w, v, http.StatusForbidden, "cross-origin sign-in refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	key := strings.TrimSpace(r.PostFormValue("key"))
	if key == "" || len(key) > 256 {
		v.Error = "enter an admin key"
		c.render(w, http.StatusUnauthorized, "login", v)
		return
	}
	if _, err := c.d.Admins.Admin(r.Context(), key); err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			c.unavailable(w, v, err)
			return
		}
		v.Error = "that is not an admin key"
		status := http.StatusUnauthorized
		if errors.Is(err, ErrNotAdmin) {
			status = http.StatusForbidden
		}
		c.render(w, status, "login", v)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: key, Path: "/console", HttpOnly: true, Secure: r.TLS != nil,
		SameSite: http.SameSiteStrictMode, MaxAge: 12 * 3600})
	http.Redirect(w, r, "/console", http.StatusSeeOther)
}

// sameOrigin tells whether origin (an Origin header: scheme://host[:port])
// names the host r was sent to. "null" and anything without a scheme are
// not.
func sameOrigin(origin string, r *http.Request) bool {
	scheme, host, ok := strings.Cut(origin, "://")
	return ok && (scheme == "http" || scheme == "https") && host != "" && strings.EqualFold(host, r.Host)
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// view is what every template gets.
type view struct {
	Nonce, Title, Admin, Error string
	Now                        time.Time
	Page                       string
	Data                       any
}

func (c *Console) render(w http.ResponseWriter, status int, page string, v view) {
	v.Page = page
	var b strings.Builder
	if err := c.tmpl[page].Execute(&b, v); err != nil {
		c.log.Error("rendering console page", "page", page, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// unavailable logs err, a store that cannot be reached, and shows a 503
// page that does not echo it.
func (c *Console) unavailable(w http.ResponseWriter, v view, err error) {
	c.log.Warn("console: store unavailable", "err", err)
	w.Header().Set("Retry-After", "2")
	c.fail(w, v, http.StatusServiceUnavailable, "the store cannot be reached; try again in a moment (the cause is in the server log)")
}

func (c *Console) fail(w http.ResponseWriter, v view, status int, msg string) {
	v.Title, v.Error = http.StatusText(status), msg
	c.render(w, status, "error", v)
}

// internal logs err and shows a page that does not echo it.
func (c *Console) internal(w http.ResponseWriter, v view, what string, err error) {
	if errors.Is(err, store.ErrUnavailable) {
		c.unavailable(w, v, err)
		return
	}
	c.log.Error("console "+what, "err", err)
	c.fail(w, v, http.StatusInternalServerError, "could not read "+what+"; see the server log")
}
