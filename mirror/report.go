package mirror

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/duration"
)

// The operator's reports of the catalogue, as `sandboxapi mirror` prints
// them. Each writes plain text to w; none reads the store.

// WriteAddTable writes the rows of an add as a table and a summary line
// (took is how long the add ran) and returns how many rows were refused
// and how many failed.
func WriteAddTable(w io.Writer, rows []AddRow, took time.Duration) (refused, failed int, err error) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tMANAGER\tNAME\tVERSION\tDETAIL")
	count := map[AddOutcome]int{}
	for _, r := range rows {
		count[r.Outcome]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Outcome, r.Manager, r.Name, r.Version, r.Detail)
	}
	if err := tw.Flush(); err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(w, "%d admitted, %d refused, %d already present, %d failed, %d skipped, in %s\n",
		count[OutcomeAdmitted], count[OutcomeRefused], count[OutcomePresent], count[OutcomeError], count[OutcomeSkipped], duration.Human(took))
	return count[OutcomeRefused], count[OutcomeError], nil
}

// WriteList writes artifacts as a table, their ages counted to now.
func WriteList(w io.Writer, as []Artifact, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tMANAGER\tNAME\tVERSION\tFILE\tSHA256\tCHANGED\tPUBLISHED\tSTRIPPED\tREASONS")
	for _, a := range as {
		published := "-"
		if !a.PublishedAt.IsZero() {
			published = duration.Age(now.Sub(a.PublishedAt)) + " ago"
		}
		stripped := "-"
		if len(a.Stripped) > 0 {
			stripped = strings.Join(a.Stripped, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.12s\t%s ago\t%s\t%s\t%s\n", a.Status, a.Manager, a.Name, a.Version, a.Filename, a.SHA256,
			duration.Age(now.Sub(a.UpdatedAt)), published, stripped, strings.Join(a.Reasons, "; "))
	}
	return tw.Flush()
}

// WriteText writes the snapshot's id, size and ages, a few lines.
func (st OSVStatus) WriteText(w io.Writer) {
	fmt.Fprintf(w, "snapshot %s\nrecords %d (%s)\nimported %s (%s ago, max age %s, stale %t)\nnewest modified %s (%s ago)\n",
		st.SnapshotID, st.Records, strings.Join(st.Ecosystems, ", "), st.ImportedAt.Format(time.RFC3339),
		duration.Age(st.Age), duration.Age(st.MaxAge), st.Stale, st.NewestModified.Format(time.RFC3339), duration.Age(st.ModifiedAge))
}

// WriteQuarantined writes one line per artifact that verify or recheck
// quarantined, with its reasons.
func WriteQuarantined(w io.Writer, as []Artifact) {
	for _, a := range as {
		fmt.Fprintf(w, "quarantined %s %s: %s\n", a.Manager, a.Filename, strings.Join(a.Reasons, "; "))
	}
}
