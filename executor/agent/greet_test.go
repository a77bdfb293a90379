package agent

import (
	"bufio"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
)

// Greet over real pipes, with a fake guest: only the hello that carries
// the host's nonce greets; hellos written before (a restored guest's old
// line, one of another protocol) and other lines are passed over; a guest
// that never answers times out.
func TestGreetNeedsTheNonce(t *testing.T) {
	cases := []struct {
		name   string
		answer func(nonce string) string // what the fake guest writes after reading FrameHello
		ok     bool
	}{
		{"nonce", func(n string) string { return guest.AgentHello + guest.ProtocolVersion + " " + n + "\n" }, true},
		{"old hello first", func(n string) string {
			return guest.AgentHello + guest.ProtocolVersion + "\n" + guest.AgentHello + "9\nnoise\n" + guest.AgentHello + guest.ProtocolVersion + " " + n + "\n"
		}, true},
		{"wrong nonce", func(n string) string {
			return guest.AgentHello + guest.ProtocolVersion + " " + strings.Repeat("0", len(n)) + "\n"
		}, false},
		{"other protocol", func(n string) string { return guest.AgentHello + "9 " + n + "\n" }, false},
		{"plain hello", func(string) string { return guest.AgentHello + guest.ProtocolVersion + "\n" }, false},
		{"silent", func(string) string { return "" }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := NewPipes()
			if err != nil {
				t.Fatal(err)
			}
			defer p.CloseAll()
			go func() {
				typ, nonce, err := guest.ReadFrame(bufio.NewReader(p.SandboxIn), 1<<10)
				if err != nil || typ != guest.FrameHello {
					return
				}
				fmt.Fprint(p.SandboxOut, tc.answer(string(nonce)))
			}()
			a := p.Conn()
			defer a.Close()
			start := time.Now()
			err = a.Greet(500 * time.Millisecond)
			if (err == nil) != tc.ok {
				t.Fatalf("greet: %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok && time.Since(start) > 5*time.Second {
				t.Fatalf("greet took %v", time.Since(start))
			}
		})
	}
}
