package cli

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/api"
	"github.com/sandboxapi/sandboxapi/internal/app"
	"github.com/sandboxapi/sandboxapi/store"
)

func keysCommand() *cli.Command {
	return &cli.Command{
		Name:  "keys",
		Usage: "manage API keys (stored hashed)",
		Subcommands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create a key; the secret is printed once, alone on the last line",
				Flags: append(stateFlags(),
					&cli.StringFlag{Name: "plan", Usage: "BASIC, PRO, ULTRA or MEGA (see plans.yaml); required unless --admin"},
					&cli.StringFlag{Name: "name", Required: true, Usage: "who the key is for"},
					&cli.BoolFlag{Name: "admin", Usage: "an operator key: opens the console (/console) and never the API"}),
				Action: func(c *cli.Context) error {
					env, err := loadEnv(c)
					if err != nil {
						return err
					}
					if c.Bool("admin") {
						if c.String("plan") != "" {
							return errors.New("--admin keys have no plan: leave out --plan")
						}
						return createKey(c, env, store.KindAdmin, "")
					}
					if c.String("plan") == "" {
						return errors.New("--plan is required (or --admin for an operator key)")
					}
					plans, err := app.LoadPlans(env.Config)
					if err != nil {
						return err
					}
					plan, ok := plans.Get(c.String("plan"))
					if !ok {
						return fmt.Errorf("unknown plan %q (have %s)", c.String("plan"), strings.Join(plans.Names(), ", "))
					}
					return createKey(c, env, store.KindClient, plan.Name)
				},
			},
			{
				Name:  "list",
				Usage: "list keys (never their secrets)",
				Flags: stateFlags(),
				Action: func(c *cli.Context) error {
					return withStore(c, func(env *Env, st *store.Store) error {
						keys, err := st.ListKeys(c.Context)
						if err != nil {
							return err
						}
						tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
						fmt.Fprintln(tw, "ID\tNAME\tPLAN\tCREATED\tREVOKED")
						for _, k := range keys {
							revoked := "-"
							if !k.RevokedAt.IsZero() {
								revoked = k.RevokedAt.Format(time.RFC3339)
							}
							plan := k.Plan
							if k.Kind == store.KindAdmin {
								plan = "(admin)"
							}
							fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", k.ID, k.Name, plan, k.CreatedAt.Format(time.RFC3339), revoked)
						}
						return tw.Flush()
					})
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a key by id; it stops working at once",
				ArgsUsage: "ID",
				Flags:     stateFlags(),
				Action: func(c *cli.Context) error {
					if c.NArg() != 1 {
						return errors.New("usage: sandboxapi keys revoke ID")
					}
					return withStore(c, func(env *Env, st *store.Store) error {
						if err := st.RevokeKey(c.Context, c.Args().First()); err != nil {
							if errors.Is(err, store.ErrNotFound) {
								return fmt.Errorf("no active key %s", c.Args().First())
							}
							return err
						}
						fmt.Fprintf(c.App.Writer, "revoked %s\n", c.Args().First())
						return nil
					})
				},
			},
		},
	}
}

// createKey stores a new key of kind and prints its secret alone on the
// last line of stdout.
func createKey(c *cli.Context, env *Env, kind, plan string) error {
	name := strings.TrimSpace(c.String("name"))
	if name == "" || len(name) > 128 {
		return errors.New("--name must be 1 to 128 characters")
	}
	st, err := env.OpenStore(c.Context)
	if err != nil {
		return err
	}
	defer st.Close()
	row, secret := api.NewKey(name, plan, kind, time.Now())
	if err := st.InsertKey(c.Context, row); err != nil {
		return err
	}
	id := row.ID
	what := "plan " + plan
	if kind == store.KindAdmin {
		what = "admin: console only"
	}
	fmt.Fprintf(c.App.ErrWriter, "created key %s (%s, %s); the secret is shown only now:\n", id, name, what)
	fmt.Fprintln(c.App.Writer, secret)
	return nil
}

func usageCommand() *cli.Command {
	return &cli.Command{
		Name:  "usage",
		Usage: "show metered usage of every key per day and route",
		Flags: append(stateFlags(), &cli.IntFlag{Name: "days", Value: 30, Usage: "how many days back"}),
		Action: func(c *cli.Context) error {
			return withStore(c, func(env *Env, st *store.Store) error {
				rows, err := st.UsageTotals(c.Context, "", time.Now().AddDate(0, 0, -c.Int("days")))
				if err != nil {
					return err
				}
				tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "DAY\tKEY\tROUTE\tREQUESTS\tERRORS\tBYTES_IN\tBYTES_OUT\tEXEC_MS\tDURATION_MS")
				for _, u := range rows {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\n", u.Day, u.KeyID, u.Route, u.Requests, u.Errors, u.BytesIn, u.BytesOut, u.ExecMS, u.DurationMS)
				}
				return tw.Flush()
			})
		},
	}
}
