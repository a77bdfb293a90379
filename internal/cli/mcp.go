package cli

import (
	"fmt"
	"log/slog"
	"os"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/mcp"
)

// mcpCommand serves the MCP tools on stdio for a desktop client, forwarding
// every call to a running server with the key from SANDBOXAPI_KEY. Stdout
// carries the protocol; logs go to stderr.
func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the MCP tools on stdio, forwarding to a sandboxapi server (key from SANDBOXAPI_KEY)",
		Flags: append(clientFlags(),
			&cli.StringFlag{Name: "log-level", Usage: "debug, info, warn or error (logs go to stderr)", Value: "warn"},
		),
		Action: func(c *cli.Context) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return fmt.Errorf("parsing --log-level: %w", err)
			}
			base, err := serverURL(c)
			if err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(c.App.ErrWriter, &slog.HandlerOptions{Level: level}))
			return mcp.ServeStdio(c.Context, &sdk.StdioTransport{}, mcp.Options{
				BaseURL: base, Key: os.Getenv("SANDBOXAPI_KEY"), Version: Version, Logger: log,
			})
		},
	}
}
