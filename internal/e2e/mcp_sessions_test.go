package e2e

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpMaxFile is TestMCPSessions' limits.max_file_bytes: small, so an
// oversize write is cheap.
const mcpMaxFile = 64 << 10

// TestMCPSessions drives the session tools with the SDK's client, over
// both transports, against a real server and real sandboxes: a round trip
// (create, write, execute reading the file and writing another, read,
// list, end), the API's refusals of hostile paths and of content over the
// file limit, an install from the mirror, and, where the server has kernel
// sessions, a matplotlib plot that comes back as an image.
func TestMCPSessions(t *testing.T) {
	s, _, _ := installServer(t, "limits:\n  max_file_bytes: 65536\n")
	s.importOSV()
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, t.TempDir(), "mcpdemo", "1.5.0"))
	key := s.key("PRO")

	transports := []struct {
		name    string
		connect func(t *testing.T, key string) (*sdk.ClientSession, error)
	}{
		{"streamable-http", s.mcpHTTP},
		{"stdio", s.mcpStdio},
	}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			cs, err := tr.connect(t, key)
			if err != nil {
				t.Fatalf("connecting: %v", err)
			}
			defer cs.Close()
			mcpSessionRoundTrip(t, cs)
		})
	}

	t.Run("install", func(t *testing.T) {
		cs, err := s.mcpHTTP(t, key)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		id := mcpCreate(t, cs, map[string]any{"language": "python3"})
		defer mcpEnd(t, cs, id)
		s.waitReadyz(200, 90*time.Second)
		res := mcpCall(t, cs, "install_packages", map[string]any{"session_id": id, "manager": "pip", "packages": []string{"mcpdemo"}})
		var inst struct {
			Installed []struct{ Name, Version string }
		}
		mcpOK(t, res, &inst)
		if len(inst.Installed) != 1 || inst.Installed[0].Version != "1.5.0" || !strings.Contains(mcpText(res), "1.5.0") {
			t.Fatalf("install: %+v %s", inst, mcpText(res))
		}
		var out struct{ Stdout string }
		mcpOK(t, mcpCall(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "import mcpdemo; print(mcpdemo.VERSION)"}), &out)
		if out.Stdout != "1.5.0\n" {
			t.Fatalf("import after install: %q", out.Stdout)
		}
		// A package the mirror lacks: the API's 422 with its details.
		res = mcpCall(t, cs, "install_packages", map[string]any{"session_id": id, "manager": "pip", "packages": []string{"not-in-mirror==1.0"}})
		if !res.IsError || !strings.Contains(mcpText(res), "packages_rejected (HTTP 422)") || !strings.Contains(mcpText(res), "not-in-mirror") {
			t.Fatalf("rejected install: %v %s", res.IsError, mcpText(res))
		}
	})

	t.Run("kernel plot is an image", func(t *testing.T) {
		cs, err := s.mcpHTTP(t, key)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		res := mcpCall(t, cs, "create_session", map[string]any{"language": "python3", "kernel": true})
		var sess struct {
			ID     string `json:"id"`
			Kernel bool   `json:"kernel"`
		}
		mcpOK(t, res, &sess)
		defer mcpEnd(t, cs, sess.ID)
		if !sess.Kernel {
			t.Fatalf("the session reply does not say kernel: true: %s", mcpText(res))
		}
		res = mcpCall(t, cs, "execute_in_session", map[string]any{"session_id": sess.ID,
			"code": "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()\n6 * 7"})
		if res.IsError {
			t.Fatalf("plot: %s", mcpText(res))
		}
		var img *sdk.ImageContent
		for _, c := range res.Content {
			if ic, ok := c.(*sdk.ImageContent); ok {
				img = ic
			}
		}
		if img == nil || img.MIMEType != "image/png" {
			t.Fatalf("no PNG image content: %s", mcpText(res))
		}
		if m, err := png.Decode(bytes.NewReader(img.Data)); err != nil || m.Bounds().Dx() < 100 {
			t.Fatalf("the image does not decode as a plot: %v", err)
		}
		if !strings.Contains(mcpText(res), "42") {
			t.Fatalf("the main result is not in the text: %s", mcpText(res))
		}
	})
}

