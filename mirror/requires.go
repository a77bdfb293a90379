package mirror

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
)

// MaxRequiresDist is how many Requires-Dist lines RequiresDist reads of
// one wheel; a wheel declaring more is reported as an error.
const MaxRequiresDist = 1024

// maxMetadataBytes bounds the METADATA file RequiresDist reads.
const maxMetadataBytes = 4 << 20

// RequiresDist returns the Requires-Dist values of an admitted wheel's
// METADATA (PEP 566/508 requirement strings, markers included), in file
// order; none for an npm artifact or a wheel without requirements.
func (m *Mirror) RequiresDist(ctx context.Context, a Artifact) ([]string, error) {
	if a.Manager != Pip || a.MetadataSHA256 == "" {
		return nil, nil
	}
	f, err := m.blobs.open(a.MetadataSHA256)
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s: %w", a.Filename, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxMetadataBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the metadata of %s: %w", a.Filename, err)
	}
	if len(b) > maxMetadataBytes {
		return nil, fmt.Errorf("reading the metadata of %s: over %d bytes", a.Filename, maxMetadataBytes)
	}
	reqs := parseRequiresDist(b)
	if len(reqs) > MaxRequiresDist {
		return nil, fmt.Errorf("reading the metadata of %s: %d Requires-Dist lines, over %d", a.Filename, len(reqs), MaxRequiresDist)
	}
	return reqs, nil
}

// parseRequiresDist returns every Requires-Dist value of METADATA's header
// block (continuation lines joined).
func parseRequiresDist(b []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	cur := -1
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			if cur >= 0 {
				out[cur] += " " + strings.TrimSpace(line)
			}
			continue
		}
		cur = -1
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "Requires-Dist") {
			out = append(out, strings.TrimSpace(v))
			cur = len(out) - 1
		}
	}
	return out
}

// Versions returns the versions of name: those the mirror serves
// (admitted) and every version it ever recorded in any state (known),
// each oldest first, without repeats.
func (m *Mirror) Versions(ctx context.Context, mgr Manager, name string) (admitted, known []string, err error) {
	as, err := m.queryArtifacts(ctx, `WHERE manager=? AND name_key=?`, string(mgr), NormalizeName(mgr, name))
	if err != nil {
		return nil, nil, err
	}
	sortByVersion(mgr, as)
	for _, a := range as {
		if a.Status == StatusAdmitted && !slices.Contains(admitted, a.Version) {
			admitted = append(admitted, a.Version)
		}
		if !slices.Contains(known, a.Version) {
			known = append(known, a.Version)
		}
	}
	return admitted, known, nil
}
