package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

// withMirror loads the env, opens the store and the mirror, and runs fn.
func withMirror(c *cli.Context, fn func(ctx context.Context, env *Env, m *mirror.Mirror) error) error {
	return withStore(c, func(env *Env, st *store.Store) error {
		m, err := env.OpenMirror(c.Context, st)
		if err != nil {
			return err
		}
		return fn(c.Context, env, m)
	})
}

func mirrorCommand() *cli.Command {
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON"}
	return &cli.Command{
		Name:  "mirror",
		Usage: "curate the pip/npm mirror",
		Subcommands: []*cli.Command{
			mirrorServeCommand(),
			mirrorSBOMCommand(),
			{
				Name: "add",
				Usage: "admit packages: add pip NAME[==VER]... | add npm NAME[@VER]... | add FILE (.whl or .tgz) | add -r requirements.txt | add --lockfile package-lock.json; " +
					"a bare NAME takes the newest version with no open advisory; ends with a table and exits 1 when anything was refused or failed",
				ArgsUsage: "pip NAME[==VER]... | npm NAME[@VER]... | FILE",
				Flags: append(stateFlags(), &cli.StringSliceFlag{
					Name:  "accept",
					Usage: "OSV advisory id the operator accepts (repeat; must name exactly the matched ids)",
				}, &cli.StringFlag{
					Name: "requirement", Aliases: []string{"r"},
					Usage: "a pip requirements file: every pinned name==version, with its --hash=sha256: values honoured",
				}, &cli.StringFlag{
					Name:  "lockfile",
					Usage: "a package-lock.json (v1-v3): every package it resolves from the registry, checked against its integrity",
				}),
				Action: mirrorAdd,
			},
			{
				Name:      "remove",
				Usage:     "withdraw a package: remove pip NAME[==VER] | remove npm NAME[@VER]",
				ArgsUsage: "pip NAME[==VER] | npm NAME[@VER]",
				Flags:     stateFlags(),
				Action:    mirrorRemove,
			},
			{
				Name:  "list",
				Usage: "list artifacts with status and reasons",
				Flags: append(stateFlags(), jsonFlag,
					&cli.StringFlag{Name: "ecosystem", Aliases: []string{"manager"}, Usage: mirror.KnownManagers},
					&cli.StringFlag{Name: "name", Usage: "names containing this text (case-insensitive)"},
					&cli.StringFlag{Name: "status", Usage: "admitted, refused, quarantined or removed"}),
				Action: mirrorList,
			},
			{
				Name:  "verify",
				Usage: "re-hash every stored file; altered or missing ones are quarantined",
				Flags: stateFlags(),
				Action: func(c *cli.Context) error {
					return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
						res, err := m.Verify(ctx)
						fmt.Fprintf(env.Stdout, "verified %d, quarantined %d\n", res.Checked, len(res.Quarantined))
						mirror.WriteQuarantined(env.Stdout, res.Quarantined)
						return quarantineExit("mirror verify", len(res.Quarantined), err)
					})
				},
			},
			{
				Name:  "recheck",
				Usage: "re-run the OSV gate on every admitted artifact; newly affected ones are quarantined",
				Flags: stateFlags(),
				Action: func(c *cli.Context) error {
					return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
						res, err := m.Recheck(ctx)
						fmt.Fprintf(env.Stdout, "checked %d, quarantined %d, kept by exception %d\n", res.Checked, len(res.Quarantined), len(res.Excepted))
						mirror.WriteQuarantined(env.Stdout, res.Quarantined)
						for _, a := range res.Excepted {
							fmt.Fprintf(env.Stdout, "kept by exception %s %s: accepted %s\n", a.Manager, a.Filename, strings.Join(a.Accepted, ", "))
						}
						return quarantineExit("mirror recheck", len(res.Quarantined), err)
					})
				},
			},
			{
				Name:  "osv",
				Usage: "manage the local OSV database",
				Subcommands: []*cli.Command{
					{
						Name:      "import",
						Usage:     "import OSV records: a folder of <Ecosystem>/<ID>.json or all.zip files, or one all.zip",
						ArgsUsage: "PATH",
						Flags:     stateFlags(),
						Action: func(c *cli.Context) error {
							if c.NArg() != 1 {
								return fmt.Errorf("mirror osv import: want exactly one PATH")
							}
							return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
								snap, err := m.ImportOSV(ctx, c.Args().First())
								if err != nil {
									return err
								}
								fmt.Fprintf(env.Stdout, "imported %d records (%s), newest modified %s, snapshot %s\n",
									snap.Records, strings.Join(snap.Ecosystems, ", "), snap.NewestModified.Format(time.RFC3339), snap.ID)
								if snap.Skipped > 0 {
									fmt.Fprintf(env.Stdout, "skipped %d records that name no ecosystem this mirror holds\n", snap.Skipped)
								}
								return nil
							})
						},
					},
					{
						Name:  "status",
						Usage: "show the OSV database's snapshot and age",
						Flags: append(stateFlags(), jsonFlag),
						Action: func(c *cli.Context) error {
							return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
								st, err := m.OSVStatus(ctx)
								if err != nil {
									return err
								}
								if c.Bool("json") {
									return json.NewEncoder(env.Stdout).Encode(st)
								}
								st.WriteText(env.Stdout)
								return nil
							})
						},
					},
				},
			},
		},
	}
}

