package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/doctor"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check the host: runsc, its platform, cgroups, rootfs, netns and nft, disk space, store, TLS; print what to fix",
		Flags: stateFlags(),
		Action: func(c *cli.Context) error {
			env, err := loadEnv(c)
			if err != nil {
				return err
			}
			if n := doctor.Run(c.Context, env.Config, c.App.Writer); n > 0 {
				return cli.Exit(fmt.Sprintf("doctor: %d problem(s) found", n), 1)
			}
			return nil
		},
	}
}
