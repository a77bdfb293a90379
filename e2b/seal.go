package e2b

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
)

// The adapter keeps no secret in the clear and holds no key of its own.
// A sandbox's two secrets seal each other (store.E2BSandbox):
//
//   - the envd access token, which sandbox traffic carries instead of an
//     API key, is stored as its SHA-256 (to check it) and sealed under a
//     key derived from the owner's API key (so that connect, which carries
//     the API key, can hand it out again);
//   - the API key is sealed under a key derived from the access token (so
//     that sandbox traffic can call /v1 as that key: plans, quotas, rate
//     limits and metering apply, and a revoked key stops its sandboxes'
//     traffic too).
//
// The store alone opens neither; each derivation is bound to the sandbox
// id and its purpose, so a sealed value cannot be moved to another row.

// Purposes of the derived keys.
const (
	purposeToken = "sandboxapi e2b access token"
	purposeKey   = "sandboxapi e2b api key"
	purposeEnv   = "sandboxapi e2b env vars"
)

// errUnseal is a sealed value that does not open with the given secret.
var errUnseal = errors.New("sealed value does not open")

// newAccessToken returns a fresh envd access token (256 random bits).
func newAccessToken() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "e2bt_" + hex.EncodeToString(b)
}

// tokenHash is how an access token is stored and compared.
func tokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// tokenMatches compares a presented token with a stored hash in constant
// time.
func tokenMatches(presented, storedHash string) bool {
	got := tokenHash(presented)
	return subtle.ConstantTimeCompare([]byte(got), []byte(storedHash)) == 1
}

func aeadFor(secret, sandboxID, purpose string) (cipher.AEAD, error) {
	k, err := hkdf.Key(sha256.New, []byte(secret), []byte(sandboxID), purpose, 32)
	if err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(k)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// seal encrypts plain under a key derived from secret for one sandbox and
// purpose; the result is text (base64 of nonce and ciphertext).
func seal(secret, sandboxID, purpose string, plain []byte) (string, error) {
	a, err := aeadFor(secret, sandboxID, purpose)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, a.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := a.Seal(nonce, nonce, plain, []byte(sandboxID))
	return base64.RawStdEncoding.EncodeToString(out), nil
}

// unseal opens what seal made with the same secret, sandbox and purpose.
func unseal(secret, sandboxID, purpose, sealed string) ([]byte, error) {
	raw, err := base64.RawStdEncoding.DecodeString(sealed)
	if err != nil {
		return nil, errUnseal
	}
	a, err := aeadFor(secret, sandboxID, purpose)
	if err != nil {
		return nil, err
	}
	if len(raw) < a.NonceSize() {
		return nil, errUnseal
	}
	plain, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte(sandboxID))
	if err != nil {
		return nil, errUnseal
	}
	return plain, nil
}
