package tlsserve

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"go.uber.org/zap"
)

// TestCertmagicLogHidesACMECredential: certmagic's log lines name the
// ACME directory and the URLs it calls; one with a credential
// (tls.acme_directory) is logged without it.
func TestCertmagicLogHidesACMECredential(t *testing.T) {
	t.Parallel()
	const pass, tok = "ACMEPASSq1", "ACMETOKq2"
	var buf bytes.Buffer
	z := zapToSlog(slog.New(slog.NewJSONHandler(&buf, nil)))
	dir := "https://acct:" + pass + "@ca.example.com/directory?token=" + tok
	z.With(zap.String("ca", dir)).Error("obtaining certificate from "+dir, zap.Strings("identifiers", []string{"a.example.com"}),
		zap.Error(errors.New(`Get "`+dir+`": refused`)))
	if out := buf.String(); strings.Contains(out, pass) || strings.Contains(out, tok) || !strings.Contains(out, "ca.example.com") {
		t.Fatalf("log line:\n%s", out)
	}
}
