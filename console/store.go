package console

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// HomeUsage reports a live session's disk (the executor).
type HomeUsage interface {
	HomeUsage(id string) (used, size int64, ok bool)
}

// StoreSessions serves the console's session, egress and usage views from
// the store, with live sessions' disk from disk (not shown when nil). Safe
// for concurrent use.
type StoreSessions struct {
	st   *store.Store
	disk HomeUsage
}

var (
	_ Sessions = StoreSessions{}
	_ Usage    = StoreSessions{}
)

// NewStoreSessions reads st; disk may be nil.
func NewStoreSessions(st *store.Store, disk HomeUsage) StoreSessions {
	return StoreSessions{st: st, disk: disk}
}

func (s StoreSessions) keyNames(ctx context.Context) map[string]string {
	names := map[string]string{}
	if keys, err := s.st.ListKeys(ctx); err == nil {
		for _, k := range keys {
			names[k.ID] = k.Name
		}
	}
	return names
}

func (s StoreSessions) toConsole(r store.SessionRow, names map[string]string) Session {
	c := toConsoleSession(r, names)
	if s.disk != nil && r.EndedAt.IsZero() {
		if used, size, ok := s.disk.HomeUsage(r.ID); ok {
			c.DiskUsed, c.DiskSize = used, size
		}
	}
	return c
}

func toConsoleSession(r store.SessionRow, names map[string]string) Session {
	enabled, domains, more := readNetwork(r.Network, MaxShownDomains)
	return Session{ID: r.ID, KeyID: r.KeyID, KeyName: names[r.KeyID], Language: r.Language, State: string(r.State),
		NetworkEnabled: enabled, AllowedDomains: domains, MoreDomains: more, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt,
		EndedAt: r.EndedAt, EndReason: r.EndReason}
}

// readNetwork reads a stored network block token by token, keeping the
// first keep allowed_domains entries and counting the rest, so a row
// stored before the caps (or by a node without them) costs no more than
// its text. A block that does not read is a session without network.
func readNetwork(raw string, keep int) (enabled bool, domains []string, more int) {
	dec := json.NewDecoder(strings.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false, nil, 0
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false, nil, 0
		}
		switch t {
		case "enabled":
			if err := dec.Decode(&enabled); err != nil {
				return false, nil, 0
			}
		case "allowed_domains":
			if t, err := dec.Token(); err != nil || t != json.Delim('[') {
				if t == nil && err == nil { // null
					continue
				}
				return false, nil, 0
			}
			for dec.More() {
				var d string
				if err := dec.Decode(&d); err != nil {
					return false, nil, 0
				}
				if len(domains) < keep {
					domains = append(domains, d)
				} else {
					more++
				}
			}
			if _, err := dec.Token(); err != nil {
				return false, nil, 0
			}
		default:
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return false, nil, 0
			}
		}
	}
	return enabled, domains, more
}

func (s StoreSessions) Sessions(ctx context.Context, offset, limit int) ([]Session, error) {
	rows, err := s.st.RecentSessionsPage(ctx, offset, limit)
	if err != nil {
		return nil, err
	}
	names := s.keyNames(ctx)
	out := make([]Session, 0, len(rows))
	for _, r := range rows {
		out = append(out, s.toConsole(r, names))
	}
	return out, nil
}

func (s StoreSessions) Session(ctx context.Context, id string) (Session, error) {
	r, err := s.st.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, err
	}
	return s.toConsole(r, s.keyNames(ctx)), nil
}

func (s StoreSessions) Egress(ctx context.Context, id string, limit int) ([]Decision, error) {
	rows, err := s.st.EgressDecisions(ctx, id, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Decision, 0, len(rows))
	for _, r := range rows {
		out = append(out, Decision{Time: r.Time, Mode: r.Mode, Host: r.Host, Addr: r.Addr, Port: r.Port, Outcome: r.Outcome,
			Reason: r.Reason, Count: max(r.Count, 1), BytesUp: r.BytesUp, BytesDown: r.BytesDown, Summary: r.Summary})
	}
	return out, nil
}

func (s StoreSessions) Usage(ctx context.Context, since time.Time) ([]UsageRow, error) {
	rows, err := s.st.UsageTotals(ctx, "", since)
	if err != nil {
		return nil, err
	}
	names := s.keyNames(ctx)
	idx := map[string]int{}
	var out []UsageRow
	for _, r := range rows { // per key, day and route: summed over routes
		k := r.KeyID + "\x00" + r.Day
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, UsageRow{KeyID: r.KeyID, KeyName: names[r.KeyID], Day: r.Day})
		}
		out[i].Requests += r.Requests
		out[i].Errors += r.Errors
		out[i].ExecMS += r.ExecMS
	}
	return out, nil
}

// StorePackages serves the console's package pages from the store: the
// mirror's catalogue rows, the npm dependencies recorded on them, and the
// session installs the session SBOM is built from. Safe for concurrent
// use.
type StorePackages struct{ st *store.Store }

var _ Packages = StorePackages{}

// NewStorePackages reads st.
func NewStorePackages(st *store.Store) StorePackages { return StorePackages{st: st} }

// maxSpellings bounds the names one package was catalogued under that
// its installs are looked up by.
const maxSpellings = 20

func (s StorePackages) Package(ctx context.Context, manager, nameKey string, offset, limit, maxList int) (Package, error) {
	rows, total, err := s.st.MirrorPackage(ctx, manager, nameKey, offset, limit)
	if err != nil {
		return Package{}, err
	}
	if total == 0 {
		return Package{}, ErrNotFound
	}
	p := Package{TotalVersions: total, Versions: make([]PackageVersion, 0, len(rows))}
	for _, r := range rows {
		p.Versions = append(p.Versions, PackageVersion{Version: r.Version, Filename: r.Filename, Status: r.Status, Reasons: r.Reasons,
			Advisories: r.Advisories, Accepted: r.Accepted, Stripped: r.Stripped, OSVSnapshot: r.OSVSnapshot, UpdatedAt: r.UpdatedAt})
	}
	if p.Advisories, p.MoreAdvisories, err = s.st.MirrorPackageAdvisories(ctx, manager, nameKey, maxList); err != nil {
		return Package{}, err
	}
	if p.Names, err = s.st.MirrorPackageNames(ctx, manager, nameKey, maxSpellings); err != nil {
		return Package{}, err
	}
	if manager == "npm" && len(p.Names) > 0 {
		refs, more, err := s.st.NPMDependents(ctx, p.Names[0], maxList)
		if err != nil {
			return Package{}, err
		}
		for _, r := range refs {
			p.Dependents = append(p.Dependents, Dependent{Name: r.Name, Version: r.Version})
		}
		p.MoreDependents = more
	}
	installs, err := s.st.PackageInstalls(ctx, manager, p.Names, maxList)
	if err != nil {
		return Package{}, err
	}
	for _, r := range installs {
		p.Installs = append(p.Installs, Install{SessionID: r.SessionID, KeyID: r.KeyID, Version: r.Version, Filename: r.Filename, InstalledAt: r.InstalledAt})
	}
	return p, nil
}
