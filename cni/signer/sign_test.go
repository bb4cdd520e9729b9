package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// testCA makes a CA valid for `life` from now, writes it as openssl does
// (ca.pem, ca-key.pem in SEC 1) into a temporary directory and loads it.
func testCA(t *testing.T, life time.Duration) *ca {
	t.Helper()
	key := mustKey(ecdsa.GenerateKey(elliptic.P256(), rand.Reader)).(*ecdsa.PrivateKey)
	now := time.Now()
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "masq test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(life),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, &x509.Certificate{Subject: pkix.Name{CommonName: "masq test CA"}}, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "ca-key.pem")
	must(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	c, err := loadCA(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func testRequest(t *testing.T) *request {
	t.Helper()
	r, why := checkRequest(testPolicy, makeCSR(t, csrSpec{}))
	if why != nil {
		t.Fatal(why)
	}
	return r
}

func parseCert(t *testing.T, text []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(text)
	if block == nil {
		t.Fatal("no PEM")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// The certificate verifies against the CA for client and server use,
// names the node and its one IP only, and is valid as long as the CSR
// asked within [1 h, 1 year] (a year if it did not say), never past the
// CA's end.
func TestSignedCertificateVerifiesNamesTheNodeAndItsIPAndIsValidAsAsked(t *testing.T) {
	authority := testCA(t, 10*365*24*time.Hour)
	r := testRequest(t)
	now := time.Now()
	text, err := authority.sign(r, validity(nil), now)
	must(t, err)
	cert := parseCert(t, text)
	roots := x509.NewCertPool()
	roots.AddCert(authority.cert)
	for _, u := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{u}}); err != nil {
			t.Errorf("usage %v: %v", u, err)
		}
	}
	if err := cert.VerifyHostname("10.1.0.1"); err != nil {
		t.Error(err)
	}
	if cert.Subject.CommonName != "node1" || len(cert.IPAddresses) != 1 || len(cert.DNSNames) != 0 {
		t.Errorf("CN %q, IPs %v, DNS %v", cert.Subject.CommonName, cert.IPAddresses, cert.DNSNames)
	}
	if cert.IsCA || cert.KeyUsage&x509.KeyUsageCertSign != 0 || cert.KeyUsage&x509.KeyUsageDigitalSignature == 0 {
		t.Errorf("IsCA %v, key usage %b", cert.IsCA, cert.KeyUsage)
	}
	if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}) {
		t.Errorf("extended key usage %v", cert.ExtKeyUsage)
	}
	if d := cert.NotAfter.Sub(now); d < maxValidity-time.Second || d > maxValidity {
		t.Errorf("valid for %s, want a year", d)
	}
	if cert.NotBefore.After(now) {
		t.Errorf("not valid before %s, after now", cert.NotBefore)
	}

	seconds := func(s int32) *int32 { return &s }
	for _, tc := range []struct {
		asked *int32
		want  time.Duration
	}{
		{nil, maxValidity},
		{seconds(600), time.Hour},
		{seconds(3 * 86400), 3 * 24 * time.Hour},
		{seconds(2 * 365 * 86400), maxValidity},
	} {
		if got := validity(tc.asked); got != tc.want {
			t.Errorf("expirationSeconds %v: %s, want %s", tc.asked, got, tc.want)
		}
	}

	short := testCA(t, 48*time.Hour)
	text, err = short.sign(r, maxValidity, now)
	must(t, err)
	if got := parseCert(t, text).NotAfter; !got.Equal(short.cert.NotAfter) {
		t.Errorf("valid until %s, past the CA's %s", got, short.cert.NotAfter)
	}
}