// mcpSessionRoundTrip runs one session through the file and execute tools.
func mcpSessionRoundTrip(t *testing.T, cs *sdk.ClientSession) {
	id := mcpCreate(t, cs, map[string]any{"language": "python", "idle_ttl": 300})
	ended := false
	defer func() {
		if !ended {
			mcpEnd(t, cs, id)
		}
	}()

	var info struct {
		Size int64
		Mode string
	}
	mcpOK(t, mcpCall(t, cs, "write_file", map[string]any{"session_id": id, "path": "/home/sandbox/in put.txt", "content": "6 7\n"}), &info)
	if info.Size != 4 {
		t.Fatalf("write_file: %+v", info)
	}
	pic := base64.StdEncoding.EncodeToString([]byte("\x00\x01binary\xff"))
	mcpOK(t, mcpCall(t, cs, "write_file", map[string]any{"session_id": id, "path": "data/b.bin", "content": pic, "encoding": "base64"}), &info)

	var out struct {
		Stdout, Stderr, Status string
	}
	code := "import sys\na, b = map(int, open('/home/sandbox/in put.txt').read().split())\n" +
		"open('/home/sandbox/out.txt', 'w').write(str(a * b) + '\\n')\n" +
		"print(len(open('data/b.bin', 'rb').read()), sys.stdin.read())"
	mcpOK(t, mcpCall(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": code, "stdin": "from stdin"}), &out)
	if out.Status != "ok" || out.Stdout != "9 from stdin\n" {
		t.Fatalf("execute_in_session: %+v", out)
	}

	res := mcpCall(t, cs, "read_file", map[string]any{"session_id": id, "path": "/home/sandbox/out.txt"})
	var fc struct{ Content, Encoding string }
	mcpOK(t, res, &fc)
	if fc.Content != "42\n" || fc.Encoding != "utf-8" || mcpText(res) != "42\n" {
		t.Fatalf("read_file: %+v, text %q", fc, mcpText(res))
	}
	mcpOK(t, mcpCall(t, cs, "read_file", map[string]any{"session_id": id, "path": "data/b.bin"}), &fc)
	if fc.Encoding != "base64" || fc.Content != pic {
		t.Fatalf("read_file binary: %+v", fc)
	}

	// An image file comes back as image content, byte for byte.
	var img bytes.Buffer
	if err := png.Encode(&img, image.NewGray(image.Rect(0, 0, 3, 2))); err != nil {
		t.Fatal(err)
	}
	mcpOK(t, mcpCall(t, cs, "write_file", map[string]any{"session_id": id, "path": "plot.png", "content": base64.StdEncoding.EncodeToString(img.Bytes()), "encoding": "base64"}), &info)
	res = mcpCall(t, cs, "read_file", map[string]any{"session_id": id, "path": "plot.png"})
	if ic, ok := res.Content[len(res.Content)-1].(*sdk.ImageContent); res.IsError || !ok || ic.MIMEType != "image/png" || !bytes.Equal(ic.Data, img.Bytes()) {
		t.Fatalf("read_file of a PNG: %v %#v", res.IsError, res.Content)
	}

	var l struct {
		Path    string
		Entries []struct{ Name, Type string }
	}
	mcpOK(t, mcpCall(t, cs, "list_files", map[string]any{"session_id": id}), &l)
	var names []string
	for _, e := range l.Entries {
		names = append(names, e.Name)
	}
	for _, want := range []string{"in put.txt", "out.txt", "data"} {
		if !slices.Contains(names, want) {
			t.Fatalf("list_files %s: %v lacks %q", l.Path, names, want)
		}
	}

	// Hostile paths get the API's refusal (the guest's path check), as
	// tool errors with its code; nothing is written.
	for _, p := range []string{"/etc/passwd", "/home/sandbox/../../etc/passwd", "../outside", "/home/sandboxes/x", "a\x00b"} {
		res := mcpCall(t, cs, "write_file", map[string]any{"session_id": id, "path": p, "content": "pwned"})
		if !res.IsError || !strings.Contains(mcpText(res), "invalid_request (HTTP 400)") {
			t.Fatalf("write_file %q: %v %s", p, res.IsError, mcpText(res))
		}
		res = mcpCall(t, cs, "read_file", map[string]any{"session_id": id, "path": p})
		if !res.IsError || !strings.Contains(mcpText(res), "invalid_request (HTTP 400)") {
			t.Fatalf("read_file %q: %v %s", p, res.IsError, mcpText(res))
		}
		res = mcpCall(t, cs, "list_files", map[string]any{"session_id": id, "dir": p})
		if !res.IsError || !strings.Contains(mcpText(res), "invalid_request (HTTP 400)") {
			t.Fatalf("list_files %q: %v %s", p, res.IsError, mcpText(res))
		}
	}
	// A symlink the program planted is not followed, either way.
	mcpOK(t, mcpCall(t, cs, "execute_in_session", map[string]any{"session_id": id, "code": "import os\nos.symlink('/etc/passwd', '/home/sandbox/pw')"}), &out)
	for tool, args := range map[string]map[string]any{
		"read_file":  {"session_id": id, "path": "pw"},
		"write_file": {"session_id": id, "path": "pw", "content": "pwned"},
	} {
		res := mcpCall(t, cs, tool, args)
		if !res.IsError || !strings.Contains(mcpText(res), "symlink_refused (HTTP 409)") {
			t.Fatalf("%s through a symlink: %v %s", tool, res.IsError, mcpText(res))
		}
	}
	// Content over limits.max_file_bytes: the API's 413; the file is not made.
	res = mcpCall(t, cs, "write_file", map[string]any{"session_id": id, "path": "big.txt", "content": strings.Repeat("x", mcpMaxFile+1)})
	if !res.IsError || !strings.Contains(mcpText(res), "too_large (HTTP 413)") {
		t.Fatalf("oversize write_file: %v %s", res.IsError, mcpText(res))
	}
	if res := mcpCall(t, cs, "read_file", map[string]any{"session_id": id, "path": "big.txt"}); !res.IsError || !strings.Contains(mcpText(res), "not_found") {
		t.Fatalf("the refused file exists: %v %s", res.IsError, mcpText(res))
	}
	// An id that is not one path segment never reaches the API.
	if res := mcpCall(t, cs, "execute_in_session", map[string]any{"session_id": "../../execute", "code": "print(1)"}); !res.IsError {
		t.Fatalf("hostile id accepted: %s", mcpText(res))
	}

	var list struct{ Sessions []struct{ ID string } }
	mcpOK(t, mcpCall(t, cs, "list_sessions", map[string]any{}), &list)
	if !slices.ContainsFunc(list.Sessions, func(s struct{ ID string }) bool { return s.ID == id }) {
		t.Fatalf("list_sessions lacks %s: %+v", id, list)
	}
	mcpEnd(t, cs, id)
	ended = true
	if res := mcpCall(t, cs, "read_file", map[string]any{"session_id": id, "path": "out.txt"}); !res.IsError || !strings.Contains(mcpText(res), "not_found (HTTP 404)") {
		t.Fatalf("read_file after end_session: %v %s", res.IsError, mcpText(res))
	}
}

func mcpCreate(t *testing.T, cs *sdk.ClientSession, args map[string]any) string {
	t.Helper()
	var sess struct{ ID, State string }
	mcpOK(t, mcpCall(t, cs, "create_session", args), &sess)
	if !strings.HasPrefix(sess.ID, "sess_") {
		t.Fatalf("create_session: %+v", sess)
	}
	return sess.ID
}

func mcpEnd(t *testing.T, cs *sdk.ClientSession, id string) {
	t.Helper()
	var e struct {
		ID    string
		Ended bool
	}
	mcpOK(t, mcpCall(t, cs, "end_session", map[string]any{"session_id": id}), &e)
	if !e.Ended || e.ID != id {
		t.Fatalf("end_session: %+v", e)
	}
}

// mcpTools are the MCP server's tools, sorted.
var mcpTools = []string{"check_packages", "create_session", "end_session", "execute_code", "execute_in_session", "install_packages",
	"list_files", "list_runtimes", "list_sessions", "read_file", "run_tests", "write_file"}
