package main

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The command line: -h is help (exit 0), a mistake names itself (exit
// 2), and etcd and the prefix come from masqd's config unless given.
func TestTheCommandLine(t *testing.T) {
	null, err := os.Open(os.DevNull)
	must(t, err)
	defer null.Close()
	if _, err := parseArgs([]string{"-h"}, null); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	config := filepath.Join(t.TempDir(), "masqd.yaml")
	must(t, os.WriteFile(config, []byte("cluster:\n  etcd: [https://10.1.0.1:2379]\n  prefix: /p\n"), 0o644))
	a, err := parseArgs([]string{"--config", config}, null)
	must(t, err)
	must(t, a.resolve())
	if strings.Join(a.etcd, ",") != "https://10.1.0.1:2379" || a.prefix != "/p" || a.maxOps != 100 {
		t.Fatalf("%+v", a)
	}
	a, err = parseArgs([]string{"--config", "/nonexistent", "--etcd", "https://e:1,https://e:2", "--prefix", "/q"}, null)
	must(t, err)
	must(t, a.resolve())
	if len(a.etcd) != 2 || a.prefix != "/q" {
		t.Fatalf("%+v", a)
	}
	noEtcd := filepath.Join(t.TempDir(), "masqd.yaml")
	must(t, os.WriteFile(noEtcd, []byte("device: rxe0\n"), 0o644))
	for _, c := range []struct {
		argv []string
		says string
	}{
		{[]string{"--config", config, "extra"}, `unexpected argument "extra"`},
		{[]string{"--config", config, "--prefix", "/p/"}, "must start with '/' and not end with one"},
		{[]string{"--config", config, "--txn-ops", "0"}, "--txn-ops 0"},
		{[]string{"--config", noEtcd}, "no etcd URL"},
		{[]string{"--config", "/nonexistent"}, "masqd's config"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	} {
		a, err := parseArgs(c.argv, null)
		if err == nil {
			err = a.resolve()
		}
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%v: %v, want %q", c.argv, err, c.says)
		}
	}
}
