package main

// masqd's control socket: one JSON request line, one JSON reply line
// (backend/src/operator/control.rs). masq-nri asks one thing: which
// endpoints a pod is, with its cgroup filtered as the first one's.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"time"
)

type masqd struct {
	socket string
	// timeout bounds one whole request (connect, send, answer): below the
	// runtime's NRI request timeout (containerd's default is 2 s), so that
	// masq-nri answers the runtime itself, with its reason.
	timeout time.Duration
}

// call sends req and decodes the reply into out within m.timeout (or ctx's
// own deadline, if sooner); a reply with "error" is an error naming what
// masqd said.
func (m *masqd) call(ctx context.Context, req map[string]any, out any) error {
	ctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", m.socket)
	if err != nil {
		return fmt.Errorf("cannot reach masqd at %s: %w", m.socket, err)
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
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
		return fmt.Errorf("masqd at %s did not answer within %s: %w", m.socket, m.timeout, err)
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
func (m *masqd) adoptPod(ctx context.Context, sandboxID string, pid uint32) ([]string, string, error) {
	var r struct {
		Endpoints []string `json:"endpoints"`
		Cgroup    string   `json:"cgroup"`
	}
	err := m.call(ctx, map[string]any{"cmd": "endpoint_pod", "sandbox": sandboxID, "pid": pid}, &r)
	return r.Endpoints, r.Cgroup, err
}
