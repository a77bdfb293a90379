package installer

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// requirement is a dependency of a requested npm package that the request
// does not bring; the installer checks the session for it.
type requirement struct {
	By       string   `json:"by"`
	Name     string   `json:"name"`
	Range    string   `json:"range"`
	Versions []string `json:"versions"` // every version the catalog knows that satisfies Range
	admitted []string
	pip      bool // a pip requirement (Range is a PEP 440 specifier)
}

// reasonNames is how many missing dependencies a rejection's reason spells
// out; its MissingDependencies list names every one.
const reasonNames = 20

// missingRejection says what spec needs and what to add to the request.
// unchecked means the session's copies could not be checked.
func missingRejection(spec string, missing []sandbox.MissingDependency, unchecked bool) sandbox.PackageRejection {
	return missingRejectionFor(NPM, spec, missing, unchecked)
}

// missingRejectionFor is missingRejection for a manager's spelling of
// requirements.
func missingRejectionFor(m Manager, spec string, missing []sandbox.MissingDependency, unchecked bool) sandbox.PackageRejection {
	parts := make([]string, 0, min(len(missing), reasonNames)+1)
	for _, d := range missing[:min(len(missing), reasonNames)] {
		s := d.Name + "@" + d.Range
		if m == Pip {
			s = d.Name + d.Range
		}
		switch {
		case d.Requested != "":
			s += " (the request names " + d.Requested + ", outside the range"
		case d.Installed != "":
			s += " (the session has " + d.Installed + ", outside the range"
		case unchecked:
			s += " (not in the request; the session's copy could not be checked"
		default:
			s += " (not in the request nor in the session"
		}
		if len(d.MirrorVersions) > 0 {
			s += "; the mirror has " + strings.Join(d.MirrorVersions, ", ") + ")"
		} else {
			s += "; the mirror has no version in that range)"
		}
		parts = append(parts, s)
	}
	if n := len(missing) - reasonNames; n > 0 {
		parts = append(parts, fmt.Sprintf("and %d more (see missing_dependencies)", n))
	}
	return sandbox.PackageRejection{Package: spec, Status: "missing_dependencies", MissingDependencies: missing,
		Reason: "needs " + strings.Join(parts, ", ") + ": install them in the same request"}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// missingExit is the install job's exit code when a requirement is not in
// the session; it then prints its session report (see sessionReport) and
// changes nothing.
const missingExit = 4

// Marks of a session report, one per requirement in the job's order.
const (
	markPresent = '.' // the session holds a version the catalog lists
	markAbsent  = '-' // the session holds no such package
	markOther   = 'v' // the session holds another version
)

// sessionReport is the install job's answer when a requirement is not in
// the session: the first line of its output, of bounded size whatever the
// session holds (install.py's check_requires). Requires has one mark per
// requirement; Installed maps a requirement's index to the version found,
// for at most the first 64 marked markOther whose version is a plain
// version string of at most 64 bytes.
type sessionReport struct {
	OK        bool              `json:"ok"`
	Requires  string            `json:"requires"`
	Installed map[string]string `json:"installed"`
}

// parseSessionReport reads the job's report from the start of its output;
// it must have one mark per requirement.
func parseSessionReport(stdout string, n int) (sessionReport, error) {
	var rep sessionReport
	if err := json.NewDecoder(strings.NewReader(stdout)).Decode(&rep); err != nil {
		return rep, fmt.Errorf("reading the install job's session report: %w", err)
	}
	if rep.OK || len(rep.Requires) != n {
		return rep, fmt.Errorf("install job's session report has %d marks for %d requirements", len(rep.Requires), n)
	}
	for _, c := range []byte(rep.Requires) {
		if c != markPresent && c != markAbsent && c != markOther {
			return rep, fmt.Errorf("install job's session report has mark %q", c)
		}
	}
	return rep, nil
}

// missingFromJob turns the job's report into a rejection per package,
// naming every requirement the session lacks with what the mirror has;
// reqs is not empty.
// A report that cannot be read (the job's output cut short) rejects every
// requirement, saying the session could not be checked: still a
// rejection, never an install failure.
func missingFromJob(stdout string, reqs []requirement, log *slog.Logger) *sandbox.RejectedError {
	rep, err := parseSessionReport(stdout, len(reqs))
	if err == nil && strings.Count(rep.Requires, string(markPresent)) == len(reqs) {
		// Every mark says present, yet the job stopped: name them all
		// rather than install on a report that contradicts itself.
		err = errors.New("install job's session report marks every requirement present")
	}
	unchecked := err != nil
	if unchecked {
		if log != nil {
			log.Warn("install job's session report unreadable; naming every requirement", "err", err, "requirements", len(reqs))
		}
		rep.Requires = strings.Repeat(string(markAbsent), len(reqs))
	}
	byPkg := map[string][]sandbox.MissingDependency{}
	var order []string
	mgr := NPM
	if len(reqs) > 0 && reqs[0].pip {
		mgr = Pip
	}
	for k, r := range reqs {
		mark := rep.Requires[k]
		if mark == markPresent {
			continue
		}
		d := sandbox.MissingDependency{Name: r.Name, Range: r.Range, MirrorVersions: nonNil(r.admitted)}
		if mark == markOther {
			d.Installed = "another version"
			if v, ok := rep.Installed[strconv.Itoa(k)]; ok && plainVersion(v) {
				d.Installed = v
			}
		}
		if _, ok := byPkg[r.By]; !ok {
			order = append(order, r.By)
		}
		byPkg[r.By] = append(byPkg[r.By], d)
	}
	rej := &sandbox.RejectedError{}
	for _, by := range order {
		rej.Packages = append(rej.Packages, missingRejectionFor(mgr, by, byPkg[by], unchecked))
	}
	return rej
}

// plainVersion reports whether v is a version string fit to echo: 1 to 64
// bytes of letters, digits, '.', '+' and '-'.
func plainVersion(v string) bool {
	if v == "" || len(v) > 64 {
		return false
	}
	for _, c := range []byte(v) {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '.' || c == '+' || c == '-') {
			return false
		}
	}
	return true
}
