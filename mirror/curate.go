package mirror

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/duration"
)

// AddOutcome is what a bulk add (`mirror add`) did with one package.
type AddOutcome string

// Bulk add outcomes.
const (
	OutcomeAdmitted AddOutcome = "admitted"
	OutcomeRefused  AddOutcome = "refused" // recorded in the catalogue with its reasons
	OutcomePresent  AddOutcome = "present" // already admitted; nothing fetched
	OutcomeError    AddOutcome = "error"   // nothing recorded (upstream failed, a line that cannot be curated)
	OutcomeSkipped  AddOutcome = "skipped" // not a registry package (a link, a workspace): nothing to curate
)

// AddRow is the outcome of one package of a bulk add, for people.
type AddRow struct {
	Outcome AddOutcome
	Manager Manager
	Name    string
	Version string
	Detail  string
}

// AddJob is one package of a bulk add.
type AddJob struct {
	Manager   Manager
	Spec      Spec     // Version "" = newest without an open advisory
	Hashes    []string // pip: allowed sha256 (requirements --hash)
	Integrity string   // npm: the lockfile's SRI
	Problem   string   // set: report as an error without fetching
	Skip      string   // set: report as skipped
}

// ParseAddSpec takes NAME==VER / NAME@VER, or a bare NAME (resolved to the
// newest version without an open advisory).
func ParseAddSpec(mgr Manager, s string) (Spec, error) {
	pinned := strings.Contains(s, "==")
	if mgr == NPM {
		pinned = strings.LastIndex(s, "@") > 0
	}
	if pinned {
		return ParseSpec(mgr, s)
	}
	if !ValidName(mgr, s) {
		return Spec{}, fmt.Errorf("%w: %q: want NAME or NAME%s", ErrBadSpec, s, map[Manager]string{Pip: "==VERSION", NPM: "@VERSION"}[mgr])
	}
	return Spec{Manager: mgr, Name: s}, nil
}

// AddAll curates every job (a few at a time: each is network-bound) and
// returns one row per job, in job order. accept names advisories the
// operator accepts (for a single package).
func (m *Mirror) AddAll(ctx context.Context, jobs []AddJob, accept []string) []AddRow {
	rows := make([]AddRow, len(jobs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(4, max(1, len(jobs))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				rows[i] = m.addOne(ctx, jobs[i], accept)
			}
		}()
	}
	for i := range jobs {
		work <- i
	}
	close(work)
	wg.Wait()
	return rows
}

func (m *Mirror) addOne(ctx context.Context, j AddJob, accept []string) AddRow {
	row := AddRow{Manager: j.Manager, Name: j.Spec.Name, Version: j.Spec.Version}
	switch {
	case j.Skip != "":
		row.Outcome, row.Detail = OutcomeSkipped, j.Skip
		return row
	case j.Problem != "":
		row.Outcome, row.Detail = OutcomeError, j.Problem
		return row
	}
	var notes []string
	if j.Spec.Version == "" {
		res, err := m.ResolveNewest(ctx, j.Manager, j.Spec.Name)
		for _, s := range res.Skipped {
			n := "skipped " + s.Version + " (" + strings.Join(s.Advisories, ", ")
			if len(s.Fixed) > 0 {
				n += "; fixed in " + strings.Join(slices.Compact(slices.Sorted(slices.Values(s.Fixed))), ", ")
			}
			notes = append(notes, n+")")
		}
		if err != nil {
			row.Outcome, row.Detail = OutcomeError, JoinDetail(append(notes, err.Error()))
			return row
		}
		j.Spec = res.Spec
		row.Version = res.Spec.Version
		notes = append([]string{"newest without an open advisory"}, notes...)
	}
	// Already admitted (and, with --hash, with an allowed hash): nothing
	// to fetch.
	if a, err := m.Lookup(ctx, j.Manager, j.Spec.Name, j.Spec.Version); err == nil && (len(j.Hashes) == 0 || slices.Contains(j.Hashes, a.SHA256)) {
		row.Outcome, row.Name = OutcomePresent, a.Name
		row.Detail = JoinDetail(append(notes, "admitted "+duration.Age(time.Since(a.CreatedAt))+" ago"))
		return row
	}
	var as []Artifact
	var err error
	switch j.Manager {
	case Pip:
		as, err = m.AddPipHashes(ctx, j.Spec, j.Hashes, accept)
	case NPM:
		var a Artifact
		if a, err = m.AddNPMLocked(ctx, j.Spec, j.Integrity, accept); err == nil {
			as = append(as, a)
		}
	}
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		row.Outcome = OutcomeRefused
		adv := m.DescribeAdvisories(ctx, j.Manager, j.Spec.Name, j.Spec.Version, re.Advisories)
		if adv == "" {
			adv = strings.Join(re.Reasons, "; ")
		}
		row.Detail = JoinDetail(append(notes, adv))
	case err != nil:
		row.Outcome, row.Detail = OutcomeError, JoinDetail(append(notes, err.Error()))
	default:
		row.Outcome = OutcomeAdmitted
		for _, a := range as {
			row.Name = a.Name
			notes = append(notes, ArtifactNotes(a)...)
		}
		row.Detail = JoinDetail(notes)
	}
	return row
}

