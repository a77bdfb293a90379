package api

import (
	"crypto/rand"
	"encoding/base32"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// NewKey mints a key of kind (store.KindClient with a plan, or
// store.KindAdmin): the row to store, which holds only the secret's hash
// (HashKey), and the secret, which is shown once and never stored.
func NewKey(name, plan, kind string, now time.Time) (row store.KeyRow, secret string) {
	secret = "sk_" + randomToken(20)
	id := "key_" + randomToken(10)
	return store.KeyRow{ID: id, Name: name, Plan: plan, Kind: kind, Hash: HashKey(secret), CreatedAt: now}, secret
}

// randomToken is n random bytes in lower-case base32, without padding.
func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding).EncodeToString(b)
}
