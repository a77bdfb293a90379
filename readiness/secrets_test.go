package readiness

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDetailsHideURLCredentials: a check's detail goes to /readyz, which
// needs no key, and to the log; a mirror serve_url with userinfo, or an
// error naming a URL with a token, is shown without them.
func TestDetailsHideURLCredentials(t *testing.T) {
	t.Parallel()
	const pass, tok = "RDYPASSa1", "RDYTOKb2"
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	base := strings.Replace(closed.URL, "http://", "http://ops:"+pass+"@", 1)
	var logs bytes.Buffer
	c := New(testConfig(), slog.New(slog.NewTextHandler(&logs, nil)))
	c.Register("mirror", Mirror(fakeIndex{}, base, 1))
	c.Register("other", func(context.Context) (string, error) {
		return "probing https://u:" + pass + "@h/x?token=" + tok, errors.New("GET https://h/?token=" + tok + ": refused")
	})
	rep := c.RunAll(context.Background())
	for _, r := range rep.Checks {
		if r.Status != StatusFail {
			t.Errorf("%s: %+v", r.Name, r)
		}
		if strings.Contains(r.Detail, pass) || strings.Contains(r.Detail, tok) || strings.Contains(r.Detail, "ops") {
			t.Errorf("%s detail shows a credential: %s", r.Name, r.Detail)
		}
	}
	if strings.Contains(logs.String(), pass) || strings.Contains(logs.String(), tok) {
		t.Errorf("log shows a credential:\n%s", logs.String())
	}
}
