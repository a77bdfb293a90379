package tlsserve

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/caddyserver/certmagic"
)

// localCA is a certmagic Issuer that signs with a CA kept on disk (mode
// local): for internal use, where clients trust <storage>/local-ca/ca.pem.
type localCA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer
}

var _ certmagic.Issuer = (*localCA)(nil)

// loadOrCreateLocalCA reads ca.pem and ca-key.pem from dir, creating a new
// ECDSA P-256 CA valid for ten years when they do not exist.
func loadOrCreateLocalCA(dir string) (*localCA, error) {
	certPath, keyPath := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	if _, err := os.Stat(certPath); errors.Is(err, os.ErrNotExist) {
		if err := createLocalCA(dir, certPath, keyPath); err != nil {
			return nil, fmt.Errorf("creating the local CA: %w", err)
		}
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("local CA in %s: %w", dir, err)
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("local CA in %s: key cannot sign", dir)
	}
	return &localCA{cert: pair.Leaf, certPEM: certPEM, key: signer}, nil
}

func createLocalCA(dir, certPath, keyPath string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "sandboxapi local CA " + host, Organization: []string{"sandboxapi"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

func randomSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// localLeafLifetime is short so that certmagic renews often (at a third
// of the lifetime left) and a leaked key ages out.
const localLeafLifetime = 7 * 24 * time.Hour

// Issue signs the CSR's names with the local CA.
func (ca *localCA) Issue(ctx context.Context, csr *x509.CertificateRequest) (*certmagic.IssuedCertificate, error) {
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("local CA: CSR signature: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: firstName(csr)},
		DNSNames:     csr.DNSNames,
		IPAddresses:  csr.IPAddresses,
		NotBefore:    time.Now().Add(-5 * time.Minute),
		NotAfter:     time.Now().Add(localLeafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, csr.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("local CA: signing: %w", err)
	}
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca.certPEM...)
	return &certmagic.IssuedCertificate{Certificate: chain}, nil
}

// IssuerKey names the CA, so a new CA means new certificates.
func (ca *localCA) IssuerKey() string {
	sum := sha256.Sum256(ca.cert.Raw)
	return "sandboxapi-local-" + hex.EncodeToString(sum[:6])
}

func firstName(csr *x509.CertificateRequest) string {
	if len(csr.DNSNames) > 0 {
		return csr.DNSNames[0]
	}
	if len(csr.IPAddresses) > 0 {
		return csr.IPAddresses[0].String()
	}
	return csr.Subject.CommonName
}
