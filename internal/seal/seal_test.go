package seal

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpenRotate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "credentials.key")
	k1, err := LoadKeys(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %v %v", fi, err)
	}
	sealed, err := k1.Seal("Bearer secret", "ctx-a")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "secret") {
		t.Fatal("sealed value holds the plain text")
	}
	if again, _ := LoadKeys(path, nil); again.Current() != k1.Current() {
		t.Fatal("key not kept across loads")
	}
	if v, err := k1.Open(sealed, "ctx-a"); err != nil || v != "Bearer secret" {
		t.Fatalf("open: %q %v", v, err)
	}
	if _, err := k1.Open(sealed, "ctx-b"); !errors.Is(err, ErrTampered) {
		t.Fatalf("other context: %v", err)
	}
	// Flip one bit of the ciphertext itself: rewriting the last base64
	// characters can leave the decoded bytes unchanged (the unused bits of
	// the last character), which made this check fail about once in 256.
	dot := strings.LastIndexByte(sealed, '.')
	raw, err := base64.RawURLEncoding.DecodeString(sealed[dot+1:])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	tampered := sealed[:dot+1] + base64.RawURLEncoding.EncodeToString(raw)
	if _, err := k1.Open(tampered, "ctx-a"); err == nil {
		t.Fatal("tampered value opened")
	}
	for _, bad := range []string{"", "v1.", "v2.x.y", "v1." + k1.Current() + ".!!", "v1." + k1.Current() + ".AA"} {
		if _, err := k1.Open(bad, "ctx-a"); err == nil {
			t.Fatalf("%q opened", bad)
		}
	}
	// Rotation: a new key seals, the old one still opens.
	newPath := filepath.Join(dir, "new.key")
	k2, err := LoadKeys(newPath, []string{path})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := k2.Open(sealed, "ctx-a"); err != nil || v != "Bearer secret" {
		t.Fatalf("old value under the rotated keys: %q %v", v, err)
	}
	s2, _ := k2.Seal("x", "c")
	if _, err := k1.Open(s2, "c"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("new value under the old key alone: %v", err)
	}
	// A key file others can read is refused.
	os.Chmod(path, 0o644)
	if _, err := LoadKeys(path, nil); !errors.Is(err, ErrBadKeyFile) {
		t.Fatalf("world-readable key: %v", err)
	}
}
