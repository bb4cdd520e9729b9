package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// joinArgs: what `masq-signer join` is told.
type joinArgs struct {
	node, config, caFile, pki string
	timeout                   time.Duration
}

// The files masqd's cluster.tls names in packaging/kubernetes.
const (
	caName   = "ca.pem"
	certName = "host.pem"
	keyName  = "host-key.pem"
)

// pkiFiles: the names of a certificate's and its key's files, for
// messages.
type pkiFiles struct{ cert, key string }

var hostFiles = pkiFiles{cert: certName, key: keyName}

// checkExisting: why the certificate in hand will do, or why not (nil
// error: keep it). It must chain to the CA, name cn and ip (none when ip
// is nil), match its key and be valid for more than a third of its life.
func checkExisting(certPEM, keyPEM, caPEM []byte, f pkiFiles, cn string, ip net.IP, now time.Time) error {
	certName, keyName := f.cert, f.key
	block, _ := pem.Decode(certPEM)
	if block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("%s holds no PEM CERTIFICATE", certName)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", certName, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("the CA holds no certificate")
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return fmt.Errorf("%s does not chain to the current CA: %w", certName, err)
	}
	if cert.Subject.CommonName != cn {
		return fmt.Errorf("%s names %q, not this node %q", certName, cert.Subject.CommonName, cn)
	}
	if ip == nil && len(cert.IPAddresses) != 0 {
		return fmt.Errorf("%s names IPs %v, want none", certName, cert.IPAddresses)
	}
	if ip != nil && (len(cert.IPAddresses) != 1 || !cert.IPAddresses[0].Equal(ip)) {
		return fmt.Errorf("%s names IPs %v, not this node's underlay IP %s only", certName, cert.IPAddresses, ip)
	}
	life := cert.NotAfter.Sub(cert.NotBefore)
	if left := cert.NotAfter.Sub(now); left <= life/3 {
		return fmt.Errorf("%s has %s left of %s", certName, left.Round(time.Minute), life.Round(time.Minute))
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return fmt.Errorf("%s: %w", keyName, err)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return fmt.Errorf("%s is not %s's key", keyName, certName)
	}
	return nil
}

func join(ctx context.Context, client kubernetes.Interface, a joinArgs) error {
	if a.node == "" {
		return fmt.Errorf("--node (or NODE_NAME, the downward API's spec.nodeName) is empty")
	}
	cfg, err := readMasqdConfig(a.config)
	if err != nil {
		return fmt.Errorf("masqd's config: %w", err)
	}
	ip, err := cfg.underlayIP()
	if err != nil {
		return fmt.Errorf("%s: %w", a.config, err)
	}
	caPEM, err := os.ReadFile(a.caFile)
	if err != nil {
		return fmt.Errorf("the cluster's CA: %w (create the ConfigMap masq-ca in masq-system: docs/kubernetes.md, Deploying)", err)
	}
	certPEM, errC := os.ReadFile(filepath.Join(a.pki, certName))
	keyPEM, errK := os.ReadFile(filepath.Join(a.pki, keyName))
	why := "no certificate yet"
	if errC == nil && errK == nil {
		err := checkExisting(certPEM, keyPEM, caPEM, hostFiles, a.node, ip, time.Now())
		if err == nil {
			log.Printf("node %s, IP %s: keeping %s", a.node, ip, filepath.Join(a.pki, certName))
			return writeIfChanged(filepath.Join(a.pki, caName), caPEM, 0o644)
		}
		why = err.Error()
	}
	log.Printf("node %s, IP %s: asking for a certificate (%s)", a.node, ip, why)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:     pkix.Name{CommonName: a.node},
		IPAddresses: []net.IP{ip},
	}, key)
	if err != nil {
		return err
	}
	certPEM, err = requestCertificate(ctx, client, csrAsk{generateName: "masq-" + a.node + "-", signer: signerName,
		usages:  []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth, certv1.UsageServerAuth},
		timeout: a.timeout}, der)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := checkExisting(certPEM, keyPEM, caPEM, hostFiles, a.node, ip, time.Now()); err != nil {
		return fmt.Errorf("the certificate signed is not what was asked: %w", err)
	}
	// The key before the certificate: a node stopped between the two has
	// a certificate that is not its key's, and asks again.
	for _, f := range []struct {
		name string
		text []byte
		mode os.FileMode
	}{{caName, caPEM, 0o644}, {keyName, keyPEM, 0o600}, {certName, certPEM, 0o644}} {
		if err := writeAtomic(filepath.Join(a.pki, f.name), f.text, f.mode); err != nil {
			return err
		}
	}
	log.Printf("node %s, IP %s: wrote %s, %s and %s in %s", a.node, ip, caName, certName, keyName, a.pki)
	return nil
}

// csrAsk: what a CSR asks of which signer.
type csrAsk struct {
	generateName, signer string
	usages               []certv1.KeyUsage
	timeout              time.Duration
}

// requestCertificate creates the CSR and waits for its certificate, or
// for it to be denied or to fail.
func requestCertificate(ctx context.Context, client kubernetes.Interface, a csrAsk, der []byte) ([]byte, error) {
	csr := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: a.generateName},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: a.signer,
			Usages:     a.usages,
		},
	}
	made, err := client.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating a CertificateSigningRequest: %w", err)
	}
	name := made.Name
	log.Printf("CertificateSigningRequest %s made; waiting up to %s for masq-signer's controller", name, a.timeout)
	deadline := time.Now().Add(a.timeout)
	for {
		got, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			log.Printf("CertificateSigningRequest %s: %v", name, err)
		} else {
			for _, c := range got.Status.Conditions {
				if c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed {
					return nil, fmt.Errorf("CertificateSigningRequest %s %s: %s: %s", name, c.Type, c.Reason, c.Message)
				}
			}
			if len(got.Status.Certificate) > 0 {
				return got.Status.Certificate, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("CertificateSigningRequest %s: no certificate after %s: is masq-signer's "+
				"controller running? (kubectl -n masq-system logs deploy/masq-signer; kubectl get csr %s)",
				name, a.timeout, name)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// writeAtomic writes path's new content beside it and renames it into
// place: masqd never reads half a file.
func writeAtomic(path string, text []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(text); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func writeIfChanged(path string, text []byte, mode os.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, text) {
		return nil
	}
	return writeAtomic(path, text, mode)
}
