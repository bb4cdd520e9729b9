package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The underlay IP is found as masqd finds it: underlay.ip, else the
// netdev's first IPv4 address, from `underlay:` or the first rail; etcd
// and the prefix come from cluster:, the prefix /masq by default.
func TestMasqdConfigGivesTheUnderlayIPAsMasqdFindsIt(t *testing.T) {
	cases := []struct{ text, want, wantErr string }{
		{"underlay: { netdev: ens1, ip: 10.1.0.5 }\n", "10.1.0.5", ""},
		{"underlay: { netdev: lo }\n", "127.0.0.1", ""},
		{"rails:\n  - device: mlx5_0\n    underlay: { netdev: lo }\n", "127.0.0.1", ""},
		{"underlay: { netdev: nosuch0 }\n", "", "underlay.netdev nosuch0"},
		{"underlay: { ip: fd00::1 }\n", "", "not an IPv4 address"},
		{"device: mlx5_0\n", "", "neither underlay: nor rails:"},
	}
	dir := t.TempDir()
	for i, tc := range cases {
		path := filepath.Join(dir, "masqd.yaml")
		must(t, os.WriteFile(path, []byte(tc.text), 0o644))
		cfg, err := readMasqdConfig(path)
		must(t, err)
		ip, err := cfg.underlayIP()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("case %d: %v, want %q", i, err, tc.wantErr)
			}
			continue
		}
		if err != nil || ip.String() != tc.want {
			t.Errorf("case %d: %v %v, want %s", i, ip, err, tc.want)
		}
	}

	must(t, os.WriteFile(filepath.Join(dir, "c.yaml"),
		[]byte("cluster:\n  etcd: [\"https://10.1.0.10:2379\"]\n  tls: { ca: a }\n"), 0o644))
	cfg, err := readMasqdConfig(filepath.Join(dir, "c.yaml"))
	must(t, err)
	urls, prefix := cfg.etcd()
	if !slices.Equal(urls, []string{"https://10.1.0.10:2379"}) || prefix != "/masq" {
		t.Errorf("etcd %v, prefix %q", urls, prefix)
	}
}

// The node's etcd role is made as `masqctl cluster init-auth` makes a
// host's, with the root's certificate and the operator's name.
func TestInitAuthIsRunAsEtcdsRootForTheNodesNameAndIP(t *testing.T) {
	a := controllerArgs{caCert: "/s/ca.pem", rootCert: "/s/root.pem", rootKey: "/s/root-key.pem",
		etcd: []string{"https://a:2379", "https://b:2379"}, prefix: "/masq", operator: "operator"}
	got := strings.Join(initAuthArgs(a, "node1=10.1.0.1"), " ")
	want := "cluster init-auth --etcd https://a:2379,https://b:2379 --ca /s/ca.pem --cert /s/root.pem " +
		"--key /s/root-key.pem --prefix /masq --operator operator node1=10.1.0.1"
	if got != want {
		t.Errorf("masqctl %s\nwant    %s", got, want)
	}
}
