package cli

import (
	"bytes"
	"context"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/internal/app"
	"github.com/sandboxapi/sandboxapi/mirror"
)

// mirrorSBOMCommand is `mirror sbom`: the whole catalogue, every status,
// as CycloneDX 1.6 JSON.
func mirrorSBOMCommand() *cli.Command {
	return &cli.Command{
		Name:  "sbom",
		Usage: "export the mirror catalogue (every artifact and its status) as CycloneDX 1.6 JSON",
		Flags: append(stateFlags(),
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to this file instead of stdout"}),
		Action: func(c *cli.Context) error {
			return withMirror(c, func(ctx context.Context, env *Env, m *mirror.Mirror) error {
				var buf bytes.Buffer
				n, err := app.CatalogueSBOM(ctx, m, &buf)
				if err != nil {
					return err
				}
				if p := c.String("output"); p != "" {
					if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
						return fmt.Errorf("writing %s: %w", p, err)
					}
					fmt.Fprintf(c.App.ErrWriter, "wrote %d components to %s\n", n, p)
					return nil
				}
				_, err = c.App.Writer.Write(buf.Bytes())
				return err
			})
		},
	}
}
