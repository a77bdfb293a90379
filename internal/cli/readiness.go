package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

func readinessCommand() *cli.Command {
	return &cli.Command{
		Name:  "readiness",
		Usage: "inspect the readiness checks that gate package installs",
		Subcommands: []*cli.Command{{
			Name:  "check",
			Usage: "run the running server's checks now and print them; exits non-zero unless all pass",
			Flags: append(clientFlags(),
				&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				&cli.DurationFlag{Name: "timeout", Value: time.Minute, Usage: "how long to wait for the checks"},
			),
			Action: readinessCheck,
		}},
	}
}

func readinessCheck(c *cli.Context) error {
	base, err := serverURL(c)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/readyz?refresh=1", nil)
	if err != nil {
		return err
	}
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return cli.Exit(fmt.Sprintf("readiness: server not reachable at %s: %v", base, err), 2)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var doc struct {
		Status string `json:"status"`
		Checks []struct {
			Name    string    `json:"name"`
			Status  string    `json:"status"`
			Detail  string    `json:"detail"`
			LastRun time.Time `json:"last_run"`
		} `json:"checks"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return cli.Exit(fmt.Sprintf("readiness: unreadable reply (%s)", resp.Status), 2)
	}
	if c.Bool("json") {
		fmt.Fprintln(c.App.Writer, strings.TrimSpace(string(body)))
	} else {
		tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tSTATUS\tLAST RUN\tDETAIL")
		for _, ch := range doc.Checks {
			last := "never"
			if !ch.LastRun.IsZero() {
				last = ch.LastRun.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ch.Name, ch.Status, last, ch.Detail)
		}
		tw.Flush()
		fmt.Fprintln(c.App.Writer, "status:", doc.Status)
	}
	if resp.StatusCode != http.StatusOK || doc.Status != "ready" {
		return cli.Exit("readiness: not ready", 1)
	}
	return nil
}
