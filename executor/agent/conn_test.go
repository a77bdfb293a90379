package agent

import (
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
)

// The hello is awaited at first use: junk before it is skipped, another
// protocol or silence is an error (and the run falls back to runsc exec).
func TestAgentHello(t *testing.T) {
	for _, tc := range []struct {
		name, wrote string
		ok          bool
	}{
		{"hello", guest.AgentHello + guest.ProtocolVersion + "\n", true},
		{"junk first", "runsc: warning\n\n" + guest.AgentHello + guest.ProtocolVersion + "\n", true},
		{"other protocol", guest.AgentHello + "0\n", false},
		{"silence", "", false},
		{"eof", "partial", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPipes()
			if err != nil {
				t.Fatal(err)
			}
			defer p.CloseAll()
			a := p.Conn()
			go func() {
				_, _ = p.SandboxOut.Write([]byte(tc.wrote))
				if tc.name == "eof" {
					p.SandboxOut.Close()
				}
			}()
			err = a.Ready(300 * time.Millisecond)
			if (err == nil) != tc.ok {
				t.Fatalf("ready: %v, want ok=%v", err, tc.ok)
			}
			if again := a.Ready(time.Millisecond); (again == nil) != tc.ok {
				t.Fatalf("second ready differs: %v", again)
			}
		})
	}
}
