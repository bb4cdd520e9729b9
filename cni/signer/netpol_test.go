package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// netpolCSR: a masq.io/netpol CSR as join-netpol makes it, changed by
// edit.
func netpolCSR(t *testing.T, edit func(*x509.CertificateRequest, *certv1.CertificateSigningRequestSpec), key any) *certv1.CertificateSigningRequest {
	t.Helper()
	if key == nil {
		key = p256
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: netpolUser}}
	spec := certv1.CertificateSigningRequestSpec{SignerName: netpolSignerName, Username: testPolicy.netpolRequestor,
		Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}}
	if edit != nil {
		edit(tmpl, &spec)
	}
	if spec.Request == nil {
		der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
		must(t, err)
		spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	return &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "masq-netpol-x"}, Spec: spec}
}

// The mirror's CSR is signed only as exactly what it is: its service
// account asking, CN masq-netpol alone, no subject alternative name,
// client use only, a strong key; each refusal names its check.
func TestNetpolDecisionRefusesEachFailedCheckByNameAndAcceptsTheRest(t *testing.T) {
	type edit = func(*x509.CertificateRequest, *certv1.CertificateSigningRequestSpec)
	rsa2048 := mustKey(rsa.GenerateKey(rand.Reader, 2048))
	p224 := mustKey(ecdsa.GenerateKey(elliptic.P224(), rand.Reader))
	cases := []struct {
		name string
		edit edit
		key  any
		want string
	}{
		{"as join-netpol asks", nil, nil, ""},
		{"RSA 2048", nil, rsa2048, ""},
		{"masqd's account", func(_ *x509.CertificateRequest, s *certv1.CertificateSigningRequestSpec) {
			s.Username = testPolicy.requestor
		}, nil, "RequestorNotMirror"},
		{"anyone else", func(_ *x509.CertificateRequest, s *certv1.CertificateSigningRequestSpec) {
			s.Username = "system:serviceaccount:default:default"
		}, nil, "RequestorNotMirror"},
		{"a node's name", func(r *x509.CertificateRequest, _ *certv1.CertificateSigningRequestSpec) {
			r.Subject.CommonName = "node1"
		}, nil, "CommonNameNotMirror"},
		{"the operator's name", func(r *x509.CertificateRequest, _ *certv1.CertificateSigningRequestSpec) {
			r.Subject.CommonName = "operator"
		}, nil, "CommonNameNotMirror"},
		{"an organization too", func(r *x509.CertificateRequest, _ *certv1.CertificateSigningRequestSpec) {
			r.Subject.Organization = []string{"system:masters"}
		}, nil, "Subject"},
		{"an IP", func(r *x509.CertificateRequest, _ *certv1.CertificateSigningRequestSpec) {
			r.IPAddresses = []net.IP{net.ParseIP("10.1.0.1")}
		}, nil, "SubjectAltNames"},
		{"a DNS name", func(r *x509.CertificateRequest, _ *certv1.CertificateSigningRequestSpec) {
			r.DNSNames = []string{"masq-netpol"}
		}, nil, "SubjectAltNames"},
		{"server use", func(_ *x509.CertificateRequest, s *certv1.CertificateSigningRequestSpec) {
			s.Usages = append(s.Usages, certv1.UsageServerAuth)
		}, nil, "Usages"},
		{"no PEM", func(_ *x509.CertificateRequest, s *certv1.CertificateSigningRequestSpec) {
			s.Request = []byte("junk")
		}, nil, "BadRequest"},
		{"P-224", nil, p224, "WeakKey"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, why := checkNetpolRequest(testPolicy, netpolCSR(t, tc.edit, tc.key))
			got := ""
			if why != nil {
				got = why.Reason
			}
			if got != tc.want {
				t.Fatalf("got %q (%v), want %q", got, why, tc.want)
			}
			if got == "" && (r.node != netpolUser || r.ip != nil) {
				t.Fatalf("accepted as %q, IP %v", r.node, r.ip)
			}
		})
	}
}

