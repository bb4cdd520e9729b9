package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The repository's files pass; each kind of mistake in a copy is found and
// named, so the check cannot pass by looking at nothing.
func TestTheDeployFilesPassAndEachMistakeIsNamed(t *testing.T) {
	for _, dir := range []string{"..", "../example"} {
		n, bad := checkDir(dir)
		if len(bad) > 0 || n == 0 {
			t.Fatalf("%s: %d objects, %v", dir, n, bad)
		}
	}
	for _, c := range []struct{ file, from, to, says string }{
		{"daemonset.yaml", "hostPID: true", "hostPID: true\n      hostPIDs: true", `unknown field "spec.template.spec.hostPIDs"`},
		{"daemonset.yaml", "maxUnavailable: 1", "maxUnavailable: [1]", "maxUnavailable"},
		// A node without its PKI or with NRI off must not wedge masqd's pod.
		{"daemonset.yaml", "path: /etc/masq/pki, type: DirectoryOrCreate", "path: /etc/masq/pki, type: Directory",
			"volume pki: hostPath /etc/masq/pki of type Directory: a node without it keeps the pod in FailedMount"},
		{"daemonset.yaml", "path: /var/run/nri, type: DirectoryOrCreate", "path: /var/run/nri, type: Directory",
			"volume nri: hostPath /var/run/nri of type Directory"},
		{"example/network.yaml", `"newVpc": true }`, `"newVpc": true, }`, "spec.config"},
		// On a fresh cluster no masqd knows VNI 100 yet.
		{"example/network.yaml", `, "newVpc": true`, "",
			`Pod team/srv: network team/acme100 as Multus attaches it: plugin type="masq-cni" failed (add): masq-cni: vni 100 is not a VPC masqd knows`},
		{"example/network.yaml", "name: acme100", "name: acme200", `network "acme100", not the object's name "acme200"`},
		{"example/pods.yaml", "restartPolicy: Never", "restartPolicy: 7", "restartPolicy"},
		// Multus' ips reach static IPAM only through the declared capability.
		{"example/network.yaml", `"capabilities": { "ips": true }, `, "",
			`Pod team/srv: network team/acme100 as Multus attaches it: plugin type="masq-cni" failed (add): masq-cni: prevResult has no IPv4 address on "net1"`},
		{"example/pods.yaml", `"ips": ["10.0.0.61/24"]`, `"ips": []`, "Pod team/cli: network team/acme100"},
		{"example/pods.yaml", `[{"name": "acme100", "ips": ["10.0.0.61/24"]}]`, `[{"name": "acme100", "ips": "x"}]`, "k8s.v1.cni.cncf.io/networks"},
		{"kustomization.yaml", "- daemonset.yaml", "- daemonsets.yaml", "kustomize"},
		// Only masq-signer join holds a token; masqd and masq-nri none.
		{"daemonset.yaml", "- { name: run-masq, mountPath: /run/masq, readOnly: true }",
			"- { name: run-masq, mountPath: /run/masq, readOnly: true }\n            - { name: join-token, mountPath: /var/run/secrets/kubernetes.io/serviceaccount }",
			"container masq-nri mounts join-token, a service-account token"},
		{"daemonset.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: true",
			"automountServiceAccountToken is not false"},
		{"signer.yaml", "defaultMode: 256", "defaultMode: 256x", "defaultMode"},
	} {
		root := t.TempDir()
		copyTree(t, "..", root)
		path := filepath.Join(root, c.file)
		text, err := os.ReadFile(path)
		if err != nil || !strings.Contains(string(text), c.from) {
			t.Fatalf("%s has no %q (%v)", c.file, c.from, err)
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(text), c.from, c.to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		_, bad := checkDir(filepath.Join(root, filepath.Dir(c.file)))
		if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), c.says) {
			t.Errorf("%s: %q -> %q: want an error saying %q, got %v", c.file, c.from, c.to, c.says, bad)
		}
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			if rel == "check" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
