package main

// Whether a pod asked for masq, from the pod itself and without masqd:
// masq-cni's CNI ADD, which runs for the pod's sandbox before any of its
// containers is created, leaves a marker for each masq attachment in
// <pods>/<sandbox ID>/<ifname> (a root-owned directory beside masqd's
// control socket that no tenant mounts) and its DEL removes it
// (backend/src/operator/pod_markers.rs). A pod with no marker did not ask, and
// masq-nri leaves it alone without asking masqd anything.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// attachment is one marker: the masq network a CNI ADD attached the pod to.
type attachment struct {
	Ifname  string `json:"-"`
	Network string `json:"network"`
	Tenant  string `json:"tenant"`
	VNI     uint32 `json:"vni"`
}

func (a attachment) String() string {
	return fmt.Sprintf("network %s (tenant %s, vni %d) on %s", a.Network, a.Tenant, a.VNI, a.Ifname)
}

// safeName: a runtime's sandbox ID is a plain name (the CNI specification's
// container ID alphabet); anything that could leave the directory is not.
func safeName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// askedFor lists the masq attachments masq-cni made for pod sandbox
// sandboxID; none when the pod did not ask for masq. An error says the
// markers could not be read (not that the pod asked).
func askedFor(dir, sandboxID string) ([]attachment, error) {
	if !safeName(sandboxID) {
		return nil, fmt.Errorf("sandbox ID %q is not a plain name", sandboxID)
	}
	at := filepath.Join(dir, sandboxID)
	entries, err := os.ReadDir(at)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []attachment
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue // masq-cni's temporary files start with "."
		}
		a := attachment{Ifname: e.Name(), Network: "?", Tenant: "?"}
		// A marker that cannot be read still says the pod asked.
		if b, err := os.ReadFile(filepath.Join(at, e.Name())); err == nil {
			_ = json.Unmarshal(b, &a)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Ifname < out[j].Ifname })
	return out, nil
}
