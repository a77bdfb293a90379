package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// blobStore keeps files by sha256 under dir/<2 hex>/<64 hex>. Writes go to
// a temporary file that is renamed into place, so readers never see a
// partial file. Safe for concurrent use.
type blobStore struct{ dir string }

func (b blobStore) path(sum string) (string, error) {
	if len(sum) != 64 {
		return "", fmt.Errorf("bad sha256 %q", sum)
	}
	if _, err := hex.DecodeString(sum); err != nil {
		return "", fmt.Errorf("bad sha256 %q", sum)
	}
	return filepath.Join(b.dir, sum[:2], sum), nil
}

// put stores data under sum, which must be its sha256.
func (b blobStore) put(data []byte, sum string) error {
	got := sha256.Sum256(data)
	if hex.EncodeToString(got[:]) != sum {
		return fmt.Errorf("storing blob: sha256 mismatch for %s", sum)
	}
	p, err := b.path(sum)
	if err != nil {
		return fmt.Errorf("storing blob: %w", err)
	}
	if st, err := os.Stat(p); err == nil && st.Size() == int64(len(data)) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("storing blob %s: %w", sum, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return fmt.Errorf("storing blob %s: %w", sum, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("storing blob %s: %w", sum, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("storing blob %s: %w", sum, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("storing blob %s: %w", sum, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return fmt.Errorf("storing blob %s: %w", sum, err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return fmt.Errorf("storing blob %s: %w", sum, err)
	}
	return nil
}

// open opens the blob for reading.
func (b blobStore) open(sum string) (*os.File, error) {
	p, err := b.path(sum)
	if err != nil {
		return nil, fmt.Errorf("opening blob: %w", err)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("opening blob %s: %w", sum, err)
	}
	return f, nil
}

// verify re-hashes the blob and reports whether it matches sum.
func (b blobStore) verify(sum string) error {
	f, err := b.open(sum)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return fmt.Errorf("hashing blob %s: %w", sum, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Errorf("blob %s hashes to %s", sum, got)
	}
	return nil
}

// remove deletes the blob; one that is already gone is fine.
func (b blobStore) remove(sum string) error {
	p, err := b.path(sum)
	if err != nil {
		return fmt.Errorf("removing blob: %w", err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing blob %s: %w", sum, err)
	}
	return nil
}
