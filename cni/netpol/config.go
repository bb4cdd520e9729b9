package main

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// masqdConfig is the part of masqd.yaml (backend/src/config) the mirror
// reads: where etcd and masq's keys are.
type masqdConfig struct {
	Cluster *struct {
		Etcd   []string `json:"etcd"`
		Prefix string   `json:"prefix"`
	} `json:"cluster"`
}

// readEtcd: cluster.etcd and cluster.prefix (/masq by default, as
// masqd's).
func readEtcd(path string) ([]string, string, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var c masqdConfig
	if err := yaml.Unmarshal(text, &c); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if c.Cluster == nil {
		return nil, "/masq", nil
	}
	prefix := c.Cluster.Prefix
	if prefix == "" {
		prefix = "/masq"
	}
	return c.Cluster.Etcd, prefix, nil
}
