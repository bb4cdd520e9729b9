package main

// masqd's control socket: one JSON request line, one JSON reply line
// (backend/src/operator/control.rs). masq-nri asks one thing: which
// endpoints a pod is, with its cgroup filtered as the first one's.

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

// adoptPod asks masqd for the endpoints masq-cni made for the pod sandbox
// sandboxID (its CNI container ID), by name, and has it filter the pod's
// cgroup (from its sandbox process pid) as the first one's; returns the
// names and the cgroup ("" without a backstop, or with no endpoint).
func (m *masqd) adoptPod(sandboxID string, pid uint32) ([]string, string, error) {
	var r struct {
		Endpoints []string `json:"endpoints"`
		Cgroup    string   `json:"cgroup"`
	}
	err := m.call(map[string]any{"cmd": "endpoint_pod", "sandbox": sandboxID, "pid": pid}, &r)
	return r.Endpoints, r.Cgroup, err
}
