package cli

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/console"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

var (
	_ console.Admins    = consoleAdmins{}
	_ console.Readiness = consoleReadiness{}
	_ console.Catalogue = consoleCatalogue{}
	_ console.Sessions  = consoleSessions{}
	_ console.Usage     = consoleSessions{}
	_ homeUsage         = (*executor.Executor)(nil)
)

// newConsole builds the operator console (served at /console).
func newConsole(env *Env, ready api.ReadinessReporter, mir *mirror.Mirror, st *store.Store, disk homeUsage) http.Handler {
	return console.New(console.Deps{
		Admins:    consoleAdmins{st},
		Readiness: consoleReadiness{ready},
		Catalogue: consoleCatalogue{mir},
		Sessions:  consoleSessions{st: st, disk: disk},
		Usage:     consoleSessions{st: st},
	}, env.Log.With("component", "console"))
}

type consoleAdmins struct{ st *store.Store }

func (a consoleAdmins) Admin(ctx context.Context, secret string) (string, error) {
	k, err := a.st.KeyByHash(ctx, api.HashKey(secret))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", console.ErrUnknownKey
	case err != nil:
		return "", err
	case k.Kind != store.KindAdmin:
		return "", console.ErrNotAdmin
	}
	return k.Name, nil
}

// consoleReadiness shows the latest readiness results, without asking
// for a new run.
type consoleReadiness struct{ r api.ReadinessReporter }

func (r consoleReadiness) Checks(ctx context.Context) (bool, []console.Check) {
	ok, cs := r.r.Checks(ctx, false)
	out := make([]console.Check, 0, len(cs))
	for _, c := range cs {
		out = append(out, console.Check{Name: c.Name, Status: c.Status, Detail: c.Detail, LastRun: c.LastRun})
	}
	return ok, out
}

type consoleCatalogue struct{ m *mirror.Mirror }

func (c consoleCatalogue) Artifacts(ctx context.Context) ([]console.Artifact, error) {
	arts, err := c.m.List(ctx, "")
	if err != nil {
		return nil, err
	}
	out := make([]console.Artifact, 0, len(arts))
	for _, a := range arts {
		out = append(out, console.Artifact{Manager: string(a.Manager), Name: a.Name, Version: a.Version, Filename: a.Filename,
			Status: string(a.Status), Reasons: a.Reasons, Advisories: a.Advisories, Accepted: a.Accepted, OSVSnapshot: a.OSVSnapshot, UpdatedAt: a.UpdatedAt})
	}
	return out, nil
}

func (c consoleCatalogue) OSV(ctx context.Context) console.OSV {
	st, err := c.m.OSVStatus(ctx)
	if err != nil {
		return console.OSV{Err: "no usable OSV database: import one with `sandboxapi mirror osv import PATH`"}
	}
	return console.OSV{SnapshotID: st.SnapshotID, ImportedAt: st.ImportedAt, Newest: st.NewestModified, Records: st.Records, MaxAge: st.MaxAge, Stale: st.Stale}
}

// homeUsage reports a live session's disk (the executor).
type homeUsage interface {
	HomeUsage(id string) (used, size int64, ok bool)
}

type consoleSessions struct {
	st   *store.Store
	disk homeUsage // nil: disk not shown
}

func (s consoleSessions) keyNames(ctx context.Context) map[string]string {
	names := map[string]string{}
	if keys, err := s.st.ListKeys(ctx); err == nil {
		for _, k := range keys {
			names[k.ID] = k.Name
		}
	}
	return names
}

func (s consoleSessions) toConsole(r store.SessionRow, names map[string]string) console.Session {
	c := toConsoleSession(r, names)
	if s.disk != nil && r.EndedAt.IsZero() {
		if used, size, ok := s.disk.HomeUsage(r.ID); ok {
			c.DiskUsed, c.DiskSize = used, size
		}
	}
	return c
}

func toConsoleSession(r store.SessionRow, names map[string]string) console.Session {
	var nw struct {
		Enabled        bool     `json:"enabled"`
		AllowedDomains []string `json:"allowed_domains"`
	}
	_ = json.Unmarshal([]byte(r.Network), &nw)
	return console.Session{ID: r.ID, KeyID: r.KeyID, KeyName: names[r.KeyID], Language: r.Language, State: r.State,
		NetworkEnabled: nw.Enabled, AllowedDomains: nw.AllowedDomains, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt, EndedAt: r.EndedAt, EndReason: r.EndReason}
}

func (s consoleSessions) Sessions(ctx context.Context, limit int) ([]console.Session, error) {
	rows, err := s.st.RecentSessions(ctx, limit)
	if err != nil {
		return nil, err
	}
	names := s.keyNames(ctx)
	out := make([]console.Session, 0, len(rows))
	for _, r := range rows {
		out = append(out, s.toConsole(r, names))
	}
	return out, nil
}

func (s consoleSessions) Session(ctx context.Context, id string) (console.Session, error) {
	r, err := s.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return console.Session{}, console.ErrNotFound
	}
	if err != nil {
		return console.Session{}, err
	}
	return s.toConsole(r, s.keyNames(ctx)), nil
}

func (s consoleSessions) Egress(ctx context.Context, id string, limit int) ([]console.Decision, error) {
	rows, err := s.st.EgressDecisions(ctx, id, limit)
	if err != nil {
		return nil, err
	}
	out := make([]console.Decision, 0, len(rows))
	for _, r := range rows {
		out = append(out, console.Decision{Time: r.Time, Mode: r.Mode, Host: r.Host, Addr: r.Addr, Port: r.Port, Outcome: r.Outcome,
			Reason: r.Reason, Count: max(r.Count, 1), BytesUp: r.BytesUp, BytesDown: r.BytesDown, Summary: r.Summary})
	}
	return out, nil
}

func (s consoleSessions) Usage(ctx context.Context, since time.Time) ([]console.UsageRow, error) {
	rows, err := s.st.UsageTotals(ctx, "", since)
	if err != nil {
		return nil, err
	}
	names := s.keyNames(ctx)
	idx := map[string]int{}
	var out []console.UsageRow
	for _, r := range rows { // per key, day and route: summed over routes
		k := r.KeyID + "\x00" + r.Day
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, console.UsageRow{KeyID: r.KeyID, KeyName: names[r.KeyID], Day: r.Day})
		}
		out[i].Requests += r.Requests
		out[i].Errors += r.Errors
		out[i].ExecMS += r.ExecMS
	}
	return out, nil
}
