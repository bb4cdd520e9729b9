package main

// A pod's attachment to a NetworkAttachmentDefinition as Multus makes it:
// libcni (the library Multus runs delegates with) runs the NAD's chain
// with the pod's annotation as runtime arguments (its "ips" become the
// "ips" capability argument), and each plugin is a stand-in that answers
// as the real one would from the configuration libcni hands it. libcni
// gives a plugin the "ips" runtime config only when the plugin declares
// "capabilities": {"ips": true}, so a chain whose static IPAM cannot see
// the pod's address fails here as it fails on a cluster: masq-cni gets a
// prevResult with no IPv4 address. The cluster is a fresh one: no masqd
// knows the network's VNI yet, so masq-cni refuses it without "newVpc".

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
)

// podNetwork is one entry of a pod's k8s.v1.cni.cncf.io/networks
// annotation (its JSON form).
type podNetwork struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	IPs       []string `json:"ips"`
	Interface string   `json:"interface"`
}

// stand-in plugins: the configuration each one got, and its answer.
type standIns struct {
	seen map[string]map[string]any
}

func (s *standIns) FindInPath(plugin string, _ []string) (string, error) { return plugin, nil }
func (s *standIns) Decode([]byte) (version.PluginInfo, error) {
	return version.PluginSupports("1.0.0", "1.1.0"), nil
}

func (s *standIns) ExecPlugin(_ context.Context, plugin string, stdin []byte, env []string) ([]byte, error) {
	var conf map[string]any
	if err := json.Unmarshal(stdin, &conf); err != nil {
		return nil, err
	}
	s.seen[plugin] = conf
	ifname := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "CNI_IFNAME="); ok {
			ifname = v
		}
	}
	if prev, ok := conf["prevResult"].(map[string]any); ok {
		// A chained plugin: masq-cni needs the vNIC's IPv4 address.
		if plugin == "masq-cni" && !hasIPv4(prev) {
			return nil, fmt.Errorf("masq-cni: prevResult has no IPv4 address on %q (the main "+
				"plugin's IPAM got none: static IPAM takes the pod's \"ips\" only from a plugin "+
				"that declares \"capabilities\": {\"ips\": true})", ifname)
		}
		if plugin == "masq-cni" && conf["newVpc"] != true {
			return nil, fmt.Errorf("masq-cni: vni %v is not a VPC masqd knows (on a fresh "+
				"cluster none is); set \"newVpc\": true for the first endpoint of a new VPC", conf["vni"])
		}
		return json.Marshal(prev)
	}
	// The main plugin: its interface in the pod, and its IPAM's addresses.
	return json.Marshal(map[string]any{
		"cniVersion": conf["cniVersion"],
		"interfaces": []any{map[string]any{"name": ifname, "sandbox": "/var/run/netns/pod"}},
		"ips":        ipamAddresses(conf),
	})
}

// ipamAddresses: static IPAM's, from its "addresses" and the runtime
// config's "ips" (which libcni passed only if the plugin declared the
// capability); any other IPAM stands for one that finds an address itself.
func ipamAddresses(conf map[string]any) []any {
	ipam, _ := conf["ipam"].(map[string]any)
	if ipam == nil {
		return nil
	}
	if ipam["type"] != "static" {
		return []any{map[string]any{"address": "192.0.2.1/24", "interface": 0}}
	}
	var out []any
	if addrs, ok := ipam["addresses"].([]any); ok {
		for _, a := range addrs {
			if m, ok := a.(map[string]any); ok {
				out = append(out, map[string]any{"address": m["address"], "interface": 0})
			}
		}
	}
	if rc, ok := conf["runtimeConfig"].(map[string]any); ok {
		if ips, ok := rc["ips"].([]any); ok {
			for _, ip := range ips {
				out = append(out, map[string]any{"address": ip, "interface": 0})
			}
		}
	}
	return out
}

func hasIPv4(result map[string]any) bool {
	ips, _ := result["ips"].([]any)
	for _, ip := range ips {
		if m, ok := ip.(map[string]any); ok {
			if a, ok := m["address"].(string); ok && strings.Count(a, ".") == 3 {
				return true
			}
		}
	}
	return false
}

// attach runs NAD config's chain for a pod (namespace/name) with one entry
// of its networks annotation, as Multus would; an error says which plugin
// failed and why.
func attach(config string, namespace, pod string, n podNetwork) error {
	list, err := libcni.ConfListFromBytes([]byte(config))
	if err != nil {
		return err
	}
	cache, err := os.MkdirTemp("", "check-manifests-cni-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cache)
	ifname := n.Interface
	if ifname == "" {
		ifname = "net1" // Multus' first secondary network
	}
	rt := &libcni.RuntimeConf{
		ContainerID: "0123456789abcdef",
		NetNS:       "/var/run/netns/pod",
		IfName:      ifname,
		Args: [][2]string{{"IgnoreUnknown", "true"}, {"K8S_POD_NAMESPACE", namespace},
			{"K8S_POD_NAME", pod}},
		CapabilityArgs: map[string]any{},
	}
	if len(n.IPs) > 0 {
		rt.CapabilityArgs["ips"] = n.IPs
	}
	s := &standIns{seen: map[string]map[string]any{}}
	_, err = libcni.NewCNIConfigWithCacheDir(nil, cache, s).AddNetworkList(context.Background(), list, rt)
	return err
}
