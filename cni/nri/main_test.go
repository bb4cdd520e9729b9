package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
)

// fakeMasqd serves masqd's control socket: each request is counted, and
// answered with reply (or never, when reply is "").
type fakeMasqd struct {
	socket   string
	requests atomic.Int32
	last     atomic.Value // the last request line
}

func newFakeMasqd(t *testing.T, reply string) *fakeMasqd {
	t.Helper()
	f := &fakeMasqd{socket: filepath.Join(t.TempDir(), "control.sock")}
	l, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			f.requests.Add(1)
			go func() {
				line, _ := bufio.NewReader(c).ReadString('\n')
				f.last.Store(line)
				if reply == "" {
					time.Sleep(10 * time.Second) // a masqd that hangs
				} else {
					c.Write([]byte(reply + "\n"))
				}
				c.Close()
			}()
		}
	}()
	return f
}

// node is one node's masq-nri with masq-cni's marker directory.
func node(t *testing.T, socket string) *plugin {
	return &plugin{
		masqd:   &masqd{socket: socket, timeout: 300 * time.Millisecond},
		pods:    filepath.Join(t.TempDir(), "pods"),
		ignored: namespaces("masq-system"),
	}
}

// mark leaves the marker masq-cni's ADD leaves for an attachment.
func mark(t *testing.T, p *plugin, sandbox, ifname string) {
	t.Helper()
	dir := filepath.Join(p.pods, sandbox)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	b := `{"network":"acme100","tenant":"acme","vni":100}`
	if err := os.WriteFile(filepath.Join(dir, ifname), []byte(b), 0o600); err != nil {
		t.Fatal(err)
	}
}

func create(p *plugin, ns, name, sandbox string) (*api.ContainerAdjustment, time.Duration, error) {
	pod := &api.PodSandbox{Id: sandbox, Namespace: ns, Name: name, Pid: 42}
	start := time.Now()
	adj, _, err := p.CreateContainer(context.Background(), pod, &api.Container{Name: "app"})
	return adj, time.Since(start), err
}

// A node whose masqd is down or hangs still creates every container of a
// pod that did not ask for masq, at once and without asking masqd; so do
// the pods of masq-system (masqd's own), markers or not.
func TestAPodThatDidNotAskForMasqIsNeverFailedAndNeverWaits(t *testing.T) {
	hung := newFakeMasqd(t, "")
	for _, socket := range []string{hung.socket, filepath.Join(t.TempDir(), "none.sock")} {
		p := node(t, socket)
		adj, took, err := create(p, "kube-system", "kube-proxy-x", "sandbox-a")
		if err != nil || adj != nil || took > 100*time.Millisecond {
			t.Fatalf("an ordinary pod: %v, %v, %s", adj, err, took)
		}
		mark(t, p, "sandbox-m", "net1")
		adj, _, err = create(p, "masq-system", "masqd-x", "sandbox-m")
		if err != nil || adj != nil {
			t.Fatalf("a masq-system pod: %v, %v", adj, err)
		}
	}
	if n := hung.requests.Load(); n != 0 {
		t.Fatalf("masqd was asked %d times", n)
	}
}

// A pod that asked for masq fails, within masq-nri's deadline (below the
// runtime's 2 s), with an error naming its network and why.
func TestAMasqPodThatCannotHaveItFailsInTimeNamingWhy(t *testing.T) {
	if defaultTimeout >= 2*time.Second {
		t.Fatalf("the default timeout %s is not below containerd's NRI request timeout (2 s)", defaultTimeout)
	}
	for _, c := range []struct {
		socket string
		says   string
	}{
		{filepath.Join(t.TempDir(), "none.sock"), "cannot reach masqd at "},
		{newFakeMasqd(t, "").socket, "did not answer within 300ms"},
		{newFakeMasqd(t, `{"error":"cgroup /kubepods is shared with another pod"}`).socket,
			"masqd: cgroup /kubepods is shared"},
		{newFakeMasqd(t, `{"endpoints":[],"cgroup":""}`).socket, "has no endpoint for sandbox sandbox-m"},
	} {
		p := node(t, c.socket)
		mark(t, p, "sandbox-m", "net1")
		adj, took, err := create(p, "team", "srv", "sandbox-m")
		if err == nil || adj != nil {
			t.Fatalf("%s: created: %v", c.says, adj)
		}
		want := "pod team/srv container app asked for masq (network acme100 (tenant acme, vni 100) on net1) and cannot have it: "
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("want %q and %q in: %v", want, c.says, err)
		}
		if took > time.Second {
			t.Errorf("%s: took %s", c.says, took)
		}
	}
}

// A pod that asked gets its endpoints' devices, masqd asked about its
// sandbox and process.
func TestAMasqPodGetsItsDevices(t *testing.T) {
	m := newFakeMasqd(t, `{"endpoints":["team.srv","team.srv-net2"],"cgroup":"/kubepods/pod1"}`)
	p := node(t, m.socket)
	mark(t, p, "sandbox-m", "net1")
	adj, _, err := create(p, "team", "srv", "sandbox-m")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range adj.GetCDIDevices() {
		got = append(got, d.GetName())
	}
	if strings.Join(got, " ") != "masq.io/endpoint=team.srv masq.io/endpoint=team.srv-net2" {
		t.Fatalf("devices %v", got)
	}
	var req map[string]any
	if err := json.Unmarshal([]byte(m.last.Load().(string)), &req); err != nil {
		t.Fatal(err)
	}
	if req["cmd"] != "endpoint_pod" || req["sandbox"] != "sandbox-m" || req["pid"] != 42.0 {
		t.Fatalf("request %v", req)
	}
}

// Markers are read beneath the directory only; masq-cni's temporary files
// are not markers.
func TestMarkersAreReadBeneathTheirDirectoryOnly(t *testing.T) {
	dir := t.TempDir()
	for _, id := range []string{"", ".", "..", "../x", "a/b"} {
		if _, err := askedFor(dir, id); err == nil {
			t.Errorf("sandbox ID %q was accepted", id)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "s1"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "s1", ".eth0.tmp"), nil, 0o600)
	if a, err := askedFor(dir, "s1"); err != nil || len(a) != 0 {
		t.Fatalf("%v %v", a, err)
	}
	os.WriteFile(filepath.Join(dir, "s1", "net1"), []byte("not json"), 0o600)
	if a, err := askedFor(dir, "s1"); err != nil || len(a) != 1 || a[0].Network != "?" {
		t.Fatalf("an unreadable marker still says the pod asked: %v %v", a, err)
	}
}
