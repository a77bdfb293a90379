package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Headers of a forwarded request. A request that carries any header whose
// name starts with forwardPrefix is taken for a forwarded one and must
// verify; a client cannot pass for a node by sending them.
const (
	forwardPrefix   = "X-Sandbox-Forward"
	hdrForwardedBy  = "X-Sandbox-Forwarded-By"
	hdrForwardTime  = "X-Sandbox-Forward-Time"
	hdrForwardNonce = "X-Sandbox-Forward-Nonce"
	hdrForwardSig   = "X-Sandbox-Forward-Signature"
	// HeaderNode names, on every response of a node, the node that served
	// the request.
	HeaderNode = "X-Sandbox-Node"
)

// MaxSkew is how far a forwarded request's timestamp may be from the
// receiving node's clock.
const MaxSkew = 30 * time.Second

// ErrBadSignature is returned by verify for a forwarded request whose
// signature headers are missing, malformed, stale, replayed or signed
// with another secret or for another node, method or path.
var ErrBadSignature = errors.New("bad node signature")

// signer signs the requests a node forwards and verifies those it
// receives. The zero value is not usable; it is safe for concurrent use.
type signer struct {
	secret []byte   // signs; verifies too
	accept [][]byte // secret, then the previous secrets: a forward signed with any of them verifies
	self   string

	mu   sync.Mutex
	seen map[string]time.Time // nonces accepted, until they cannot verify anymore
}

// newSigner signs with secret and verifies forwards signed with secret or
// with any of previous (cluster.previous_secrets, while a new secret is
// rolled out).
func newSigner(secret string, previous []string, self string) *signer {
	s := &signer{secret: []byte(secret), self: self, seen: map[string]time.Time{}}
	s.accept = append(s.accept, s.secret)
	for _, p := range previous {
		s.accept = append(s.accept, []byte(p))
	}
	return s
}

// mac is the signature of one forward under key: what is signed is the
// method, the request URI (path and query, as sent), the sending and
// receiving nodes, the time and a nonce. The body is not signed (it
// streams); the nonce makes each signature usable once.
func mac(key []byte, method, uri, from, to, ts, nonce string) []byte {
	h := hmac.New(sha256.New, key)
	for _, part := range []string{"sandboxapi-forward-v1", method, uri, from, to, ts, nonce} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// sign sets the forward headers on h for a request to node to.
func (s *signer) sign(h http.Header, method, uri, to string, now time.Time) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	nonce := hex.EncodeToString(b[:])
	ts := strconv.FormatInt(now.Unix(), 10)
	h.Set(hdrForwardedBy, s.self)
	h.Set(hdrForwardTime, ts)
	h.Set(hdrForwardNonce, nonce)
	h.Set(hdrForwardSig, hex.EncodeToString(mac(s.secret, method, uri, s.self, to, ts, nonce)))
}

// isForwarded reports whether h carries any forward header.
func isForwarded(h http.Header) bool {
	for k := range h {
		if len(k) >= len(forwardPrefix) && strings.EqualFold(k[:len(forwardPrefix)], forwardPrefix) {
			return true
		}
	}
	return false
}

// verify checks the forward headers of a request to this node and
// returns the node that sent it. Every failure wraps ErrBadSignature.
func (s *signer) verify(h http.Header, method, uri string, now time.Time) (string, error) {
	one := func(name string) (string, error) {
		v := h.Values(name)
		if len(v) != 1 || v[0] == "" {
			return "", fmt.Errorf("%w: want one %s header", ErrBadSignature, name)
		}
		return v[0], nil
	}
	from, err := one(hdrForwardedBy)
	if err != nil {
		return "", err
	}
	ts, err := one(hdrForwardTime)
	if err != nil {
		return "", err
	}
	nonce, err := one(hdrForwardNonce)
	if err != nil {
		return "", err
	}
	sig, err := one(hdrForwardSig)
	if err != nil {
		return "", err
	}
	if !validName(from) || from == s.self {
		return "", fmt.Errorf("%w: sender %q", ErrBadSignature, from)
	}
	if len(nonce) != 32 || !isHex(nonce) {
		return "", fmt.Errorf("%w: malformed nonce", ErrBadSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || strconv.FormatInt(sec, 10) != ts {
		return "", fmt.Errorf("%w: malformed time", ErrBadSignature)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > MaxSkew || d < -MaxSkew {
		return "", fmt.Errorf("%w: time off by %s", ErrBadSignature, d.Round(time.Second))
	}
	got, err := hex.DecodeString(sig)
	if err != nil || len(got) != sha256.Size || !isHex(sig) {
		return "", fmt.Errorf("%w: malformed signature", ErrBadSignature)
	}
	// Every accepted secret is tried, each compared in constant time, and
	// the loop does not stop at a match: how long verify takes does not
	// tell which secret signed. The nonce is spent once, whichever did.
	matched := false
	for _, key := range s.accept {
		if hmac.Equal(got, mac(key, method, uri, from, s.self, ts, nonce)) {
			matched = true
		}
	}
	if !matched {
		return "", fmt.Errorf("%w: signature does not match", ErrBadSignature)
	}
	if !s.firstUse(nonce, now) {
		return "", fmt.Errorf("%w: replayed", ErrBadSignature)
	}
	return from, nil
}

// maxNonces bounds the replay cache; past it the oldest half is dropped
// (a flood of valid forwards within one skew window, which only nodes can
// sign).
const maxNonces = 1 << 16

// firstUse records nonce and reports whether it was new. A nonce is kept
// for twice MaxSkew: after that its timestamp no longer verifies.
func (s *signer) firstUse(nonce string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.seen[nonce]; dup {
		return false
	}
	if len(s.seen) >= maxNonces {
		for k, until := range s.seen {
			if !until.After(now) || len(s.seen) >= maxNonces/2 {
				delete(s.seen, k)
			}
		}
	}
	s.seen[nonce] = now.Add(2 * MaxSkew)
	return true
}

// prune forgets nonces whose timestamps can no longer verify.
func (s *signer) prune(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, until := range s.seen {
		if !until.After(now) {
			delete(s.seen, k)
		}
	}
}

// stripForward removes every forward header from h.
func stripForward(h http.Header) {
	for k := range h {
		if len(k) >= len(forwardPrefix) && strings.EqualFold(k[:len(forwardPrefix)], forwardPrefix) {
			delete(h, k)
		}
	}
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
