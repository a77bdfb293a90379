package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/mirror"
)

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
func bulkJobs(c *cli.Context, args []string, cfg mirror.Config) ([]mirror.AddJob, error) {
	var jobs []mirror.AddJob
	if p := c.String("requirement"); p != "" {
		b, err := readListFile("-r", p)
		if err != nil {
			return nil, err
		}
		js, err := mirror.RequirementJobs(b, p)
		if err != nil {
			return nil, fmt.Errorf("mirror add -r %s: %w", p, err)
		}
		jobs = append(jobs, js...)
	}
	if p := c.String("lockfile"); p != "" {
		b, err := readListFile("--lockfile", p)
		if err != nil {
			return nil, err
		}
		js, err := mirror.LockfileJobs(b, cfg.NPMRegistryURL)
		if err != nil {
			return nil, fmt.Errorf("mirror add --lockfile %s: %w", p, err)
		}
		jobs = append(jobs, js...)
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
			spec, err := mirror.ParseAddSpec(mgr, a)
			if err != nil {
				return nil, err
			}
			jobs = append(jobs, mirror.AddJob{Manager: mgr, Spec: spec})
		}
		return jobs, nil
	}
	return nil, nil
}

// printAddTable writes the rows and a summary line; it returns the error
// that makes the command exit non-zero when anything was refused or failed.
func printAddTable(w io.Writer, rows []mirror.AddRow, took time.Duration) error {
	refused, failed, err := mirror.WriteAddTable(w, rows, took)
	if err != nil {
		return err
	}
	if refused+failed > 0 {
		return cli.Exit(fmt.Sprintf("mirror add: %d refused, %d failed (see the table)", refused, failed), 1)
	}
	return nil
}
