package cli

import (
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestHoistFlags(t *testing.T) {
	app := &cli.App{Commands: []*cli.Command{keysCommand(), mirrorCommand(), serveCommand(), mcpCommand()}}
	tests := []struct {
		in, want string
	}{
		{"sandboxapi keys revoke key_a --data-dir /x", "sandboxapi keys revoke --data-dir /x key_a"},
		{"sandboxapi keys revoke --data-dir /x key_a", "sandboxapi keys revoke --data-dir /x key_a"},
		{"sandboxapi keys revoke key_a --data-dir=/x", "sandboxapi keys revoke --data-dir=/x key_a"},
		{"sandboxapi mirror add pip requests==2.32.3 --accept GHSA-1 --config c.yaml", "sandboxapi mirror add --accept GHSA-1 --config c.yaml pip requests==2.32.3"},
		{"sandboxapi mirror list --json --data-dir /x", "sandboxapi mirror list --json --data-dir /x"},
		{"sandboxapi mirror osv import /osv --data-dir /x", "sandboxapi mirror osv import --data-dir /x /osv"},
		{"sandboxapi keys revoke key_a -- --data-dir", "sandboxapi keys revoke key_a -- --data-dir"},
		{"sandboxapi keys revoke key_a --no-such-flag", "sandboxapi keys revoke --no-such-flag key_a"},
		{"sandboxapi keys revoke key_a --data-dir", "sandboxapi keys revoke key_a --data-dir"},
		{"sandboxapi mirror add - --data-dir /x", "sandboxapi mirror add --data-dir /x -"},
		{"sandboxapi mirror frobnicate --x", "sandboxapi mirror frobnicate --x"}, // not a leaf: untouched
		{"sandboxapi nosuch a --b c", "sandboxapi nosuch a --b c"},
		{"sandboxapi", "sandboxapi"},
	}
	for _, tt := range tests {
		got := strings.Join(hoistFlags(app.Commands, strings.Fields(tt.in)), " ")
		if got != tt.want {
			t.Errorf("hoistFlags(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// The input is not modified in place.
	in := strings.Fields("sandboxapi keys revoke key_a --data-dir /x")
	orig := slices.Clone(in)
	hoistFlags(app.Commands, in)
	if !slices.Equal(in, orig) {
		t.Errorf("hoistFlags changed its input: %v", in)
	}
}
