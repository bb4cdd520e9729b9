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
	if _, err := exec.LookPath("etcd"); err != nil {
		t.Skip("SKIPPED: no etcd on PATH; `make deps` installs etcd-server")
	}
	dir := t.TempDir()
	client := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	peer := "http://127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command("etcd", "--name", "t", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "t="+peer)
	if err := cmd.Start(); err != nil {
		t.Fatalf("etcd: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{client}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Get(ctx, "/")
		cancel()
		if err == nil {
			return c
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
