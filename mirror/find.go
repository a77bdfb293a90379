package mirror

import (
	"context"
	"sort"
	"strings"
)

// Filter selects artifacts of the catalogue. The zero value selects all.
type Filter struct {
	Manager Manager // "" for every manager
	Status  Status  // "" for every status
	Name    string  // a case-insensitive part of the name; "" for any
}

// Find lists the artifacts f selects, in List's order (never nil).
func (m *Mirror) Find(ctx context.Context, f Filter) ([]Artifact, error) {
	all, err := m.List(ctx, f.Manager)
	if err != nil {
		return nil, err
	}
	name := strings.ToLower(f.Name)
	out := []Artifact{}
	for _, a := range all {
		if (f.Status == "" || a.Status == f.Status) && (name == "" || strings.Contains(strings.ToLower(a.Name), name)) {
			out = append(out, a)
		}
	}
	return out, nil
}

// ParseStatus takes an artifact status in any case; ok is false for
// anything else ("" included).
func ParseStatus(s string) (st Status, ok bool) {
	switch st = Status(strings.ToLower(s)); st {
	case StatusAdmitted, StatusRefused, StatusQuarantined, StatusRemoved:
		return st, true
	}
	return st, false
}

// SplitRemoveSpec splits what `mirror remove` takes, NAME[==VERSION] for
// pip or NAME[@VERSION] for npm (a scoped npm name keeps its leading @);
// version is "" for every version. Nothing is validated.
func SplitRemoveSpec(mgr Manager, s string) (name, version string) {
	if mgr == Pip {
		name, version, _ = strings.Cut(s, "==")
		return name, version
	}
	if i := strings.LastIndex(s, "@"); i > 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// Count is how many artifacts of one manager have one status.
type Count struct {
	Manager Manager
	Status  Status
	N       int
}

// Counts counts the catalogue by manager and status, ordered by manager
// then status; pairs with no artifact are left out.
func (m *Mirror) Counts(ctx context.Context) ([]Count, error) {
	arts, err := m.List(ctx, "")
	if err != nil {
		return nil, err
	}
	n := map[Count]int{}
	for _, a := range arts {
		n[Count{Manager: a.Manager, Status: a.Status}]++
	}
	out := make([]Count, 0, len(n))
	for k, v := range n {
		k.N = v
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Manager != out[j].Manager {
			return out[i].Manager < out[j].Manager
		}
		return out[i].Status < out[j].Status
	})
	return out, nil
}
