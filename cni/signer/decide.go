package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
)

// signerName is the signer masq's nodes ask for.
const signerName = "masq.io/node"

// underlayAnnotation names a node's underlay IP where it is not one of the
// node's own addresses (the RDMA netdev on a network of its own); the
// operator sets it.
const underlayAnnotation = "masq.io/underlay-ip"

// nodeNameExtra is what a bound service-account token (a pod's projected
// token) carries of the node its pod runs on; the API server copies it
// into the CSR's spec.extra.
const nodeNameExtra = "authentication.kubernetes.io/node-name"

// Usages a host's certificate has: it is a client of etcd and of other
// masqds on the CM link, and the CM link's server.
var allowedUsages = map[certv1.KeyUsage]bool{
	certv1.UsageDigitalSignature: true,
	certv1.UsageKeyEncipherment:  true,
	certv1.UsageClientAuth:       true,
	certv1.UsageServerAuth:       true,
}

// policy is what the decision is checked against.
type policy struct {
	// requestor: the one user that may ask (the masqd service account).
	requestor string
	// netpolRequestor: the one user that may ask for the mirror's
	// certificate (masq.io/netpol; the masq-netpol service account).
	netpolRequestor string
	// reserved: etcd users no node may be (root, the operator's, the
	// mirror's).
	reserved []string
}

// refusal is why a CSR is denied: Reason is the check (the condition's
// reason), Message its details.
type refusal struct {
	Reason, Message string
}

func (r *refusal) Error() string { return r.Reason + ": " + r.Message }

func refuse(reason, format string, a ...any) *refusal {
	return &refusal{Reason: reason, Message: fmt.Sprintf(format, a...)}
}

// request is a CSR that passed the checks that need nothing but itself.
type request struct {
	node string
	ip   net.IP
	csr  *x509.CertificateRequest
}

// checkRequest: the checks on the CSR alone. The node it names must then
// be looked up and given to checkNode.
func checkRequest(p policy, csr *certv1.CertificateSigningRequest) (*request, *refusal) {
	if csr.Spec.Username != p.requestor {
		return nil, refuse("RequestorNotMasqd", "asked by %q, not %s", csr.Spec.Username, p.requestor)
	}
	nodes := csr.Spec.Extra[nodeNameExtra]
	if len(nodes) != 1 || nodes[0] == "" {
		return nil, refuse("NoNodeBinding", "the requestor's token names %d nodes (%s %v), not one: "+
			"ask with a pod's projected service-account token", len(nodes), nodeNameExtra, []string(nodes))
	}
	node := nodes[0]
	for _, u := range csr.Spec.Usages {
		if !allowedUsages[u] {
			return nil, refuse("Usages", "usage %q is not one a host's certificate has", u)
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
	if req.Subject.CommonName != node {
		return nil, refuse("CommonNameNotNode", "CN %q, but the requestor's pod runs on node %q",
			req.Subject.CommonName, node)
	}
	for _, r := range p.reserved {
		if node == r {
			return nil, refuse("ReservedName", "node %q has the name of etcd's %s user", node, r)
		}
	}
	if n := len(req.DNSNames) + len(req.EmailAddresses) + len(req.URIs); n != 0 || len(req.IPAddresses) != 1 {
		return nil, refuse("SubjectAltNames", "%d IP, %d DNS, %d email and %d URI names: want exactly one IP",
			len(req.IPAddresses), len(req.DNSNames), len(req.EmailAddresses), len(req.URIs))
	}
	ip := req.IPAddresses[0].To4()
	if ip == nil {
		return nil, refuse("SubjectAltNames", "IP %s is not IPv4 (masq's underlay is)", req.IPAddresses[0])
	}
	if err := checkKey(req.PublicKey); err != nil {
		return nil, err
	}
	return &request{node: node, ip: ip, csr: req}, nil
}

func checkKey(k any) *refusal {
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return refuse("WeakKey", "ECDSA on %s: want P-256 or P-384", k.Curve.Params().Name)
	case *rsa.PublicKey:
		if k.N.BitLen() >= 2048 {
			return nil
		}
		return refuse("WeakKey", "RSA of %d bits: want 2048 or more", k.N.BitLen())
	}
	return refuse("WeakKey", "a %T key: want ECDSA P-256/P-384 or RSA >= 2048", k)
}

// checkNode: the IP is the node's (an InternalIP it reports, or the
// operator's annotation) and no other node holds it. node is nil when
// the API server has no such node; holders maps each IP signed so far to
// its node.
func checkNode(r *request, node *corev1.Node, holders map[string]string) *refusal {
	if node == nil {
		return refuse("NodeNotFound", "no node %q", r.node)
	}
	ip := r.ip.String()
	var known []string
	for _, a := range node.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			known = append(known, a.Address)
		}
	}
	if a, ok := node.Annotations[underlayAnnotation]; ok {
		known = append(known, a)
	}
	mine := false
	for _, k := range known {
		if parsed := net.ParseIP(k); parsed != nil && parsed.Equal(r.ip) {
			mine = true
		}
	}
	if !mine {
		return refuse("IPNotNodes", "IP %s is none of node %s's InternalIPs nor its %s annotation (%v)",
			ip, r.node, underlayAnnotation, known)
	}
	if h, ok := holders[ip]; ok && h != r.node {
		return refuse("IPHeldByOtherNode", "IP %s is node %s's since its first certificate", ip, h)
	}
	return nil
}