// ArtifactNotes says what an operator should know of an admitted file.
func ArtifactNotes(a Artifact) []string {
	n := []string{a.Filename + " sha256=" + a.SHA256}
	if a.Manager == NPM {
		if len(a.Stripped) == 0 {
			n = append(n, "served as published")
		} else {
			n = append(n, "stripped "+strings.Join(a.Stripped, ", "))
		}
	}
	if len(a.Dependencies) > 0 {
		deps := make([]string, 0, len(a.Dependencies))
		for _, k := range slices.Sorted(maps.Keys(a.Dependencies)) {
			deps = append(deps, k+"@"+a.Dependencies[k])
		}
		n = append(n, "installs need "+strings.Join(deps, ", "))
	}
	if len(a.Accepted) > 0 {
		n = append(n, "accepted "+strings.Join(a.Accepted, ", "))
	}
	return n
}

// JoinDetail joins notes into the detail column of a row.
func JoinDetail(parts []string) string { return strings.Join(parts, "; ") }

// RequirementJobs makes the jobs of a pip requirements file (file names
// the rows of lines that cannot be curated).
func RequirementJobs(data []byte, file string) ([]AddJob, error) {
	reqs, err := ParseRequirements(data)
	if err != nil {
		return nil, err
	}
	jobs := make([]AddJob, 0, len(reqs))
	for _, r := range reqs {
		j := AddJob{Manager: Pip, Spec: r.Spec, Hashes: r.Hashes}
		if r.Problem != "" {
			j.Spec = Spec{Manager: Pip, Name: fmt.Sprintf("%s:%d", filepath.Base(file), r.Line)}
			j.Problem = r.Problem + ": " + r.Raw
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// LockfileJobs makes the jobs of an npm package-lock.json; links and
// workspaces are skipped, not failed.
func LockfileJobs(data []byte, registry string) ([]AddJob, error) {
	entries, err := ParseLockfile(data, registry)
	if err != nil {
		return nil, err
	}
	jobs := make([]AddJob, 0, len(entries))
	for _, e := range entries {
		j := AddJob{Manager: NPM, Spec: Spec{Manager: NPM, Name: e.Name, Version: e.Version}, Integrity: e.Integrity}
		switch {
		case strings.HasPrefix(e.Problem, "a link") || strings.HasPrefix(e.Problem, "a workspace"):
			j.Skip = e.Problem + " (" + e.Path + ")"
		case e.Problem != "":
			j.Problem = e.Problem + " (" + e.Path + ")"
		}
		jobs = append(jobs, j)
	}
	return jobs, nil
}

// AddFileRow admits a local wheel or npm tarball (AddFile) and says what
// came of it as a row; the error is for a file that was not recorded at
// all (a mistyped path, an unreadable file).
func (m *Mirror) AddFileRow(ctx context.Context, path string, accept []string) (AddRow, error) {
	a, err := m.AddFile(ctx, path, accept)
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		detail := m.DescribeAdvisories(ctx, a.Manager, a.Name, a.Version, re.Advisories)
		if detail == "" {
			detail = strings.Join(re.Reasons, "; ")
		}
		return AddRow{Outcome: OutcomeRefused, Manager: a.Manager, Name: a.Name, Version: a.Version, Detail: detail}, nil
	case err != nil:
		return AddRow{}, err
	}
	return AddRow{Outcome: OutcomeAdmitted, Manager: a.Manager, Name: a.Name, Version: a.Version, Detail: JoinDetail(ArtifactNotes(a))}, nil
}
