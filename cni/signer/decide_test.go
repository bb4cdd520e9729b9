package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"net/url"
	"testing"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var testPolicy = policy{
	requestor:       "system:serviceaccount:masq-system:masqd",
	netpolRequestor: "system:serviceaccount:masq-system:masq-netpol",
	reserved:        []string{"root", "operator", netpolUser},
}

// csrSpec: what a test's CSR holds; the zero value's fields are filled
// with the good case's by makeCSR.
type csrSpec struct {
	key      crypto.Signer
	cn       string
	ips      []net.IP
	dns      []string
	emails   []string
	uris     []*url.URL
	username string
	nodes    []string // spec.extra's node-name; nil: {"node1"}
	usages   []certv1.KeyUsage
	request  []byte // instead of the one made
}

var p256 = mustKey(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))

func mustKey[K crypto.Signer](k K, err error) crypto.Signer {
	if err != nil {
		panic(err)
	}
	return k
}

func makeCSR(t *testing.T, s csrSpec) *certv1.CertificateSigningRequest {
	t.Helper()
	if s.key == nil {
		s.key = p256
	}
	if s.cn == "" {
		s.cn = "node1"
	}
	if s.ips == nil {
		s.ips = []net.IP{net.ParseIP("10.1.0.1")}
	}
	if s.username == "" {
		s.username = testPolicy.requestor
	}
	if s.nodes == nil {
		s.nodes = []string{"node1"}
	}
	if s.usages == nil {
		s.usages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth, certv1.UsageServerAuth}
	}
	if s.request == nil {
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: s.cn}, IPAddresses: s.ips, DNSNames: s.dns,
			EmailAddresses: s.emails, URIs: s.uris,
		}, s.key)
		if err != nil {
			t.Fatal(err)
		}
		s.request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der})
	}
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "masq-node1-x"},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    s.request,
			SignerName: signerName,
			Usages:     s.usages,
			Username:   s.username,
			Extra:      map[string]certv1.ExtraValue{nodeNameExtra: s.nodes},
		},
	}
}

func testNode(name string, annotations map[string]string, internal ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: name})
	for _, a := range internal {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

// Each check refuses what it is for, naming itself as the reason, and a
// CSR that passes them all is accepted.
func TestDecisionRefusesEachFailedCheckByNameAndAcceptsTheRest(t *testing.T) {
	node1 := testNode("node1", nil, "192.168.0.1", "10.1.0.1")
	p224 := mustKey(ecdsa.GenerateKey(elliptic.P224(), rand.Reader))
	rsa1024 := mustKey(rsa.GenerateKey(rand.Reader, 1024))
	rsa2048 := mustKey(rsa.GenerateKey(rand.Reader, 2048))
	p384 := mustKey(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))
	uri, _ := url.Parse("spiffe://x/y")
	cases := []struct {
		name    string
		spec    csrSpec
		node    *corev1.Node
		holders map[string]string
		want    string // the refusal's reason; "" accepted
	}{
		{"a node's own name and InternalIP", csrSpec{}, node1, nil, ""},
		{"P-384", csrSpec{key: p384}, node1, nil, ""},
		{"RSA 2048", csrSpec{key: rsa2048}, node1, nil, ""},
		{"its IP held by itself already", csrSpec{}, node1, map[string]string{"10.1.0.1": "node1"}, ""},
		{"the operator's annotation names the IP",
			csrSpec{ips: []net.IP{net.ParseIP("198.18.0.7")}},
			testNode("node1", map[string]string{underlayAnnotation: "198.18.0.7"}, "10.1.0.1"), nil, ""},
		{"another requestor", csrSpec{username: "system:serviceaccount:default:default"}, node1, nil, "RequestorNotMasqd"},
		{"a node's own credentials", csrSpec{username: "system:node:node1"}, node1, nil, "RequestorNotMasqd"},
		{"no node binding", csrSpec{nodes: []string{}}, node1, nil, "NoNodeBinding"},
		{"two nodes", csrSpec{nodes: []string{"node1", "node2"}}, node1, nil, "NoNodeBinding"},
		{"another node's name", csrSpec{cn: "node2"}, node1, nil, "CommonNameNotNode"},
		{"etcd's root", csrSpec{cn: "root", nodes: []string{"root"}}, testNode("root", nil, "10.1.0.1"), nil, "ReservedName"},
		{"the operator's name", csrSpec{cn: "operator", nodes: []string{"operator"}},
			testNode("operator", nil, "10.1.0.1"), nil, "ReservedName"},
		// The mirror's etcd user, which writes {prefix}/k8s/.
		{"NetworkPolicy's mirror's name", csrSpec{cn: netpolUser, nodes: []string{netpolUser}},
			testNode(netpolUser, nil, "10.1.0.1"), nil, "ReservedName"},
		{"a DNS name too", csrSpec{dns: []string{"node1"}}, node1, nil, "SubjectAltNames"},
		{"an email too", csrSpec{emails: []string{"a@b"}}, node1, nil, "SubjectAltNames"},
		{"a URI too", csrSpec{uris: []*url.URL{uri}}, node1, nil, "SubjectAltNames"},
		{"two IPs", csrSpec{ips: []net.IP{net.ParseIP("10.1.0.1"), net.ParseIP("192.168.0.1")}}, node1, nil, "SubjectAltNames"},
		{"no IP", csrSpec{ips: []net.IP{}}, node1, nil, "SubjectAltNames"},
		{"IPv6", csrSpec{ips: []net.IP{net.ParseIP("fd00::1")}}, node1, nil, "SubjectAltNames"},
		{"signing certificates", csrSpec{usages: []certv1.KeyUsage{certv1.UsageCertSign}}, node1, nil, "Usages"},
		{"no PEM", csrSpec{request: []byte("junk")}, node1, nil, "BadRequest"},
		{"a broken DER", csrSpec{request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte{0x30, 1}})},
			node1, nil, "BadRequest"},
		{"P-224", csrSpec{key: p224}, node1, nil, "WeakKey"},
		{"RSA 1024", csrSpec{key: rsa1024}, node1, nil, "WeakKey"},
		{"no such node", csrSpec{}, nil, nil, "NodeNotFound"},
		{"an IP the node does not have", csrSpec{ips: []net.IP{net.ParseIP("10.1.0.2")}}, node1, nil, "IPNotNodes"},
		{"another node's IP, by its address", csrSpec{}, testNode("node1", nil, "10.1.0.2"), nil, "IPNotNodes"},
		{"an IP another node holds", csrSpec{}, node1, map[string]string{"10.1.0.1": "node2"}, "IPHeldByOtherNode"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, why := checkRequest(testPolicy, makeCSR(t, tc.spec))
			if why == nil {
				why = checkNode(r, tc.node, tc.holders)
			}
			got := ""
			if why != nil {
				got = why.Reason
				if why.Message == "" {
					t.Errorf("%s without a message", why.Reason)
				}
			}
			if got != tc.want {
				t.Fatalf("got %q (%v), want %q", got, why, tc.want)
			}
			if got == "" && (r.node != "node1" || r.ip.To4() == nil) {
				t.Fatalf("accepted as node %q, IP %v", r.node, r.ip)
			}
		})
	}
}
