package agent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// finishRun's verdicts: a run that left no result is a *NoResultError
// carrying how its transport ended (the session service decides whether
// the sandbox was lost); a guest result, a kill or a cap decide the rest.
func TestFinishRun(t *testing.T) {
	exitErr := errors.New("exit status 1")
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	cases := []struct {
		name       string
		ctx        context.Context
		raw        string
		out        string // written to stdout, over a cap of 4 bytes when longer
		why        sandbox.KillReason
		wantStatus sandbox.Status
		wantErr    error
		noResult   bool
	}{
		{name: "result", raw: `{"status":"ok","exit_code":0}`, out: "hi", wantStatus: sandbox.StatusOK},
		{name: "no result", wantErr: exitErr, noResult: true},
		{name: "undecodable result", raw: "{", wantErr: exitErr, noResult: true},
		{name: "timeout", why: sandbox.KillTimeout, wantStatus: sandbox.StatusTimeout},
		{name: "cancelled", ctx: cancelled, why: sandbox.KillCancelled, wantErr: context.Canceled},
		{name: "over the cap", out: "too long", why: sandbox.KillOutputLimit, wantStatus: sandbox.StatusOutputLimit},
		{name: "files clash", raw: `{"status":"start_error","code":"invalid"}`, wantStatus: sandbox.StatusStartError, wantErr: sandbox.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := tc.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			mu := &sync.Mutex{}
			stdout := &capture{mu: mu, name: "stdout", max: 4, overflow: func() {}}
			stderr := &capture{mu: mu, name: "stderr", max: 4, overflow: func() {}}
			_, _ = stdout.Write([]byte(tc.out))
			res, err := finishRun(ctx, []byte(tc.raw), stdout, stderr, time.Now(), tc.why, exitErr)
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) || tc.wantErr == nil && err != nil {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if _, ok := errors.AsType[*NoResultError](err); ok != tc.noResult {
				t.Fatalf("err %v: a NoResultError is %v, want %v", err, ok, tc.noResult)
			}
			if res.Status != tc.wantStatus {
				t.Fatalf("status %q, want %q", res.Status, tc.wantStatus)
			}
			if tc.wantStatus == sandbox.StatusOutputLimit && (res.Stdout != "too " || !res.Truncated || res.Signal != "SIGKILL") {
				t.Fatalf("capped run: %+v", res)
			}
		})
	}
}
