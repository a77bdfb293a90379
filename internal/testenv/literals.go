package testenv

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// SourceLiteral is a quoted word found in a package's source.
type SourceLiteral struct {
	File string
	Line int
	Word string
	Text string // the line, trimmed
}

// quotedWord is a lower-case word in single, double or back quotes.
var quotedWord = regexp.MustCompile("'([a-z_]+)'|\"([a-z_]+)\"|`([a-z_]+)`")

// QuotedWords reads the non-test Go files of the working directory (a
// test's own package) and returns every word of words written there in
// quotes, outside // comments, so that a test can fail on a value spelled
// out where a typed constant belongs. It fails t when fewer than minFiles
// files were read (the test would check nothing).
func QuotedWords(t testing.TB, words map[string]bool, minFiles int) []SourceLiteral {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []SourceLiteral
	read := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		read++
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "//")
			for _, m := range quotedWord.FindAllStringSubmatch(code, -1) {
				if w := m[1] + m[2] + m[3]; words[w] {
					out = append(out, SourceLiteral{File: f, Line: i + 1, Word: w, Text: strings.TrimSpace(line)})
				}
			}
		}
	}
	if read < minFiles {
		t.Fatalf("read only %d source files", read)
	}
	return out
}
