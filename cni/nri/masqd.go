package main

// masqd's control socket: one JSON request line, one JSON reply line
// (backend/src/operator/control.rs). masq-nri asks two things: which
// endpoint a pod is, and to filter the pod's cgroup as that endpoint's.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

type masqd struct {
	socket  string
	timeout time.Duration
}

// call sends req and decodes the reply into out; a reply with "error" is
// an error naming what masqd said.
func (m *masqd) call(req map[string]any, out any) error {
	conn, err := net.DialTimeout("unix", m.socket, m.timeout)
	if err != nil {
		return fmt.Errorf("cannot reach masqd at %s: %w", m.socket, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(m.timeout)); err != nil {
		return err
	}
	line, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("masqd: %w", err)
	}
	reply, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("masqd did not answer: %w", err)
	}
	var failed struct {
		Error *string `json:"error"`
	}
	if err := json.Unmarshal(reply, &failed); err != nil {
		return fmt.Errorf("bad reply from masqd: %w", err)
	}
	if failed.Error != nil {
		return errors.New("masqd: " + *failed.Error)
	}
	return json.Unmarshal(reply, out)
}

// endpoint is what masq-nri reads of masqd's endpoint list.
type endpoint struct {
	Name string `json:"name"`
	CNI  *struct {
		ContainerID string `json:"containerId"`
		Network     string `json:"network"`
		Ifname      string `json:"ifname"`
	} `json:"cni"`
}

// podEndpoints names the endpoints masq-cni made for the pod sandbox
// sandboxID (its CNI container ID), in masqd's order.
func (m *masqd) podEndpoints(sandboxID string) ([]string, error) {
	var list struct {
		Endpoints []endpoint `json:"endpoints"`
	}
	if err := m.call(map[string]any{"cmd": "endpoints"}, &list); err != nil {
		return nil, err
	}
	var names []string
	for _, e := range list.Endpoints {
		if e.CNI != nil && e.CNI.ContainerID == sandboxID {
			names = append(names, e.Name)
		}
	}
	return names, nil
}

// adoptPod has masqd filter the pod's cgroup (from its sandbox process
// pid) as endpoint name's; returns the cgroup ("" without a backstop).
func (m *masqd) adoptPod(name string, pid uint32) (string, error) {
	var r struct {
		Cgroup string `json:"cgroup"`
	}
	err := m.call(map[string]any{"cmd": "endpoint_pod", "name": name, "pid": pid}, &r)
	return r.Cgroup, err
}
