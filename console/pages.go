package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Statuses the catalogue filter accepts.
var statuses = []string{"admitted", "refused", "quarantined", "removed"}

// Bounds of the lists the pages show: every list page shows one page of
// rows with a link to the next, and a session's allowed_domains are cut
// (the first entries and "+N more").
const (
	sessionsPerPage  = 50
	artifactsPerPage = 100
	usageRowsPerPage = 200
	maxPage          = 10000
	maxDecisions     = 1000
	usageDays        = 30
	// MaxShownDomains is the most allowed_domains entries of one session
	// the console reads and its session page shows; listDomains is the
	// most a row of the sessions list shows.
	MaxShownDomains = 100
	listDomains     = 5
)

// pager is the page a list page shows and the links to its neighbours
// (empty when there is none).
type pager struct {
	Page       int
	Prev, Next string
}

// errBadPage is the 400 message of a page parameter out of range.
var errBadPage = fmt.Sprintf("page must be one integer from 1 to %d", maxPage)

// pageOf reads ?page= (1 when absent); ok is false when it is anything
// but one integer from 1 to maxPage.
func pageOf(r *http.Request) (page int, ok bool) {
	vals, set := r.URL.Query()["page"]
	if !set {
		return 1, true
	}
	if len(vals) != 1 || len(vals[0]) > 6 {
		return 0, false
	}
	n, err := strconv.Atoi(vals[0])
	if err != nil || n < 1 || n > maxPage {
		return 0, false
	}
	return n, true
}

// pagerFor links the pages around page of r's list, keeping r's other
// query parameters.
func pagerFor(r *http.Request, page int, hasNext bool) pager {
	link := func(n int) string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(n))
		return r.URL.Path + "?" + q.Encode()
	}
	p := pager{Page: page}
	if page > 1 {
		p.Prev = link(page - 1)
	}
	if hasNext && page < maxPage {
		p.Next = link(page + 1)
	}
	return p
}

// pageSlice returns page (1-based) of list with per rows a page, and
// whether a later page has rows.
func pageSlice[T any](list []T, page, per int) ([]T, bool) {
	from := min((page-1)*per, len(list))
	to := min(from+per, len(list))
	return list[from:to], to < len(list)
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"age":   Age,
	"join":  func(s []string) string { return strings.Join(s, ", ") },
	"bytes": Bytes,
	"add":   func(a, b int) int { return a + b },
}

