package cli

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/doctor"
	"github.com/sandboxapi/sandboxapi/internal/app"
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
			if n := doctor.Run(c.Context, doctorConfig(env.Config), c.App.Writer); n > 0 {
				return cli.Exit(fmt.Sprintf("doctor: %d problem(s) found", n), 1)
			}
			return nil
		},
	}
}

// doctorConfig takes from the loaded config the settings doctor checks:
// doctor imports neither the config nor the services behind it.
func doctorConfig(cfg *app.Config) *doctor.Config {
	return &doctor.Config{
		DataDir:       cfg.DataDir,
		Listen:        cfg.Listen,
		Runsc:         cfg.Executor.Runsc,
		Platform:      cfg.Executor.Platform,
		Rootfs:        cfg.Executor.Rootfs,
		GuestBinary:   cfg.Executor.GuestBinary,
		HomeSize:      cfg.Executor.HomeSize,
		MaxSandboxes:  cfg.Executor.MaxSandboxes,
		MaxDisk:       cfg.Executor.MaxDisk,
		StoreURL:      cfg.Store.URL,
		EgressEnabled: cfg.Egress.Enabled,
		TLS: doctor.TLS{
			Mode:       cfg.TLS.Mode,
			CertFile:   cfg.TLS.CertFile,
			KeyFile:    cfg.TLS.KeyFile,
			StorageDir: cfg.TLS.Storage(cfg.DataDir),
		},
		Runtimes: doctorRuntimes(cfg),
	}
}

// doctorRuntimes is the runtimes file as doctor checks it (nil when it
// does not load: validate says why).
func doctorRuntimes(cfg *app.Config) []doctor.Runtime {
	rts, err := app.LoadRuntimes(cfg, "")
	if err != nil {
		return nil
	}
	var out []doctor.Runtime
	for _, r := range rts.Versions() {
		out = append(out, doctor.Runtime{Language: r.Name, Version: r.Series, Path: r.Path(), Programs: r.Programs(), EOL: r.EOL})
	}
	return out
}
