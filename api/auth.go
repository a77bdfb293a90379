package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// Principal is the authenticated caller.
type Principal struct {
	KeyID string
	Name  string
	Plan  *Plan
}

// Keys resolves a presented secret to its key; the api owns this seam.
type Keys interface {
	// Lookup returns the key id, name and plan name for the SHA-256 hex of
	// a secret, or ErrUnknownKey.
	Lookup(ctx context.Context, hash string) (id, name, plan string, err error)
}

// ErrUnknownKey is returned by Keys for a secret it does not hold.
var ErrUnknownKey = errors.New("unknown key")

// HashKey is how secrets are stored and looked up.
func HashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// GatewayConfig enables running behind a RapidAPI-style gateway: requests
// must carry the shared secret in X-RapidAPI-Proxy-Secret, and the user and
// plan come from the gateway's headers. Off unless Secret is set.
type GatewayConfig struct {
	Secret string `yaml:"secret"`
}

// presentedKey returns the key from X-RapidAPI-Key, Authorization: Bearer
// or X-API-Key, in that order.
func presentedKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("X-RapidAPI-Key")); k != "" {
		return k
	}
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return strings.TrimSpace(r.Header.Get("X-API-Key"))
}

// Authenticator resolves the caller of a request: from the gateway's
// headers when the gateway is configured, else from the API key it
// presents, looked up in Keys. A key the store resolved lately keeps
// working while the store cannot be reached (Config.KeyCacheTTL). Build it
// with NewAuthenticator; it is safe for concurrent use.
type Authenticator struct {
	gateway GatewayConfig
	plans   *Plans
	keys    Keys
	cache   *keyCache
}

// NewAuthenticator returns the authenticator of an API with cfg's gateway
// and key cache, plans and keys.
func NewAuthenticator(cfg Config, plans *Plans, keys Keys) *Authenticator {
	return &Authenticator{gateway: cfg.Gateway, plans: plans, keys: keys, cache: newKeyCache(cfg.KeyCacheTTL)}
}

// CallerKeyID is the key id of the caller of r as the API would
// authenticate it (false when it would refuse it, or cannot tell now);
// it takes no rate token. A cluster node uses it to leave another key's
// session where it is.
func (a *Authenticator) CallerKeyID(r *http.Request) (string, bool) {
	p, err := a.Authenticate(r)
	if err != nil || p == nil {
		return "", false
	}
	return p.KeyID, true
}

// Authenticate resolves the caller of r or returns a 401/403 *Error (or
// the store's error when it cannot tell).
func (a *Authenticator) Authenticate(r *http.Request) (*Principal, error) {
	if a.gateway.Secret != "" {
		got := r.Header.Get("X-RapidAPI-Proxy-Secret")
		if subtle.ConstantTimeCompare([]byte(got), []byte(a.gateway.Secret)) != 1 {
			return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "requests must come through the gateway")
		}
		user := strings.TrimSpace(r.Header.Get("X-RapidAPI-User"))
		planName := strings.TrimSpace(r.Header.Get("X-RapidAPI-Subscription"))
		if user == "" || len(user) > 128 {
			return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "the gateway sent no user")
		}
		plan, ok := a.plans.Get(planName)
		if !ok {
			return nil, apiErr(http.StatusForbidden, "unknown_plan", "the gateway sent an unknown plan")
		}
		return &Principal{KeyID: "gw:" + user, Name: user, Plan: plan}, nil
	}
	secret := presentedKey(r)
	if secret == "" {
		return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "send your API key in X-RapidAPI-Key, Authorization: Bearer or X-API-Key")
	}
	if len(secret) > 256 {
		return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "unknown API key")
	}
	hash := HashKey(secret)
	ctx, cancel := context.WithTimeout(r.Context(), storeCallTimeout)
	defer cancel()
	id, name, planName, err := a.keys.Lookup(ctx, hash)
	switch {
	case err == nil:
		a.cache.put(hash, cachedKey{id: id, name: name, plan: planName}, time.Now())
	case errors.Is(err, ErrUnknownKey):
		a.cache.forget(hash)
		return nil, apiErr(http.StatusUnauthorized, "unauthenticated", "unknown API key")
	case errors.Is(err, store.ErrUnavailable):
		// A key the store resolved within the cache's TTL keeps working
		// while the store is away; any other is a 503.
		k, ok := a.cache.get(hash, time.Now())
		if !ok {
			return nil, err
		}
		id, name, planName = k.id, k.name, k.plan
	default:
		return nil, err
	}
	plan, ok := a.plans.Get(planName)
	if !ok {
		return nil, apiErr(http.StatusForbidden, "unknown_plan", "the key's plan %q is not configured", planName)
	}
	return &Principal{KeyID: id, Name: name, Plan: plan}, nil
}

type principalKey struct{}

func withPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principal(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// storeCallTimeout bounds each store call of authentication (the key
// lookup, the rate bucket): a store that does not answer in time is
// unavailable, and the request is answered, not held.
const storeCallTimeout = 5 * time.Second

// DefaultKeyCacheTTL is how long a key the store resolved keeps working
// while the store cannot be reached (Config.KeyCacheTTL).
const DefaultKeyCacheTTL = 30 * time.Second

// keyCacheMax bounds the keys a keyCache holds.
const keyCacheMax = 10000

// keyCache holds the keys the store resolved recently, by hash, for use
// only while the store cannot be reached. A key is cached when a lookup
// finds it and forgotten when one does not (revoked), so a key revoked
// before an outage works at most ttl after its last successful lookup.
// The zero ttl caches nothing. Safe for concurrent use.
type keyCache struct {
	ttl time.Duration

	mu   sync.Mutex
	keys map[string]cachedKey
}

// cachedKey is one resolved key and when the store last resolved it.
type cachedKey struct {
	id, name, plan string
	at             time.Time
}

func newKeyCache(ttl time.Duration) *keyCache {
	switch {
	case ttl == 0:
		ttl = DefaultKeyCacheTTL
	case ttl < 0:
		ttl = 0
	}
	return &keyCache{ttl: ttl, keys: map[string]cachedKey{}}
}

func (c *keyCache) put(hash string, k cachedKey, now time.Time) {
	if c.ttl == 0 {
		return
	}
	k.at = now
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.keys[hash]; !ok && len(c.keys) >= keyCacheMax {
		for h, old := range c.keys {
			if now.Sub(old.at) >= c.ttl {
				delete(c.keys, h)
			}
		}
		if len(c.keys) >= keyCacheMax {
			return // full of live keys: this one is looked up each time
		}
	}
	c.keys[hash] = k
}

func (c *keyCache) get(hash string, now time.Time) (cachedKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.keys[hash]
	if !ok || now.Sub(k.at) >= c.ttl {
		return cachedKey{}, false
	}
	return k, true
}

func (c *keyCache) forget(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.keys, hash)
}
