package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/mirror"
)

// Bulk outcomes: what `mirror add` did with one package.
const (
	outcomeAdmitted = "admitted"
	outcomeRefused  = "refused" // recorded in the catalogue with its reasons
	outcomePresent  = "present" // already admitted; nothing fetched
	outcomeError    = "error"   // nothing recorded (upstream failed, a line that cannot be curated)
	outcomeSkipped  = "skipped" // not a registry package (a link, a workspace): nothing to curate
)

// addRow is one line of the table `mirror add` ends with.
type addRow struct {
	Outcome string
	Manager mirror.Manager
	Name    string
	Version string
	Detail  string
}

// addJob is one package to curate.
type addJob struct {
	mgr       mirror.Manager
	spec      mirror.Spec // Version "" = newest without an open advisory
	hashes    []string    // pip: allowed sha256 (requirements --hash)
	integrity string      // npm: the lockfile's SRI
	problem   string      // set: report as an error without fetching
	skip      string      // set: report as skipped
}

// readListFile reads a requirements or lock file; a missing or unreadable
// path is an error before anything is fetched or recorded.
func readListFile(flag, p string) ([]byte, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("mirror add %s: %w", flag, err)
	}
	return b, nil
}

// bulkJobs builds the jobs of `mirror add` from its flags and arguments.
func bulkJobs(c *cli.Context, args []string, cfg mirror.Config) ([]addJob, error) {
	var jobs []addJob
	if p := c.String("requirement"); p != "" {
		b, err := readListFile("-r", p)
		if err != nil {
			return nil, err
		}
		reqs, err := mirror.ParseRequirements(b)
		if err != nil {
			return nil, fmt.Errorf("mirror add -r %s: %w", p, err)
		}
		for _, r := range reqs {
			j := addJob{mgr: mirror.Pip, spec: r.Spec, hashes: r.Hashes}
			if r.Problem != "" {
				j.spec = mirror.Spec{Manager: mirror.Pip, Name: fmt.Sprintf("%s:%d", filepath.Base(p), r.Line)}
				j.problem = r.Problem + ": " + r.Raw
			}
			jobs = append(jobs, j)
		}
	}
	if p := c.String("lockfile"); p != "" {
		b, err := readListFile("--lockfile", p)
		if err != nil {
			return nil, err
		}
		entries, err := mirror.ParseLockfile(b, cfg.NPMRegistryURL)
		if err != nil {
			return nil, fmt.Errorf("mirror add --lockfile %s: %w", p, err)
		}
		for _, e := range entries {
			j := addJob{mgr: mirror.NPM, spec: mirror.Spec{Manager: mirror.NPM, Name: e.Name, Version: e.Version}, integrity: e.Integrity}
			switch {
			case strings.HasPrefix(e.Problem, "a link") || strings.HasPrefix(e.Problem, "a workspace"):
				j.skip = e.Problem + " (" + e.Path + ")"
			case e.Problem != "":
				j.problem = e.Problem + " (" + e.Path + ")"
			}
			jobs = append(jobs, j)
		}
	}
	if len(args) > 0 && (c.String("requirement") != "" || c.String("lockfile") != "") {
		return nil, errors.New("mirror add: give -r/--lockfile or packages, not both")
	}
	if len(jobs) > 0 || c.String("requirement") != "" || c.String("lockfile") != "" {
		return jobs, nil
	}
	if len(args) >= 2 && (args[0] == "pip" || args[0] == "npm") {
		mgr, _ := mirror.ParseManager(args[0])
		for _, a := range args[1:] {
			spec, err := parseAddSpec(mgr, a)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, addJob{mgr: mgr, spec: spec})
		}
		return jobs, nil
	}
	return nil, nil
}

// parseAddSpec takes NAME==VER / NAME@VER, or a bare NAME (resolved to the
// newest version without an open advisory).
func parseAddSpec(mgr mirror.Manager, s string) (mirror.Spec, error) {
	pinned := strings.Contains(s, "==")
	if mgr == mirror.NPM {
		pinned = strings.LastIndex(s, "@") > 0
	}
	if pinned {
		return mirror.ParseSpec(mgr, s)
	}
	if !mirror.ValidName(mgr, s) {
		return mirror.Spec{}, fmt.Errorf("%w: %q: want NAME or NAME%s", mirror.ErrBadSpec, s, map[mirror.Manager]string{mirror.Pip: "==VERSION", mirror.NPM: "@VERSION"}[mgr])
	}
	return mirror.Spec{Manager: mgr, Name: s}, nil
}

