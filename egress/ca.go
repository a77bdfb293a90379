package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// ErrBadCA is wrapped by errors about the CA's files.
var ErrBadCA = errors.New("bad egress CA")

// CA lifetimes. The root outlives any server; a leaf lives a day and is
// minted again once it has less than leafRenew left.
const (
	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	leafRenew    = time.Hour
	// maxLeaves bounds the leaf cache: past it the entry closest to
	// expiry goes.
	maxLeaves = 1024
)

// CA is the egress proxy's per-server certificate authority: an ECDSA
// P-256 root whose name constraints exclude every IP address (it signs
// only DNS names), with leaf certificates for one host each minted on
// demand and cached in memory. Its key stays on the host (CAKeyFile in
// its folder, mode 0600); sandboxes get the certificate only. Build it
// with LoadCA; safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// The CA's files in its folder.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
)

// LoadCA reads the CA in dir, creating it (the folder 0700, the key 0600)
// on first start.
func LoadCA(dir string) (*CA, error) {
	certPEM, cerr := os.ReadFile(filepath.Join(dir, CACertFile))
	keyPEM, kerr := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist) {
		return createCA(dir)
	}
	if cerr != nil || kerr != nil {
		return nil, fmt.Errorf("reading egress CA in %s: %w", dir, errors.Join(cerr, kerr))
	}
	if fi, err := os.Stat(filepath.Join(dir, CAKeyFile)); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is readable by others (mode %v)", ErrBadCA, filepath.Join(dir, CAKeyFile), fi.Mode().Perm())
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%w: certificate or key is not PEM", ErrBadCA)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: parsing certificate: %w", ErrBadCA, err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: parsing key: %w", ErrBadCA, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%w: key does not match certificate", ErrBadCA)
	}
	return &CA{cert: cert, key: key, certPEM: certPEM, leaves: map[string]*tls.Certificate{}}, nil
}

func createCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating egress CA folder: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating egress CA key: %w", err)
	}
	now := time.Now()
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"sandboxapi"}, CommonName: "sandboxapi egress CA " + host},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		// DNS names only: no certificate it signs is valid for an address.
		PermittedDNSDomainsCritical: true,
		ExcludedIPRanges:            []*net.IPNet{{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}, {IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating egress CA certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding egress CA key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	// The key first, exclusively: of two processes starting at once, the
	// second reads what the first wrote.
	kf, err := os.OpenFile(filepath.Join(dir, CAKeyFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		time.Sleep(100 * time.Millisecond)
		return LoadCA(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("writing egress CA key: %w", err)
	}
	_, werr := kf.Write(keyPEM)
	if cerr := kf.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = writeFileAtomic(filepath.Join(dir, CACertFile), certPEM, 0o644)
	}
	if werr != nil {
		os.Remove(filepath.Join(dir, CAKeyFile))
		return nil, fmt.Errorf("writing egress CA: %w", werr)
	}
	return parseCA(certPEM, keyPEM)
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n.Add(n, big.NewInt(1))
}

// CertPEM is the CA's certificate, which sandboxes trust.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Certificate is the CA's parsed certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns a certificate for the canonical DNS name host, valid for a
// day, from the cache while it has more than an hour left.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	ca.mu.Lock()
	if c := ca.leaves[host]; c != nil && c.Leaf.NotAfter.Sub(now) > leafRenew {
		ca.mu.Unlock()
		return c, nil
	}
	ca.mu.Unlock()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating leaf key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     now.Add(leafValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("minting leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing leaf for %s: %w", host, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if len(ca.leaves) >= maxLeaves {
		var oldest string
		for h, l := range ca.leaves {
			if oldest == "" || l.Leaf.NotAfter.Before(ca.leaves[oldest].Leaf.NotAfter) {
				oldest = h
			}
		}
		delete(ca.leaves, oldest)
	}
	ca.leaves[host] = c
	return c, nil
}
