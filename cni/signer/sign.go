package main

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"time"
)

const (
	maxValidity = 365 * 24 * time.Hour
	minValidity = time.Hour
	// backdate: a node whose clock is a little behind still takes the
	// certificate as valid.
	backdate = 5 * time.Minute
)

// ca is the cluster's CA: its certificate and key.
type ca struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  []byte
}

func loadCA(certFile, keyFile string) (*ca, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("%s: no PEM CERTIFICATE", certFile)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%s: not a CA certificate", certFile)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	return &ca{cert: cert, key: key, pem: certPEM}, nil
}

// parseKey takes a PEM private key as openssl writes them (PKCS#8, SEC 1
// or PKCS#1).
func parseKey(text []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(text)
	if block == nil {
		return nil, fmt.Errorf("no PEM private key")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if s, ok := k.(crypto.Signer); ok {
			return s, nil
		}
		return nil, fmt.Errorf("a %T key cannot sign", k)
	}
	if k, err := x509.ParseECPrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	return nil, fmt.Errorf("a PEM %s that is not a PKCS#8, EC or RSA private key", block.Type)
}

// validity: the CSR's spec.expirationSeconds within [1 h, 1 year], a year
// if it gives none.
func validity(expirationSeconds *int32) time.Duration {
	if expirationSeconds == nil {
		return maxValidity
	}
	d := time.Duration(*expirationSeconds) * time.Second
	return min(max(d, minValidity), maxValidity)
}

// sign makes the host's certificate: subject CN = the node, its one IP as
// the only subject alternative name, for client and server use, valid
// from now (backdated a little) for `valid`, never past the CA's own end.
// A request without an IP (the mirror's) gets no subject alternative
// name and client use only. Returns it as PEM.
func (c *ca) sign(r *request, valid time.Duration, now time.Time) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, err
	}
	usage := x509.KeyUsageDigitalSignature
	if _, ok := r.csr.PublicKey.(*rsa.PublicKey); ok {
		usage |= x509.KeyUsageKeyEncipherment
	}
	notAfter := now.Add(valid)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	ips := []net.IP{r.ip}
	ext := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}
	if r.ip == nil {
		ips, ext = nil, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: r.node},
		IPAddresses:           ips,
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              usage,
		ExtKeyUsage:           ext,
		BasicConstraintsValid: true,
		IsCA:                  false,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, r.csr.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