// runAddJobs curates every job (a few at a time: each is network-bound)
// and returns one row per job, in job order.
func runAddJobs(ctx context.Context, m *mirror.Mirror, jobs []addJob, accept []string) []addRow {
	rows := make([]addRow, len(jobs))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(4, max(1, len(jobs))) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				rows[i] = addOne(ctx, m, jobs[i], accept)
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

func addOne(ctx context.Context, m *mirror.Mirror, j addJob, accept []string) addRow {
	row := addRow{Manager: j.mgr, Name: j.spec.Name, Version: j.spec.Version}
	switch {
	case j.skip != "":
		row.Outcome, row.Detail = outcomeSkipped, j.skip
		return row
	case j.problem != "":
		row.Outcome, row.Detail = outcomeError, j.problem
		return row
	}
	var notes []string
	if j.spec.Version == "" {
		res, err := m.ResolveNewest(ctx, j.mgr, j.spec.Name)
		for _, s := range res.Skipped {
			n := "skipped " + s.Version + " (" + strings.Join(s.Advisories, ", ")
			if len(s.Fixed) > 0 {
				n += "; fixed in " + strings.Join(slices.Compact(slices.Sorted(slices.Values(s.Fixed))), ", ")
			}
			notes = append(notes, n+")")
		}
		if err != nil {
			row.Outcome, row.Detail = outcomeError, joinDetail(append(notes, err.Error()))
			return row
		}
		j.spec = res.Spec
		row.Version = res.Spec.Version
		notes = append([]string{"newest without an open advisory"}, notes...)
	}
	// Already admitted (and, with --hash, with an allowed hash): nothing
	// to fetch.
	if a, err := m.Lookup(ctx, j.mgr, j.spec.Name, j.spec.Version); err == nil && (len(j.hashes) == 0 || slices.Contains(j.hashes, a.SHA256)) {
		row.Outcome, row.Name = outcomePresent, a.Name
		row.Detail = joinDetail(append(notes, "admitted "+humanAge(time.Since(a.CreatedAt))+" ago"))
		return row
	}
	var as []mirror.Artifact
	var err error
	switch j.mgr {
	case mirror.Pip:
		as, err = m.AddPipHashes(ctx, j.spec, j.hashes, accept)
	case mirror.NPM:
		var a mirror.Artifact
		if a, err = m.AddNPMLocked(ctx, j.spec, j.integrity, accept); err == nil {
			as = append(as, a)
		}
	}
	var re *mirror.RefusedError
	switch {
	case errors.As(err, &re):
		row.Outcome = outcomeRefused
		adv := m.DescribeAdvisories(ctx, j.mgr, j.spec.Name, j.spec.Version, re.Advisories)
		if adv == "" {
			adv = strings.Join(re.Reasons, "; ")
		}
		row.Detail = joinDetail(append(notes, adv))
	case err != nil:
		row.Outcome, row.Detail = outcomeError, joinDetail(append(notes, err.Error()))
	default:
		row.Outcome = outcomeAdmitted
		for _, a := range as {
			row.Name = a.Name
			notes = append(notes, artifactNotes(a)...)
		}
		row.Detail = joinDetail(notes)
	}
	return row
}

// artifactNotes says what an operator should know of an admitted file.
func artifactNotes(a mirror.Artifact) []string {
	n := []string{a.Filename + " sha256=" + a.SHA256}
	if a.Manager == mirror.NPM {
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

func joinDetail(parts []string) string { return strings.Join(parts, "; ") }

// printAddTable writes the rows and a summary line; it returns the error
// that makes the command exit non-zero when anything was refused or failed.
func printAddTable(w io.Writer, rows []addRow, took time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tMANAGER\tNAME\tVERSION\tDETAIL")
	count := map[string]int{}
	for _, r := range rows {
		count[r.Outcome]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Outcome, r.Manager, r.Name, r.Version, r.Detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d admitted, %d refused, %d already present, %d failed, %d skipped, in %s\n",
		count[outcomeAdmitted], count[outcomeRefused], count[outcomePresent], count[outcomeError], count[outcomeSkipped], humanDuration(took))
	if bad := count[outcomeRefused] + count[outcomeError]; bad > 0 {
		return cli.Exit(fmt.Sprintf("mirror add: %d refused, %d failed (see the table)", count[outcomeRefused], count[outcomeError]), 1)
	}
	return nil
}

// humanDuration prints a duration for people: "850 ms", "12 s",
// "4 minutes", "3 hours", "88 days".
func humanDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return humanAge(d)
}

// humanAge prints an age in whole units: "just now", "1 minute", "5
// hours", "88 days".
func humanAge(d time.Duration) string {
	unit := func(n int64, s string) string {
		if n == 1 {
			return "1 " + s
		}
		return fmt.Sprintf("%d %ss", n, s)
	}
	switch {
	case d < 0:
		return "in the future"
	case d < time.Minute:
		return unit(int64(d/time.Second), "second")
	case d < time.Hour:
		return unit(int64(d/time.Minute), "minute")
	case d < 48*time.Hour:
		return unit(int64(d/time.Hour), "hour")
	}
	return unit(int64(d/(24*time.Hour)), "day")
}