// A masq.io/netpol CSR through the controller: masqd's account asking is
// denied; the mirror's is left unsigned while init-auth fails, then
// approved and signed for CN masq-netpol with no IP and client use only,
// after masqctl made the role with --netpol-mirror; join-netpol keeps
// that certificate and refuses a node's in its place.
func TestControllerMakesTheMirrorsRoleBeforeSigningItsCertificate(t *testing.T) {
	dir, masqctl, ran := fakeMasqctl(t, "masq-netpol")
	key := mustKey(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	good := netpolCSR(t, nil, key)
	good.Name = "good"
	masqd := netpolCSR(t, func(_ *x509.CertificateRequest, s *certv1.CertificateSigningRequestSpec) {
		s.Username = testPolicy.requestor
	}, nil)
	masqd.Name = "masqd"
	client := fake.NewClientset(good, masqd)
	authority := testCA(t, 10*365*24*time.Hour)
	c := &controller{
		args: controllerArgs{etcd: []string{"https://e:2379"}, prefix: "/masq", operator: "operator",
			masqctl: masqctl, namespace: "masq-system", holders: "masq-node-ips", policy: testPolicy},
		client: client,
		ca:     authority,
	}
	ctx := context.Background()
	get := csrGetter(ctx, t, client)
	must(t, c.handle(ctx, "masqd"))
	if conds := get("masqd").Status.Conditions; len(conds) != 1 || conds[0].Type != certv1.CertificateDenied ||
		conds[0].Reason != "RequestorNotMirror" {
		t.Fatalf("masqd: %+v", conds)
	}
	if err := c.handle(ctx, "good"); err == nil || !strings.Contains(err.Error(), "etcd unreachable") {
		t.Fatalf("with init-auth failing: %v", err)
	}
	if csr := get("good"); len(csr.Status.Conditions) != 0 || len(csr.Status.Certificate) != 0 {
		t.Fatalf("approved or signed without its etcd role: %+v", csr.Status)
	}
	must(t, os.Remove(filepath.Join(dir, "fail")))
	must(t, c.handle(ctx, "good"))
	csr := get("good")
	if !approved(csr) || len(csr.Status.Certificate) == 0 {
		t.Fatalf("not approved and signed: %+v", csr.Status.Conditions)
	}
	cert := parseCert(t, csr.Status.Certificate)
	if cert.Subject.CommonName != netpolUser || len(cert.IPAddresses)+len(cert.DNSNames) != 0 ||
		len(cert.ExtKeyUsage) != 1 || cert.ExtKeyUsage[0] != x509.ExtKeyUsageClientAuth {
		t.Errorf("signed %s, IPs %v, DNS %v, usages %v", cert.Subject, cert.IPAddresses, cert.DNSNames, cert.ExtKeyUsage)
	}
	text, err := os.ReadFile(ran)
	must(t, err)
	if !strings.HasSuffix(strings.TrimSpace(string(text)), "--operator operator --netpol-mirror masq-netpol") {
		t.Errorf("masqctl ran %q", text)
	}

	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	must(t, checkExisting(csr.Status.Certificate, keyPEM, authority.pem, netpolFiles, netpolUser, nil, time.Now()))
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: netpolUser}, IPAddresses: []net.IP{net.ParseIP("10.1.0.1")}}, key)
	must(t, err)
	req, err := x509.ParseCertificateRequest(der)
	must(t, err)
	hostCert, err := authority.sign(&request{node: netpolUser, ip: net.ParseIP("10.1.0.1").To4(), csr: req},
		24*time.Hour, time.Now())
	must(t, err)
	if err := checkExisting(hostCert, keyPEM, authority.pem, netpolFiles, netpolUser, nil, time.Now()); err == nil ||
		!strings.Contains(err.Error(), "want none") {
		t.Errorf("a certificate with an IP kept: %v", err)
	}
}
