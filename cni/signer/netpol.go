package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
)

// Kubernetes NetworkPolicy's mirror (masq-netpol, cni/netpol) is etcd's
// user netpolUser, whose role writes {prefix}/k8s/ and nothing else. Its
// Deployment's init container (join-netpol) asks for that certificate
// with a CSR for netpolSignerName; the controller signs it only for the
// mirror's service account and only as exactly that: CN netpolUser, no
// other subject field, no subject alternative name, client use only. No
// IP in it: no masqd takes it as a host's on the CM link.
const (
	netpolSignerName = "masq.io/netpol"
	netpolUser       = "masq-netpol"
)

var netpolUsages = map[certv1.KeyUsage]bool{
	certv1.UsageDigitalSignature: true,
	certv1.UsageKeyEncipherment:  true,
	certv1.UsageClientAuth:       true,
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

// checkNetpolRequest: the checks on a masq.io/netpol CSR (it needs
// nothing but itself). The request returned has no IP.
func checkNetpolRequest(p policy, csr *certv1.CertificateSigningRequest) (*request, *refusal) {
	if csr.Spec.Username != p.netpolRequestor {
		return nil, refuse("RequestorNotMirror", "asked by %q, not %s", csr.Spec.Username, p.netpolRequestor)
	}
	for _, u := range csr.Spec.Usages {
		if !netpolUsages[u] {
			return nil, refuse("Usages", "usage %q is not one the mirror's etcd client certificate has", u)
		}
	}
	block, _ := pem.Decode(csr.Spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, refuse("BadRequest", "spec.request is not a PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, refuse("BadRequest", "spec.request: %v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, refuse("BadRequest", "spec.request's signature: %v", err)
	}
	if req.Subject.CommonName != netpolUser {
		return nil, refuse("CommonNameNotMirror", "CN %q, not %s", req.Subject.CommonName, netpolUser)
	}
	for _, n := range req.Subject.Names {
		if !n.Type.Equal(oidCommonName) {
			return nil, refuse("Subject", "subject %s: want CN=%s alone", req.Subject, netpolUser)
		}
	}
	if n := len(req.IPAddresses) + len(req.DNSNames) + len(req.EmailAddresses) + len(req.URIs); n != 0 {
		return nil, refuse("SubjectAltNames", "%d IP, %d DNS, %d email and %d URI names: want none",
			len(req.IPAddresses), len(req.DNSNames), len(req.EmailAddresses), len(req.URIs))
	}
	if err := checkKey(req.PublicKey); err != nil {
		return nil, err
	}
	return &request{node: netpolUser, csr: req}, nil
}

// acceptNetpol: the mirror's etcd user and role made, then the CSR
// approved and its certificate published; each step idempotent.
func (c *controller) acceptNetpol(ctx context.Context, csr *certv1.CertificateSigningRequest, r *request) error {
	made, err := c.initAuth(ctx, netpolUser, initAuthArgs(c.args, "--netpol-mirror", netpolUser))
	if err != nil {
		return err
	}
	valid, err := c.approveAndSign(ctx, csr, r, "MasqNetpolChecked",
		fmt.Sprintf("%s asked for CN %s and nothing else", csr.Spec.Username, netpolUser))
	if err != nil {
		return err
	}
	log.Printf("csr %s: signed for %s, valid %s; etcd role masq-netpol (%s)", csr.Name, netpolUser, valid, made)
	return nil
}

// netpolJoinArgs: what `masq-signer join-netpol` is told.
type netpolJoinArgs struct {
	caFile, dir string
	timeout     time.Duration
}

// The files masq-netpol reads (its --ca, --cert and --key).
var netpolFiles = pkiFiles{cert: "netpol.pem", key: "netpol-key.pem"}

// joinNetpol: the mirror's certificate in dir, kept if the one there
// still fits (CN masq-netpol, no IP, the current CA, a third of its life
// left), else asked for with a masq.io/netpol CSR.
func joinNetpol(ctx context.Context, client kubernetes.Interface, a netpolJoinArgs) error {
	caPEM, err := os.ReadFile(a.caFile)
	if err != nil {
		return fmt.Errorf("the cluster's CA: %w (create the ConfigMap masq-ca in masq-system: docs/kubernetes.md, Deploying)", err)
	}
	certPath, keyPath := filepath.Join(a.dir, netpolFiles.cert), filepath.Join(a.dir, netpolFiles.key)
	certPEM, errC := os.ReadFile(certPath)
	keyPEM, errK := os.ReadFile(keyPath)
	why := "no certificate yet"
	if errC == nil && errK == nil {
		err := checkExisting(certPEM, keyPEM, caPEM, netpolFiles, netpolUser, nil, time.Now())
		if err == nil {
			log.Printf("%s: keeping %s", netpolUser, certPath)
			return writeIfChanged(filepath.Join(a.dir, caName), caPEM, 0o644)
		}
		why = err.Error()
	}
	log.Printf("%s: asking for a certificate (%s)", netpolUser, why)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: netpolUser}}, key)
	if err != nil {
		return err
	}
	certPEM, err = requestCertificate(ctx, client, csrAsk{generateName: netpolUser + "-", signer: netpolSignerName,
		usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}, timeout: a.timeout}, der)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := checkExisting(certPEM, keyPEM, caPEM, netpolFiles, netpolUser, nil, time.Now()); err != nil {
		return fmt.Errorf("the certificate signed is not what was asked: %w", err)
	}
	for _, f := range []struct {
		name string
		text []byte
		mode os.FileMode
	}{{caName, caPEM, 0o644}, {netpolFiles.key, keyPEM, 0o600}, {netpolFiles.cert, certPEM, 0o644}} {
		if err := writeAtomic(filepath.Join(a.dir, f.name), f.text, f.mode); err != nil {
			return err
		}
	}
	log.Printf("%s: wrote %s, %s and %s in %s", netpolUser, caName, netpolFiles.cert, netpolFiles.key, a.dir)
	return nil
}
