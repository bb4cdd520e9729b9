package main

import (
	"fmt"
	"net"
	"os"

	"sigs.k8s.io/yaml"
)

// masqdConfig is the part of masqd.yaml (backend/src/config) the signer
// reads: the first rail's underlay, whose address is the host's identity,
// and where etcd and masq's keys are. Everything else is masqd's.
type masqdConfig struct {
	Underlay *underlay `json:"underlay"`
	Rails    []struct {
		Underlay *underlay `json:"underlay"`
	} `json:"rails"`
	Cluster *struct {
		Etcd   []string `json:"etcd"`
		Prefix string   `json:"prefix"`
	} `json:"cluster"`
}

type underlay struct {
	Netdev string `json:"netdev"`
	IP     string `json:"ip"`
}

func readMasqdConfig(path string) (*masqdConfig, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c masqdConfig
	if err := yaml.Unmarshal(text, &c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &c, nil
}

// firstUnderlay: `underlay:`, or the first of `rails:`, as masqd takes it.
func (c *masqdConfig) firstUnderlay() (*underlay, error) {
	if c.Underlay != nil {
		return c.Underlay, nil
	}
	if len(c.Rails) > 0 && c.Rails[0].Underlay != nil {
		return c.Rails[0].Underlay, nil
	}
	return nil, fmt.Errorf("neither underlay: nor rails: is given")
}

// underlayIP is the address masqd takes as this host's: underlay.ip if
// given, else the netdev's first IPv4 address (backend/src/config/rails.rs).
func (c *masqdConfig) underlayIP() (net.IP, error) {
	u, err := c.firstUnderlay()
	if err != nil {
		return nil, err
	}
	if u.IP != "" && u.IP != "0.0.0.0" {
		ip := net.ParseIP(u.IP).To4()
		if ip == nil {
			return nil, fmt.Errorf("underlay.ip: %q is not an IPv4 address", u.IP)
		}
		return ip, nil
	}
	if u.Netdev == "" {
		return nil, fmt.Errorf("underlay: neither ip nor netdev is given")
	}
	ifc, err := net.InterfaceByName(u.Netdev)
	if err != nil {
		return nil, fmt.Errorf("underlay.netdev %s: %w", u.Netdev, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return nil, fmt.Errorf("underlay.netdev %s: %w", u.Netdev, err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
			return n.IP.To4(), nil
		}
	}
	return nil, fmt.Errorf("underlay.netdev %s has no IPv4 address (give underlay.ip, or address the netdev first)", u.Netdev)
}

// etcd and prefix from cluster: (prefix /masq by default, as masqd's).
func (c *masqdConfig) etcd() ([]string, string) {
	if c.Cluster == nil {
		return nil, "/masq"
	}
	prefix := c.Cluster.Prefix
	if prefix == "" {
		prefix = "/masq"
	}
	return c.Cluster.Etcd, prefix
}
