package main

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
)

// startVerdaccio runs a Verdaccio binary on loopback with no uplinks,
// registers a user and publishes the given tarballs of one package through
// the registry API, as `npm publish` would. It returns the base URL and a
// stop function.
func startVerdaccio(ctx context.Context, bin, dir, name string, versions []string, tarballs [][]byte) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cfg := fmt.Sprintf(`storage: %s/storage
auth:
  htpasswd:
    file: %s/htpasswd
    max_users: 100
uplinks: {}
packages:
  '**':
    access: $all
    publish: $authenticated
server:
  keepAliveTimeout: 60
log: { type: stdout, format: pretty, level: error }
`, dir, dir)
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, bin, "--config", filepath.Join(dir, "config.yaml"), "--listen", fmt.Sprintf("127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting verdaccio: %w", err)
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	if err := waitUp(base + "/-/ping"); err != nil {
		stop()
		return "", nil, err
	}
	// Register a user (CouchDB-style endpoint npm adduser uses).
	body, _ := json.Marshal(map[string]string{"name": "bench", "password": "bench-password-1"})
	req, _ := http.NewRequest(http.MethodPut, base+"/-/user/org.couchdb.user:bench", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		stop()
		return "", nil, err
	}
	var tok struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.Token == "" {
		stop()
		return "", nil, fmt.Errorf("verdaccio adduser: status %s", resp.Status)
	}
	for i, v := range versions {
		tb := tarballs[i]
		s512 := sha512.Sum512(tb)
		s1 := sha1.Sum(tb)
		fn := name + "-" + v + ".tgz"
		doc := map[string]any{
			"_id": name, "name": name,
			"dist-tags": map[string]string{"latest": v},
			"versions": map[string]any{v: map[string]any{
				"name": name, "version": v, "main": "index.js", "description": "bench package", "license": "MIT",
				"_id": name + "@" + v,
				"dist": map[string]string{"tarball": base + "/" + name + "/-/" + fn,
					"integrity": "sha512-" + base64.StdEncoding.EncodeToString(s512[:]), "shasum": hex.EncodeToString(s1[:])},
			}},
			"_attachments": map[string]any{fn: map[string]any{"content_type": "application/octet-stream", "data": base64.StdEncoding.EncodeToString(tb), "length": len(tb)}},
		}
		body, _ := json.Marshal(doc)
		req, _ := http.NewRequest(http.MethodPut, base+"/"+name, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tok.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			stop()
			return "", nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			stop()
			return "", nil, fmt.Errorf("verdaccio publish %s@%s: %s %s", name, v, resp.Status, b)
		}
	}
	return base, stop, nil
}
