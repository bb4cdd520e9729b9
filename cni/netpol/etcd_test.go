package main

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startEtcd runs a real etcd on a temporary directory and free loopback
// ports (plain HTTP: the mirror's logic, not its TLS, is under test) and
// returns a client of it; both end with the test. Skipped, saying so,
// where no etcd binary is installed (`make deps` installs etcd-server).
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	url := runEtcd(t, "http", nil)
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	waitAnswers(t, c)
	return c
}

// runEtcd starts etcd on scheme (http, or https with extra's TLS flags)
// and returns its client URL.
func runEtcd(t *testing.T, scheme string, extra []string) string {
	t.Helper()
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("SKIPPED: no etcd on PATH; `make deps` installs etcd-server")
	}
	dir := t.TempDir()
	client := scheme + "://127.0.0.1:" + strconv.Itoa(freePort(t))
	peer := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command("etcd", append([]string{"--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t=" + peer},
		extra...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return client
}

// waitAnswers waits until etcd answers c.
func waitAnswers(t *testing.T, c *clientv3.Client) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Get(ctx, "/")
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not answer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// all: every key in etcd, as key -> value.
func all(t *testing.T, c *clientv3.Client) map[string]string {
	t.Helper()
	resp, err := c.Get(context.Background(), "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = string(kv.Value)
	}
	return out
}

// The mirror's own client (its certificate and the cluster's CA, as
// masq-netpol starts it) against an etcd that requires client
// certificates (integration/make-pki's CA, as the Rust tests use).
func TestTheMirrorsCertificateReachesEtcdOverTLS(t *testing.T) {
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	out, err := exec.Command("../../integration/make-pki", filepath.Join(dir, "ca"), pki,
		"t=127.0.0.1", "masq-netpol").CombinedOutput()
	if err != nil {
		t.Fatalf("integration/make-pki: %v: %s", err, out)
	}
	url := runEtcd(t, "https", []string{"--cert-file", filepath.Join(pki, "t.pem"), "--key-file",
		filepath.Join(pki, "t-key.pem"), "--trusted-ca-file", filepath.Join(pki, "ca.pem"), "--client-cert-auth"})
	a := &args{etcd: []string{url}, prefix: "/masq", ca: filepath.Join(pki, "ca.pem"),
		cert: filepath.Join(pki, "masq-netpol.pem"), key: filepath.Join(pki, "masq-netpol-key.pem")}
	c, err := etcdClient(a)
	must(t, err)
	defer c.Close()
	waitAnswers(t, c)
	must(t, newStore(c, a.prefix).write(context.Background(), change{rel: "namespaces/team", value: []byte("{}")}))
	a.cert = filepath.Join(pki, "t.pem")
	a.key = filepath.Join(pki, "masq-netpol-key.pem")
	if _, err := etcdClient(a); err == nil {
		t.Error("a certificate with another's key was taken")
	}
}
