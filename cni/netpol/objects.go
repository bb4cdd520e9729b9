package main

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// What is mirrored, one etcd key per object under {prefix}/k8s/. The
// values are the API's own JSON cut to what NetworkPolicy needs, in the
// shape masqd's reader takes (policy/src/netpol/object.rs: metadata.name,
// metadata.namespace and metadata.labels; a policy's spec as the API
// writes it):
//
//	namespaces/{ns}            {"metadata":{"name":ns,"labels":{...}}}
//	pods/{ns}/{pod}            {"metadata":{"namespace":ns,"name":pod,"labels":{...}}}   masq pods only
//	networkpolicies/{ns}/{np}  {"apiVersion":...,"kind":...,"metadata":{"namespace","name"},"spec":{...}}
//
// No addresses, no annotations: a pod's annotations are its tenant's to
// write (docs/kubernetes.md, "NetworkPolicy's mirror").
const (
	kindNamespace = "namespaces"
	kindPod       = "pods"
	kindPolicy    = "networkpolicies"
)

// networksAnnotation is Multus' list of a pod's secondary networks.
const networksAnnotation = "k8s.v1.cni.cncf.io/networks"

// masqPluginType is masq-cni's "type" in a CNI configuration.
const masqPluginType = "masq-cni"

type meta struct {
	Namespace string            `json:"namespace,omitempty"`
	Name      string            `json:"name"`
	Labels    map[string]string `json:"labels"`
}

type labelled struct {
	Metadata meta `json:"metadata"`
}

type policyMeta struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

type policyObject struct {
	APIVersion string                         `json:"apiVersion"`
	Kind       string                         `json:"kind"`
	Metadata   policyMeta                     `json:"metadata"`
	Spec       networkingv1.NetworkPolicySpec `json:"spec"`
}

// objectKey is the key below {prefix}/k8s/ of kind's object ns/name (ns
// empty for a Namespace). Names are DNS labels or subdomains: no '/'.
func objectKey(kind, ns, name string) string {
	if ns == "" {
		return kind + "/" + name
	}
	return kind + "/" + ns + "/" + name
}

func labelsOrEmpty(l map[string]string) map[string]string {
	if l == nil {
		return map[string]string{}
	}
	return l
}

func namespaceValue(ns *corev1.Namespace) ([]byte, error) {
	return json.Marshal(labelled{Metadata: meta{Name: ns.Name, Labels: labelsOrEmpty(ns.Labels)}})
}

func podValue(pod *corev1.Pod) ([]byte, error) {
	return json.Marshal(labelled{Metadata: meta{Namespace: pod.Namespace, Name: pod.Name,
		Labels: labelsOrEmpty(pod.Labels)}})
}

// policyValue: the object as the API gives it, less its status, labels,
// annotations and managedFields (nothing NetworkPolicy's meaning reads).
func policyValue(np *networkingv1.NetworkPolicy) ([]byte, error) {
	return json.Marshal(policyObject{
		APIVersion: "networking.k8s.io/v1",
		Kind:       "NetworkPolicy",
		Metadata:   policyMeta{Namespace: np.Namespace, Name: np.Name},
		Spec:       np.Spec,
	})
}

// podNetwork is one item of the networks annotation's JSON form.
type podNetwork struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// podNetworks: the NADs (namespace/name) a pod's networks annotation
// names, in either of Multus' forms: a JSON list of {"name",
// "namespace"}, or "[ns/]name[@interface]" comma-separated. A name
// without a namespace is the pod's own namespace's.
func podNetworks(pod *corev1.Pod) ([]string, error) {
	text, ok := pod.Annotations[networksAnnotation]
	if !ok || strings.TrimSpace(text) == "" {
		return nil, nil
	}
	var nets []podNetwork
	if strings.HasPrefix(strings.TrimSpace(text), "[") {
		if err := json.Unmarshal([]byte(text), &nets); err != nil {
			return nil, fmt.Errorf("%s: %w", networksAnnotation, err)
		}
	} else {
		for _, n := range strings.Split(text, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(n), "@")
			ns, name, found := strings.Cut(name, "/")
			if !found {
				ns, name = "", ns
			}
			nets = append(nets, podNetwork{Name: name, Namespace: ns})
		}
	}
	var out []string
	for _, n := range nets {
		ns := n.Namespace
		if ns == "" {
			ns = pod.Namespace
		}
		out = append(out, ns+"/"+n.Name)
	}
	return out, nil
}

// isMasqPod: whether one of the pod's networks is a masq NAD (masqNADs
// holds them as namespace/name). A malformed annotation attaches the pod
// to nothing (Multus refuses it too).
func isMasqPod(pod *corev1.Pod, masqNADs func(string) bool) bool {
	nets, err := podNetworks(pod)
	if err != nil {
		return false
	}
	for _, n := range nets {
		if masqNADs(n) {
			return true
		}
	}
	return false
}

// cniConfig is what a NAD's spec.config says of its plugins: a single
// plugin's configuration ("type") or a list ("plugins").
type cniConfig struct {
	Type    string `json:"type"`
	Plugins []struct {
		Type string `json:"type"`
	} `json:"plugins"`
}

// isMasqNAD: whether a NetworkAttachmentDefinition's CNI configuration
// runs masq-cni (alone or in a chain). A NAD without spec.config names a
// file on each node, which the mirror cannot read: not masq's here.
func isMasqNAD(nad *unstructured.Unstructured) bool {
	text, _, _ := unstructured.NestedString(nad.Object, "spec", "config")
	var c cniConfig
	if text == "" || json.Unmarshal([]byte(text), &c) != nil {
		return false
	}
	if c.Type == masqPluginType {
		return true
	}
	for _, p := range c.Plugins {
		if p.Type == masqPluginType {
			return true
		}
	}
	return false
}
