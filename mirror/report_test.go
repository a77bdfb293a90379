package mirror

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/mirror/osvdb"
)

// The operator's reports: each names what it shows, in columns.
func TestReports(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		write func(*bytes.Buffer)
		want  []string // substrings, in order
	}{
		{name: "add table", write: func(b *bytes.Buffer) {
			refused, failed, err := WriteAddTable(b, []AddRow{
				{Outcome: OutcomeAdmitted, Manager: Pip, Name: "wheel", Version: "0.43.0"},
				{Outcome: OutcomeRefused, Manager: NPM, Name: "ms", Version: "2.0.0", Detail: "GHSA-x"},
				{Outcome: OutcomeError, Manager: Pip, Name: "gone", Detail: "upstream 404"},
			}, 1500*time.Millisecond)
			if refused != 1 || failed != 1 || err != nil {
				t.Errorf("refused %d failed %d err %v, want 1 1 nil", refused, failed, err)
			}
		}, want: []string{"OUTCOME", "admitted", "wheel", "refused", "GHSA-x", "error", "upstream 404",
			"1 admitted, 1 refused, 0 already present, 1 failed, 0 skipped, in "}},
		{name: "list", write: func(b *bytes.Buffer) {
			if err := WriteList(b, []Artifact{{Status: StatusAdmitted, Manager: Pip, Name: "wheel", Version: "0.43.0",
				Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "0123456789abcdef", UpdatedAt: now.Add(-2 * time.Hour),
				Reasons: []string{"a", "b"}}}, now); err != nil {
				t.Error(err)
			}
		}, want: []string{"STATUS", "REASONS", "admitted", "wheel-0.43.0-py3-none-any.whl", "0123456789ab ", " ago", "a; b"}},
		{name: "osv status", write: func(b *bytes.Buffer) {
			OSVStatus{SnapshotID: "snap1", Contents: osvdb.Contents{Records: 3, Ecosystems: []string{"PyPI", "npm"}, ImportedAt: now}}.WriteText(b)
		}, want: []string{"snapshot snap1\n", "records 3 (PyPI, npm)\n", "imported 2026-12-01T12:00:00Z", "stale false", "newest modified"}},
		{name: "quarantined", write: func(b *bytes.Buffer) {
			WriteQuarantined(b, []Artifact{{Manager: NPM, Filename: "ms-2.0.0.tgz", Reasons: []string{"altered", "gone"}}})
		}, want: []string{"quarantined npm ms-2.0.0.tgz: altered; gone\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var b bytes.Buffer
			tt.write(&b)
			rest := b.String()
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("%q missing (or out of order) in:\n%s", w, b.String())
				}
				rest = rest[i+len(w):]
			}
		})
	}
}
