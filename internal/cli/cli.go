// Package cli is the sandboxapi command line: thin commands that load the
// config, wire the services and call them.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/app"
	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/rootfs"
)

// Version is this binary's version as MCP clients see it; set it with
// -ldflags "-X github.com/sandboxapi/sandboxapi/internal/buildinfo.Version=v1.2.3"
// (or let Go's VCS stamping name it).
var Version = app.Version

// Run runs the CLI and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cli.App{
		Name:           "sandboxapi",
		Usage:          "self-hosted code-execution API for AI agents",
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(*cli.Context, error) {}, // Run decides the exit code
		Commands: []*cli.Command{
			serveCommand(),
			validateCommand(),
			rootfsCommand(),
			keysCommand(),
			clusterCommand(),
			usageCommand(),
			mirrorCommand(),
			doctorCommand(),
			versionCommand(),
			mcpCommand(),
			readinessCommand(),
			fenceCommand(),
		},
	}
	if err := root.RunContext(ctx, hoistFlags(root.Commands, args)); err != nil {
		fmt.Fprintln(stderr, "sandboxapi:", err)
		var ec cli.ExitCoder
		if errors.As(err, &ec) && ec.ExitCode() != 0 {
			return ec.ExitCode()
		}
		return 1
	}
	return 0
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Flags: append(stateFlags(), &cli.BoolFlag{Name: "json", Usage: "print JSON"}),
		Action: func(c *cli.Context) error {
			in := buildinfo.Read()
			runscBin := "runsc"
			if cfg, err := app.LoadConfig(c.String("config")); err == nil {
				runscBin = cfg.Executor.Runsc
			}
			in.Runsc = app.RunscVersion(runscBin)
			if c.Bool("json") {
				return json.NewEncoder(c.App.Writer).Encode(in)
			}
			fmt.Fprintln(c.App.Writer, "sandboxapi", in)
			return nil
		},
	}
}

func validateCommand() *cli.Command {
	return &cli.Command{
		Name:  "validate",
		Usage: "check a config file without starting anything",
		Flags: stateFlags(),
		Action: func(c *cli.Context) error {
			env, err := loadEnv(c)
			if err != nil {
				return err
			}
			if _, err := app.LoadPlans(env.Config); err != nil {
				return err
			}
			if _, err := app.LoadRuntimes(env.Config, ""); err != nil {
				return err
			}
			src := c.String("config")
			if src == "" {
				src = "embedded defaults"
			}
			fmt.Fprintf(c.App.Writer, "config ok: %s\n", src)
			return nil
		},
	}
}

func rootfsCommand() *cli.Command {
	return &cli.Command{
		Name:  "rootfs",
		Usage: "manage the runtime rootfs",
		Subcommands: []*cli.Command{{
			Name:  "build",
			Usage: "build the Debian rootfs with debootstrap (cached by recipe hash), with every language and version of the runtimes file",
			Flags: append(stateFlags(), &cli.StringFlag{Name: "cache", Value: executor.DefaultRootfsCache, Usage: "build cache folder"}),
			Action: func(c *cli.Context) error {
				plan, err := rootfsPlan(c)
				if err != nil {
					return err
				}
				dir, err := rootfs.Build(c.Context, c.String("cache"), plan, c.App.ErrWriter)
				if err != nil {
					return err
				}
				fmt.Fprintln(c.App.Writer, dir)
				return nil
			},
		}, {
			Name:  "plan",
			Usage: "print the part of the rootfs recipe the runtimes file makes (rootfs/build.sh sources it)",
			Flags: stateFlags(),
			Action: func(c *cli.Context) error {
				plan, err := rootfsPlan(c)
				if err != nil {
					return err
				}
				_, err = c.App.Writer.Write(plan)
				return err
			},
		}},
	}
}

// rootfsPlan is the build plan of the configured runtimes file.
func rootfsPlan(c *cli.Context) ([]byte, error) {
	env, err := loadEnv(c)
	if err != nil {
		return nil, err
	}
	rts, err := app.LoadRuntimes(env.Config, "")
	if err != nil {
		return nil, err
	}
	return rts.BuildPlan(), nil
}