// quarantineExit is the outcome of verify and recheck: a failure (exit 1)
// when the run could not finish or quarantined anything (an altered,
// missing or unreadable file, a newly matching advisory), so that a
// systemd timer running them fails visibly instead of logging success.
func quarantineExit(cmd string, quarantined int, err error) error {
	switch {
	case err != nil && quarantined > 0:
		return cli.Exit(fmt.Sprintf("%s: %d artifact(s) quarantined; and: %v", cmd, quarantined, err), 1)
	case err != nil:
		return err
	case quarantined > 0:
		return cli.Exit(fmt.Sprintf("%s: %d artifact(s) quarantined (no longer served; see mirror list)", cmd, quarantined), 1)
	}
	return nil
}

// splitAccept pulls "--accept ID" / "--accept=ID" out of args, so the flag
// also works after the positional arguments.
func splitAccept(args []string) (rest, accept []string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--accept" || a == "-accept":
			if i+1 >= len(args) {
				return nil, nil, errors.New("--accept needs an advisory id")
			}
			accept = append(accept, args[i+1])
			i++
		case strings.HasPrefix(a, "--accept=") || strings.HasPrefix(a, "-accept="):
			_, v, _ := strings.Cut(a, "=")
			accept = append(accept, v)
		default:
			rest = append(rest, a)
		}
	}
	return rest, accept, nil
}

func mirrorAdd(c *cli.Context) error {
	args, accept, err := splitAccept(c.Args().Slice())
	if err != nil {
		return err
	}
	accept = append(accept, c.StringSlice("accept")...)
	return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
		start := time.Now()
		jobs, err := bulkJobs(c, args, m.Config())
		if err != nil {
			return err
		}
		if len(accept) > 0 && len(jobs) > 1 {
			// An exception names exactly one package's matching advisories;
			// applied to a list it would refuse every clean package.
			return errors.New("mirror add: --accept applies to one package: add that package on its own")
		}
		var rows []mirror.AddRow
		switch {
		case jobs != nil || c.String("requirement") != "" || c.String("lockfile") != "":
			rows = m.AddAll(ctx, jobs, accept)
		case len(args) == 1:
			row, err := m.AddFileRow(ctx, args[0], accept)
			if err != nil {
				return err // a mistyped path or an unreadable file: nothing recorded
			}
			rows = append(rows, row)
		default:
			return errors.New("mirror add: want pip NAME[==VER]..., npm NAME[@VER]..., FILE, -r requirements.txt or --lockfile package-lock.json")
		}
		return printAddTable(env.Stdout, rows, time.Since(start))
	})
}

func mirrorRemove(c *cli.Context) error {
	if c.NArg() != 2 {
		return errors.New("mirror remove: want pip NAME[==VER] or npm NAME[@VER]")
	}
	mgr, err := mirror.ParseManager(c.Args().Get(0))
	if err != nil {
		return fmt.Errorf("mirror remove: %w", err)
	}
	name, version := mirror.SplitRemoveSpec(mgr, c.Args().Get(1))
	return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
		as, err := m.Remove(ctx, mgr, name, version)
		for _, a := range as {
			fmt.Fprintf(env.Stdout, "removed %s %s\n", a.Manager, a.Filename)
		}
		return err
	})
}

func mirrorList(c *cli.Context) error {
	f := mirror.Filter{Name: c.String("name")}
	if s := c.String("ecosystem"); s != "" {
		var err error
		if f.Manager, err = mirror.ParseManager(strings.ToLower(s)); err != nil {
			return fmt.Errorf("mirror list: --ecosystem: %w", err)
		}
	}
	if s := c.String("status"); s != "" {
		var ok bool
		if f.Status, ok = mirror.ParseStatus(s); !ok {
			return fmt.Errorf("mirror list: --status %q: want admitted, refused, quarantined or removed", f.Status)
		}
	}
	return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
		as, err := m.Find(ctx, f)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			return json.NewEncoder(env.Stdout).Encode(as)
		}
		return mirror.WriteList(env.Stdout, as, time.Now())
	})
}
