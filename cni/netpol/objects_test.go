package main

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the code")

func ptr[T any](v T) *T { return &v }

// testPolicy uses every part of a NetworkPolicy masqd reads.
func testPolicy() *networkingv1.NetworkPolicy {
	udp, sctp := corev1.ProtocolUDP, corev1.ProtocolSCTP
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "allow-app", UID: "u1", ResourceVersion: "7",
			Labels: map[string]string{"owner": "x"}, Annotations: map[string]string{"kubectl/last": "{}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "srv"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn,
					Values: []string{"a", "b"}}}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "cli"}},
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.0.0.9/32"}}},
				},
				Ports: []networkingv1.NetworkPolicyPort{
					{Port: ptr(intstr.FromInt32(7471)), EndPort: ptr(int32(7480))},
					{Protocol: &udp, Port: ptr(intstr.FromString("rdma-cm"))},
					{Protocol: &sctp},
				},
			}},
			Egress: []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
			}},
		},
	}
}

// golden compares got with testdata/name (go test -update writes it).
// policy/src/netpol/object_tests.rs parses the same files: the Go side
// writes what the Rust side reads.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, append(got, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got)+"\n" {
		t.Fatalf("%s:\n got %s\nwant %s", name, got, want)
	}
}

// The values are the shape masqd's reader takes (metadata.name,
// .namespace, .labels; a policy's spec as the API writes it), with no
// annotation, managedFields, status or address.
func TestValuesAreWhatMasqdsReaderTakesAndNoMore(t *testing.T) {
	v, err := policyValue(testPolicy())
	must(t, err)
	golden(t, "networkpolicy.json", v)
	v, err = namespaceValue(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team",
		Labels:      map[string]string{"team": "a", "kubernetes.io/metadata.name": "team"},
		Annotations: map[string]string{"x": "y"}}})
	must(t, err)
	golden(t, "namespace.json", v)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "srv",
		Labels:      map[string]string{"app": "srv"},
		Annotations: map[string]string{networksAnnotation: `[{"name":"acme100","ips":["10.0.0.60/24"]}]`}},
		Status: corev1.PodStatus{PodIP: "192.168.1.5"}}
	v, err = podValue(pod)
	must(t, err)
	golden(t, "pod.json", v)
	v, err = podValue(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "bare"}})
	must(t, err)
	if string(v) != `{"metadata":{"namespace":"team","name":"bare","labels":{}}}` {
		t.Errorf("a pod without labels: %s", v)
	}
}

func nad(ns, name, config string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"namespace": ns, "name": name},
	}}
	if config != "" {
		u.Object["spec"] = map[string]any{"config": config}
	}
	return u
}

// A NAD is masq's when its CNI configuration runs masq-cni, alone or in
// a chain; a pod is masq's when its networks annotation (either form)
// names such a NAD, in its own namespace unless it says another.
func TestMasqPodsAreThoseOnAMasqNetwork(t *testing.T) {
	for _, c := range []struct {
		config string
		masq   bool
	}{
		{`{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"},{"type":"masq-cni","vni":100}]}`, true},
		{`{"cniVersion":"1.0.0","name":"a","type":"masq-cni"}`, true},
		{`{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]}`, false},
		{`{"type":"masq-cni"`, false},
		{"", false},
	} {
		if got := isMasqNAD(nad("team", "a", c.config)); got != c.masq {
			t.Errorf("%s: masq's %v, want %v", c.config, got, c.masq)
		}
	}
	masq := map[string]bool{"team/acme100": true, "other/acme200": true}
	for _, c := range []struct {
		annotation string
		masq       bool
	}{
		{`[{"name":"acme100","ips":["10.0.0.60/24"]}]`, true},
		{`[{"name":"plain"},{"name":"acme200","namespace":"other"}]`, true},
		{`acme100@net1`, true},
		{`plain, other/acme200`, true},
		{`[{"name":"acme200"}]`, false}, // team/acme200: no such NAD
		{`plain`, false},
		{`[{"name":"acme100"`, false},
		{"", false},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "p",
			Annotations: map[string]string{networksAnnotation: c.annotation}}}
		if got := isMasqPod(pod, func(n string) bool { return masq[n] }); got != c.masq {
			t.Errorf("%q: masq's %v, want %v", c.annotation, got, c.masq)
		}
	}
}

// No key leaves {prefix}/k8s/, whatever name it is given.
func TestKeysStayBelowK8s(t *testing.T) {
	s := newStore(nil, "/masq")
	if k, err := s.key("pods/team/srv"); err != nil || k != "/masq/k8s/pods/team/srv" {
		t.Fatalf("%q %v", k, err)
	}
	for _, bad := range []string{"", "/policy", "../policy", "pods/../../policy", "pods//x", "./x"} {
		if k, err := s.key(bad); err == nil {
			t.Errorf("%q became %q", bad, k)
		}
	}
}

// A resync's changes go in transactions of at most maxOps changes and
// about maxBytes, a larger change alone.
func TestBatchesAreBounded(t *testing.T) {
	s := newStore(nil, "/m")
	s.maxOps, s.maxBytes = 3, 100
	var cs []change
	for i := 0; i < 7; i++ {
		cs = append(cs, change{rel: "pods/a/b", value: []byte("x")})
	}
	cs = append(cs, change{rel: "networkpolicies/a/big", value: make([]byte, 500)}, change{rel: "pods/a/c"})
	var sizes []int
	for _, b := range s.batches(cs) {
		sizes = append(sizes, len(b))
	}
	if len(sizes) != 5 || sizes[0] != 3 || sizes[1] != 3 || sizes[2] != 1 || sizes[3] != 1 || sizes[4] != 1 {
		t.Fatalf("batches of %v", sizes)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
