// Package seal encrypts short secrets (the egress credentials of sessions)
// for storage with AES-256-GCM under keys the operator owns: one current
// key that seals and opens, and older keys that only open, so that a key
// can be rotated without losing what it sealed.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Errors of Open and LoadKeys.
var (
	ErrMalformed  = errors.New("sealed value malformed")
	ErrUnknownKey = errors.New("sealed under a key this server does not hold")
	ErrTampered   = errors.New("sealed value does not open (wrong key, context or tampered)")
	ErrBadKeyFile = errors.New("bad credentials key file")
)

// KeySize is the size of a key: AES-256.
const KeySize = 32

// prefix starts every sealed value: the format version.
const prefix = "v1."

// Keys seals with its current key and opens with any of its keys. Build it
// with NewKeys or LoadKeys; the zero value seals nothing. Safe for
// concurrent use (it is not changed after it is built).
type Keys struct {
	current string // id of the sealing key
	aead    map[string]cipher.AEAD
}

// keyID names a key in a sealed value: the first 8 bytes of its SHA-256,
// in hex. It says which key to use and nothing about the key.
func keyID(k []byte) string {
	sum := sha256.Sum256(append([]byte("sandboxapi credentials key\x00"), k...))
	return hex.EncodeToString(sum[:8])
}

// NewKeys builds Keys that seal with current and also open with old.
func NewKeys(current []byte, old ...[]byte) (*Keys, error) {
	ks := &Keys{aead: map[string]cipher.AEAD{}}
	for i, k := range append([][]byte{current}, old...) {
		if len(k) != KeySize {
			return nil, fmt.Errorf("%w: key %d is %d bytes, want %d", ErrBadKeyFile, i, len(k), KeySize)
		}
		block, err := aes.NewCipher(k)
		if err != nil {
			return nil, fmt.Errorf("making cipher: %w", err)
		}
		a, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("making cipher: %w", err)
		}
		id := keyID(k)
		if i == 0 {
			ks.current = id
		}
		ks.aead[id] = a
	}
	return ks, nil
}

// Seal encrypts plain, bound to context (which Open must be given again):
// "v1.<key id>.<base64 of nonce and ciphertext>".
func (k *Keys) Seal(plain, context string) (string, error) {
	if k == nil || k.current == "" {
		return "", fmt.Errorf("sealing: %w", ErrUnknownKey)
	}
	a := k.aead[k.current]
	nonce := make([]byte, a.NonceSize(), a.NonceSize()+len(plain)+a.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return "", fmt.Errorf("sealing: %w", err)
	}
	out := a.Seal(nonce, nonce, []byte(plain), []byte(context))
	return prefix + k.current + "." + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value Seal made under any of k's keys with the same
// context.
func (k *Keys) Open(sealed, context string) (string, error) {
	rest, ok := strings.CutPrefix(sealed, prefix)
	if !ok {
		return "", ErrMalformed
	}
	id, b64, ok := strings.Cut(rest, ".")
	if !ok {
		return "", ErrMalformed
	}
	var a cipher.AEAD
	if k != nil {
		a = k.aead[id]
	}
	if a == nil {
		return "", ErrUnknownKey
	}
	raw, err := base64.RawURLEncoding.DecodeString(b64)
	if err != nil || len(raw) < a.NonceSize()+a.Overhead() {
		return "", ErrMalformed
	}
	plain, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte(context))
	if err != nil {
		return "", ErrTampered
	}
	return string(plain), nil
}

// Current is the id of the sealing key (for logs: it says nothing about
// the key).
func (k *Keys) Current() string { return k.current }

// LoadKeys reads the current key file, creating it (32 random bytes, mode
// 0600, its folder 0700) if it does not exist, and the old key files,
// which must exist. A key file holds the key as 64 hex digits (white
// space around them ignored); a file readable by others than its owner is
// refused.
func LoadKeys(current string, old []string) (*Keys, error) {
	cur, err := readKey(current, true)
	if err != nil {
		return nil, err
	}
	olds := make([][]byte, 0, len(old))
	for _, f := range old {
		k, err := readKey(f, false)
		if err != nil {
			return nil, err
		}
		olds = append(olds, k)
	}
	return NewKeys(cur, olds...)
}

func readKey(path string, create bool) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && create {
		return createKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading credentials key: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by others (mode %v); chmod 600 it", ErrBadKeyFile, path, fi.Mode().Perm())
	}
	k, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(k) != KeySize {
		return nil, fmt.Errorf("%w: %s must hold %d hex digits", ErrBadKeyFile, path, 2*KeySize)
	}
	return k, nil
}

func createKey(path string) ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generating credentials key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating credentials key folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return readKey(path, false) // another process made it first
	}
	if err != nil {
		return nil, fmt.Errorf("creating credentials key: %w", err)
	}
	_, werr := f.WriteString(hex.EncodeToString(k) + "\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return nil, fmt.Errorf("writing credentials key: %w", werr)
	}
	return k, nil
}