// Age prints a duration for people: "45 seconds", "12 minutes", "5 hours",
// "88 days".
func Age(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	plural := func(n int64, unit string) string {
		if n == 1 {
			return "1 " + unit
		}
		return fmt.Sprintf("%d %ss", n, unit)
	}
	switch {
	case d < time.Minute:
		return plural(int64(d/time.Second), "second")
	case d < time.Hour:
		return plural(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return plural(int64(d/time.Hour), "hour")
	default:
		return plural(int64(d/(24*time.Hour)), "day")
	}
}

// Bytes prints a size for people: "512 B", "3.4 MiB", "1.0 GiB".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

type overviewData struct {
	Ready  bool
	Checks []Check
	OSV    OSV
	Age    string
	Counts map[string]int
	Total  int
}

func (c *Console) overview(ctx context.Context, w http.ResponseWriter, v view) {
	ready, checks := c.d.Readiness.Checks(ctx)
	d := overviewData{Ready: ready, Checks: checks, OSV: c.d.Catalogue.OSV(ctx), Counts: map[string]int{}}
	if !d.OSV.ImportedAt.IsZero() {
		d.Age = Age(v.Now.Sub(d.OSV.ImportedAt))
	}
	if arts, err := c.d.Catalogue.Artifacts(ctx); err == nil {
		for _, a := range arts {
			d.Counts[a.Status]++
		}
		d.Total = len(arts)
	}
	v.Title, v.Data = "overview", d
	c.render(w, http.StatusOK, "overview", v)
}

type mirrorData struct {
	Query, Status, Manager string
	Statuses               []string
	Artifacts              []Artifact
	Matching, Total        int
	Pager                  pager
	OSV                    OSV
	Age                    string
}

// Filter returns the artifacts matching a free-text query (name, version,
// file name or advisory id, case-insensitive), a status and a manager
// ("" matches all).
func Filter(arts []Artifact, query, status, manager string) []Artifact {
	q := strings.ToLower(strings.TrimSpace(query))
	var out []Artifact
	for _, a := range arts {
		if status != "" && a.Status != status || manager != "" && a.Manager != manager {
			continue
		}
		if q != "" && !strings.Contains(strings.ToLower(a.Name+" "+a.Version+" "+a.Filename+" "+strings.Join(a.Advisories, " ")), q) {
			continue
		}
		out = append(out, a)
	}
	return out
}

func (c *Console) mirror(ctx context.Context, w http.ResponseWriter, r *http.Request, v view) {
	q := r.URL.Query()
	page, ok := pageOf(r)
	if !ok {
		c.fail(w, v, http.StatusBadRequest, errBadPage)
		return
	}
	d := mirrorData{Query: q.Get("q"), Status: q.Get("status"), Manager: q.Get("manager"), Statuses: statuses, OSV: c.d.Catalogue.OSV(ctx)}
	if len(d.Query) > 200 || d.Status != "" && !slices.Contains(statuses, d.Status) || d.Manager != "" && d.Manager != "pip" && d.Manager != "npm" {
		c.fail(w, v, http.StatusBadRequest, "bad filter: q is at most 200 characters, status one of "+strings.Join(statuses, ", ")+", manager pip or npm")
		return
	}
	arts, err := c.d.Catalogue.Artifacts(ctx)
	if err != nil {
		c.internal(w, v, "the mirror catalogue", err)
		return
	}
	if !d.OSV.ImportedAt.IsZero() {
		d.Age = Age(v.Now.Sub(d.OSV.ImportedAt))
	}
	matching := Filter(arts, d.Query, d.Status, d.Manager)
	var next bool
	d.Total, d.Matching = len(arts), len(matching)
	d.Artifacts, next = pageSlice(matching, page, artifactsPerPage)
	d.Pager = pagerFor(r, page, next)
	v.Title, v.Data = "mirror", d
	c.render(w, http.StatusOK, "mirror", v)
}

type keyGroup struct {
	KeyID, KeyName string
	Sessions       []Session
}

type sessionsData struct {
	Groups []*keyGroup
	Pager  pager
}

// sessions shows one page of sessions, newest first, grouped by key, each
// row with at most listDomains of its allowed_domains.
func (c *Console) sessions(ctx context.Context, w http.ResponseWriter, r *http.Request, v view) {
	page, ok := pageOf(r)
	if !ok {
		c.fail(w, v, http.StatusBadRequest, errBadPage)
		return
	}
	ss, err := c.d.Sessions.Sessions(ctx, (page-1)*sessionsPerPage, sessionsPerPage+1)
	if err != nil {
		c.internal(w, v, "sessions", err)
		return
	}
	next := len(ss) > sessionsPerPage
	ss = ss[:min(len(ss), sessionsPerPage)]
	var groups []*keyGroup
	byKey := map[string]*keyGroup{}
	for _, s := range ss {
		if n := len(s.AllowedDomains); n > listDomains {
			s.AllowedDomains, s.MoreDomains = s.AllowedDomains[:listDomains:listDomains], s.MoreDomains+n-listDomains
		}
		g := byKey[s.KeyID]
		if g == nil {
			g = &keyGroup{KeyID: s.KeyID, KeyName: s.KeyName}
			byKey[s.KeyID] = g
			groups = append(groups, g)
		}
		g.Sessions = append(g.Sessions, s)
	}
	sort.SliceStable(groups, func(i, j int) bool { return groups[i].KeyID < groups[j].KeyID })
	v.Title, v.Data = "sessions", sessionsData{Groups: groups, Pager: pagerFor(r, page, next)}
	c.render(w, http.StatusOK, "sessions", v)
}

type sessionData struct {
	Session   Session
	Decisions []Decision
	Allowed   int
	Denied    int
}

func (c *Console) session(ctx context.Context, w http.ResponseWriter, v view, id string) {
	if id == "" || len(id) > 128 || strings.ContainsAny(id, "/?#") {
		c.fail(w, v, http.StatusNotFound, "no such session")
		return
	}
	s, err := c.d.Sessions.Session(ctx, id)
	if errors.Is(err, ErrNotFound) {
		c.fail(w, v, http.StatusNotFound, "no such session")
		return
	}
	if err != nil {
		c.internal(w, v, "the session", err)
		return
	}
	ds, err := c.d.Sessions.Egress(ctx, id, maxDecisions)
	if err != nil {
		c.internal(w, v, "egress decisions", err)
		return
	}
	if n := len(s.AllowedDomains); n > MaxShownDomains {
		s.AllowedDomains, s.MoreDomains = s.AllowedDomains[:MaxShownDomains:MaxShownDomains], s.MoreDomains+n-MaxShownDomains
	}
	d := sessionData{Session: s, Decisions: ds}
	for _, x := range ds {
		n := max(x.Count, 1)
		if x.Outcome == "allow" {
			d.Allowed += n
		} else {
			d.Denied += n
		}
	}
	v.Title, v.Data = "session "+id, d
	c.render(w, http.StatusOK, "session", v)
}

// ErrNotFound is what Sessions.Session returns for an unknown id.
var ErrNotFound = errors.New("not found")

// Bar is one bar of the usage chart (SVG coordinates).
type Bar struct {
	X, Y, W, H int
	Day        string
	Requests   int64
	Label      bool
}

type usageData struct {
	Rows   []UsageRow
	Pager  pager
	Bars   []Bar
	Max    int64
	Width  int
	Height int
	Days   int
}

// Chart lays out one bar per day (requests of every key summed) in a
// width x height box, days oldest first from since to now.
func Chart(rows []UsageRow, since, now time.Time, width, height int) ([]Bar, int64) {
	perDay := map[string]int64{}
	for _, r := range rows {
		perDay[r.Day] += r.Requests
	}
	var days []string
	for d := since.UTC().Truncate(24 * time.Hour); !d.After(now); d = d.Add(24 * time.Hour) {
		days = append(days, d.Format("2006-01-02"))
	}
	var peak int64 = 1
	for _, d := range days {
		peak = max(peak, perDay[d])
	}
	if len(days) == 0 {
		return nil, peak
	}
	slot := width / len(days)
	bars := make([]Bar, 0, len(days))
	for i, d := range days {
		h := int(perDay[d] * int64(height-20) / peak)
		bars = append(bars, Bar{X: i*slot + 1, Y: height - 20 - h, W: max(slot-2, 1), H: h, Day: d, Requests: perDay[d],
			Label: i%7 == 0 && i < len(days)-4 || i == len(days)-1})
	}
	return bars, peak
}

func (c *Console) usage(ctx context.Context, w http.ResponseWriter, r *http.Request, v view) {
	page, ok := pageOf(r)
	if !ok {
		c.fail(w, v, http.StatusBadRequest, errBadPage)
		return
	}
	since := v.Now.AddDate(0, 0, -(usageDays - 1)).UTC().Truncate(24 * time.Hour)
	rows, err := c.d.Usage.Usage(ctx, since)
	if err != nil {
		c.internal(w, v, "usage", err)
		return
	}
	d := usageData{Width: 720, Height: 160, Days: usageDays}
	d.Bars, d.Max = Chart(rows, since, v.Now, d.Width, d.Height)
	var next bool
	d.Rows, next = pageSlice(rows, page, usageRowsPerPage)
	d.Pager = pagerFor(r, page, next)
	v.Title, v.Data = "usage", d
	c.render(w, http.StatusOK, "usage", v)
}
