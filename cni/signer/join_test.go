package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
)

// join keeps the certificate in hand only if it chains to the current
// CA, names this node and this IP only, is its key's and has more than a
// third of its life left; anything else is asked for again, saying why.
func TestJoinKeepsOnlyACertificateThatStillFitsThisNode(t *testing.T) {
	authority := testCA(t, 10*365*24*time.Hour)
	caPEM := authority.pem
	ip := net.ParseIP("10.1.0.1").To4()
	key := mustKey(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	now := time.Now()
	issue := func(a *ca, cn string, ips []net.IP, at time.Time) []byte {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: cn}, IPAddresses: ips}, key)
		must(t, err)
		csr := makeCSR(t, csrSpec{request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			nodes: []string{cn}, usages: []certv1.KeyUsage{certv1.UsageClientAuth}})
		block, _ := pem.Decode(csr.Spec.Request)
		req, err := x509.ParseCertificateRequest(block.Bytes)
		must(t, err)
		text, err := a.sign(&request{node: cn, ip: ips[0], csr: req}, 30*24*time.Hour, at)
		must(t, err)
		return text
	}
	good := issue(authority, "node1", []net.IP{ip}, now)
	otherKey := mustKey(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	otherDER, err := x509.MarshalPKCS8PrivateKey(otherKey)
	must(t, err)
	cases := []struct {
		name       string
		cert, key  []byte
		ca         []byte
		node       string
		at         time.Time
		wantReason string // "" kept
	}{
		{"a fresh certificate for this node and IP", good, keyPEM, caPEM, "node1", now, ""},
		{"with two thirds of its life gone and a day", good, keyPEM, caPEM, "node1", now.Add(21 * 24 * time.Hour), "left of"},
		{"signed by an older CA", issue(testCA(t, 24*time.Hour*365), "node1", []net.IP{ip}, now), keyPEM, caPEM, "node1", now,
			"does not chain to the current CA"},
		{"another node's name", good, keyPEM, caPEM, "node2", now, `not this node "node2"`},
		{"another IP", issue(authority, "node1", []net.IP{net.ParseIP("10.1.0.9").To4()}, now), keyPEM, caPEM, "node1", now,
			"not this node's underlay IP"},
		{"another key", good, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: otherDER}), caPEM, "node1", now,
			"is not host.pem's key"},
		{"expired", good, keyPEM, caPEM, "node1", now.Add(40 * 24 * time.Hour), "does not chain"},
		{"not PEM", []byte("junk"), keyPEM, caPEM, "node1", now, "no PEM CERTIFICATE"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkExisting(tc.cert, tc.key, tc.ca, hostFiles, tc.node, ip, tc.at)
			switch {
			case tc.wantReason == "" && err != nil:
				t.Fatalf("asked again: %v", err)
			case tc.wantReason != "" && err == nil:
				t.Fatalf("kept, want %q", tc.wantReason)
			case tc.wantReason != "" && !strings.Contains(err.Error(), tc.wantReason):
				t.Fatalf("%v, want %q", err, tc.wantReason)
			}
		})
	}
}
