package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// One CSR through the controller's handling against client-go's fake
// clientset, masqctl a script: a refusal is Denied with its check as the
// reason; a failing init-auth leaves the CSR unapproved and unsigned, the
// IP recorded; once init-auth works it is approved, signed, and the
// script was run for N=IP; a second node asking for that IP is denied.
func TestControllerDeniesOrMakesTheRoleBeforeSigning(t *testing.T) {
	dir, masqctl, ran := fakeMasqctl(t, "masq-host-node1")

	good := makeCSR(t, csrSpec{})
	good.Name = "good"
	stranger := makeCSR(t, csrSpec{username: "system:serviceaccount:default:default"})
	stranger.Name = "stranger"
	thief := makeCSR(t, csrSpec{cn: "node2", nodes: []string{"node2"}})
	thief.Name = "thief"
	client := fake.NewClientset(good, stranger, thief,
		testNode("node1", nil, "10.1.0.1"), testNode("node2", nil, "10.1.0.2", "10.1.0.1"),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "masq-node-ips", Namespace: "masq-system"}})
	c := &controller{
		args: controllerArgs{etcd: []string{"https://e:2379"}, prefix: "/masq", operator: "operator",
			masqctl: masqctl, namespace: "masq-system", holders: "masq-node-ips", policy: testPolicy},
		client: client,
		ca:     testCA(t, 10*365*24*time.Hour),
	}
	ctx := context.Background()
	get := csrGetter(ctx, t, client)

	must(t, c.handle(ctx, "stranger"))
	if conds := get("stranger").Status.Conditions; len(conds) != 1 || conds[0].Type != certv1.CertificateDenied ||
		conds[0].Reason != "RequestorNotMasqd" {
		t.Fatalf("stranger: %+v", conds)
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
	if parseCert(t, csr.Status.Certificate).Subject.CommonName != "node1" {
		t.Error("signed for another name")
	}
	text, err := os.ReadFile(ran)
	must(t, err)
	if !strings.Contains(string(text), "cluster init-auth --etcd https://e:2379") ||
		!strings.HasSuffix(strings.TrimSpace(string(text)), "node1=10.1.0.1") {
		t.Errorf("masqctl ran %q", text)
	}
	cm, err := client.CoreV1().ConfigMaps("masq-system").Get(ctx, "masq-node-ips", metav1.GetOptions{})
	must(t, err)
	if cm.Data["10.1.0.1"] != "node1" {
		t.Errorf("holders %v", cm.Data)
	}

	must(t, c.handle(ctx, "thief"))
	if conds := get("thief").Status.Conditions; len(conds) != 1 || conds[0].Reason != "IPHeldByOtherNode" {
		t.Fatalf("thief: %+v", conds)
	}
}

// fakeMasqctl: a masqctl script in a temporary directory that records its
// arguments in ran and fails, saying "etcd unreachable", while dir/fail
// exists (it does at first), else says it added role.
func fakeMasqctl(t *testing.T, role string) (dir, masqctl, ran string) {
	dir = t.TempDir()
	masqctl = filepath.Join(dir, "masqctl")
	ran = filepath.Join(dir, "ran")
	script := "#!/bin/sh\necho \"$@\" >>" + ran + "\n[ -e " + dir + "/fail ] && { echo etcd unreachable >&2; exit 1; }\n" +
		"echo role " + role + " added\n"
	must(t, os.WriteFile(masqctl, []byte(script), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "fail"), nil, 0o644))
	return dir, masqctl, ran
}

// csrGetter: the CSR of that name as the fake API server has it now.
func csrGetter(ctx context.Context, t *testing.T, client *fake.Clientset) func(string) *certv1.CertificateSigningRequest {
	return func(name string) *certv1.CertificateSigningRequest {
		csr, err := client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		return csr
	}
}
