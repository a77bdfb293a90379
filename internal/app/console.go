package app

import (
	"context"
	"errors"
	"net/http"

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
	_ console.HomeUsage = (*executor.Executor)(nil)
)

// newConsole builds the operator console (served at /console).
func newConsole(env *Env, ready api.ReadinessReporter, mir *mirror.Mirror, st *store.Store, disk console.HomeUsage) http.Handler {
	return console.New(console.Deps{
		Admins:    consoleAdmins{st},
		Readiness: consoleReadiness{ready},
		Catalogue: consoleCatalogue{mir},
		Sessions:  console.NewStoreSessions(st, disk),
		Usage:     console.NewStoreSessions(st, nil),
		Packages:  console.NewStorePackages(st),
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
			Status: string(a.Status), Reasons: a.Reasons, Advisories: a.Advisories, Accepted: a.Accepted, OSVSnapshot: a.OSVSnapshot, UpdatedAt: a.UpdatedAt,
			Stripped: a.Stripped})
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
