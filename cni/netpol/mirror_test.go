package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func testNamespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func testPod(ns, name, networks string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: "node1"}, Status: corev1.PodStatus{PodIP: "192.168.0.9"}}
	if networks != "" {
		p.Annotations = map[string]string{networksAnnotation: networks}
	}
	return p
}

const masqChain = `{"cniVersion":"1.0.0","name":"acme100","plugins":[{"type":"bridge"},{"type":"masq-cni","vni":100}]}`
const bridgeOnly = `{"cniVersion":"1.0.0","name":"plain","plugins":[{"type":"bridge"}]}`

// keysBelow: etcd's keys below prefix, sorted.
func keysBelow(t *testing.T, c *clientv3.Client, prefix string) []string {
	var out []string
	for k := range all(t, c) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, strings.TrimPrefix(k, prefix))
		}
	}
	sort.Strings(out)
	return out
}

func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func labelsOf(t *testing.T, value string) map[string]string {
	var v labelled
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		t.Fatalf("%q: %v", value, err)
	}
	return v.Metadata.Labels
}

// The mirror against client-go's fake API server and a real etcd: the
// first sync writes namespaces, masq pods (and no other pod) and policies
// and deletes what etcd held of objects gone; a label change, a deleted
// policy, a NAD that becomes masq's and a deleted pod each reach etcd;
// a key planted below k8s/ goes at the next resync; nothing outside
// {prefix}/k8s/ is ever touched.
func TestTheMirrorFollowsTheAPIAndTouchesNothingElse(t *testing.T) {
	etcd := startEtcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// What etcd holds before: masq's own keys and a neighbour's, which
	// stay; stale mirrored keys, which go.
	outside := map[string]string{
		"/masq/policy":             `{"text":"version: 1\n"}`,
		"/masq/hosts/198.18.0.1":   "h1",
		"/masq/k8sx/other":         "not the mirror's",
		"/other/k8s/pods/team/srv": "another prefix",
		"/masq/k8s":                "the bare prefix, not below it",
	}
	for k, v := range outside {
		_, err := etcd.Put(ctx, k, v)
		must(t, err)
	}
	for _, k := range []string{"pods/team/gone", "networkpolicies/old/p", "namespaces/old", "unknown/kind"} {
		_, err := etcd.Put(ctx, "/masq/k8s/"+k, "stale")
		must(t, err)
	}

	client := fake.NewClientset(
		testNamespace("team", map[string]string{"team": "a"}), testNamespace("other", nil),
		testPod("team", "srv", `[{"name":"acme100","ips":["10.0.0.60/24"]}]`, map[string]string{"app": "srv"}),
		testPod("other", "cli", "team/acme100@net1", map[string]string{"app": "cli"}),
		testPod("team", "web", "plain", map[string]string{"app": "web"}),
		testPod("team", "bare", "", map[string]string{"app": "bare"}),
		testPolicy(),
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "deny"}},
	)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{nadResource: "NetworkAttachmentDefinitionList"})
	// Made through the client: the fake's initial objects would be filed
	// under a resource guessed from the kind, without the hyphens.
	for _, n := range []*unstructured.Unstructured{nad("team", "acme100", masqChain), nad("team", "plain", bridgeOnly)} {
		_, err := dyn.Resource(nadResource).Namespace("team").Create(ctx, n, metav1.CreateOptions{})
		must(t, err)
	}
	st := newStore(etcd, "/masq")
	st.maxOps = 2 // several transactions per resync
	m, start, err := newMirror(client, dyn, st, mirrorArgs{})
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- m.run(ctx, start) }()

	want := []string{"namespaces/other", "namespaces/team", "networkpolicies/other/deny",
		"networkpolicies/team/allow-app", "pods/other/cli", "pods/team/srv"}
	until(t, "the first sync", func() bool { return fmt.Sprint(keysBelow(t, etcd, "/masq/k8s/")) == fmt.Sprint(want) })
	got := all(t, etcd)
	if l := labelsOf(t, got["/masq/k8s/pods/team/srv"]); l["app"] != "srv" || len(l) != 1 {
		t.Errorf("srv's labels %v", l)
	}
	if v, _ := policyValue(testPolicy()); got["/masq/k8s/networkpolicies/team/allow-app"] != string(v) {
		t.Errorf("the policy: %s", got["/masq/k8s/networkpolicies/team/allow-app"])
	}

	// A label change.
	pods := client.CoreV1().Pods("team")
	srv, err := pods.Get(ctx, "srv", metav1.GetOptions{})
	must(t, err)
	srv.Labels = map[string]string{"app": "srv", "tier": "a"}
	_, err = pods.Update(ctx, srv, metav1.UpdateOptions{})
	must(t, err)
	until(t, "srv's new label", func() bool {
		return labelsOf(t, all(t, etcd)["/masq/k8s/pods/team/srv"])["tier"] == "a"
	})
	ns, err := client.CoreV1().Namespaces().Get(ctx, "other", metav1.GetOptions{})
	must(t, err)
	ns.Labels = map[string]string{"team": "b"}
	_, err = client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	must(t, err)
	until(t, "other's new label", func() bool {
		return labelsOf(t, all(t, etcd)["/masq/k8s/namespaces/other"])["team"] == "b"
	})

	// A deleted policy, and a deleted pod.
	must(t, client.NetworkingV1().NetworkPolicies("team").Delete(ctx, "allow-app", metav1.DeleteOptions{}))
	until(t, "the policy's key deleted", func() bool {
		_, ok := all(t, etcd)["/masq/k8s/networkpolicies/team/allow-app"]
		return !ok
	})
	must(t, client.CoreV1().Pods("other").Delete(ctx, "cli", metav1.DeleteOptions{}))
	until(t, "cli's key deleted", func() bool {
		_, ok := all(t, etcd)["/masq/k8s/pods/other/cli"]
		return !ok
	})

	// A non-masq pod is not mirrored until its network becomes masq's.
	if _, ok := all(t, etcd)["/masq/k8s/pods/team/web"]; ok {
		t.Fatal("web, on a bridge-only network, was mirrored")
	}
	_, err = dyn.Resource(nadResource).Namespace("team").Update(ctx, nad("team", "plain", masqChain), metav1.UpdateOptions{})
	must(t, err)
	until(t, "web mirrored once plain runs masq-cni", func() bool {
		_, ok := all(t, etcd)["/masq/k8s/pods/team/web"]
		return ok
	})

	// A key planted below k8s/ (a restored backup, a hand's write) goes
	// at the next resync.
	_, err = etcd.Put(ctx, "/masq/k8s/pods/team/ghost", "x")
	must(t, err)
	m.queue.Add(resyncItem)
	until(t, "the ghost deleted by a resync", func() bool {
		_, ok := all(t, etcd)["/masq/k8s/pods/team/ghost"]
		return !ok
	})

	cancel()
	if err := <-done; err != context.Canceled {
		t.Errorf("run returned %v", err)
	}
	final := all(t, etcd)
	for k, v := range outside {
		if final[k] != v {
			t.Errorf("%s: %q, was %q", k, final[k], v)
		}
	}
	for k := range final {
		if _, ok := outside[k]; !ok && !strings.HasPrefix(k, "/masq/k8s/") {
			t.Errorf("%s written outside /masq/k8s/", k)
		}
	}
	want = []string{"namespaces/other", "namespaces/team", "networkpolicies/other/deny", "pods/team/srv", "pods/team/web"}
	if got := keysBelow(t, etcd, "/masq/k8s/"); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("below /masq/k8s/: %v, want %v", got, want)
	}
}

// A resync writes one etcd transaction per batch: etcd's revision moves
// once per batch, not once per key.
func TestAResyncIsOneTransactionPerBatch(t *testing.T) {
	etcd := startEtcd(t)
	ctx := context.Background()
	st := newStore(etcd, "/masq")
	st.maxOps = 4
	var cs []change
	for i := 0; i < 10; i++ {
		cs = append(cs, change{rel: fmt.Sprintf("pods/team/p%d", i), value: []byte("{}")})
	}
	before, err := etcd.Get(ctx, "/")
	must(t, err)
	n, err := st.apply(ctx, cs)
	must(t, err)
	after, err := etcd.Get(ctx, "/")
	must(t, err)
	if n != 3 || after.Header.Revision-before.Header.Revision != 3 {
		t.Fatalf("%d transactions, revision %d -> %d", n, before.Header.Revision, after.Header.Revision)
	}
	have, err := st.list(ctx)
	must(t, err)
	if len(have) != 10 {
		t.Fatalf("listed %d", len(have))
	}
}
