"""A real Kubernetes cluster on the testbed (`make test-k8s-cluster`): the
control plane (kube-apiserver on its own etcd, kube-controller-manager,
kube-scheduler) on host1 and a kubelet on each host against containerd 2,
the pods' network Multus' thin plugin delegating to the bridge plugin. All
built from the Go module proxy and cached (integration/k8s/control-plane,
integration/k8s/tools); the certificates are integration/k8s/pki's, in the
testbed's state dir (the guests' /run/masq-pki/k8s). No image is pulled:
the pods run the images containerd.sh imports (masq.test/*)."""
import json
import os
import subprocess
import time

import pytest

from masq_testbed import tbcli, wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.k8s_cluster]

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
K8S = os.path.join(REPO, "integration", "k8s")
CONTAINERD = os.path.join(REPO, "integration", "guest", "containerd.sh")
KUBE = os.path.join(REPO, "integration", "guest", "kube.sh")
HOSTS = ("host1", "host2")
GUEST_PKI = "/run/masq-pki/k8s"
BIN = None  # the control plane's binaries; the kube fixture sets it


def build(script):
    r = subprocess.run([os.path.join(K8S, script)], capture_output=True, text=True,
                       timeout=3600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip()


def kubectl(tb, *args, check=True, timeout=120):
    """kubectl on host1 as the cluster's admin. A guest busy under TCG can
    miss client-go's 10 s TLS handshake timeout: such a call is tried again."""
    for _ in range(3):
        r = tb.run("host1", KUBE, "kubectl", BIN, *args, check=False, timeout=timeout)
        if "Unable to connect to the server" not in r.stderr:
            break
    assert r.returncode == 0 or not check, f"kubectl {' '.join(args)}: {r.stderr}"
    return r


def kube_json(tb, *args):
    return json.loads(kubectl(tb, *args, "-o", "json").stdout)


def ready_nodes(tb):
    ready = set()
    for node in kube_json(tb, "get", "nodes")["items"]:
        if any(c["type"] == "Ready" and c["status"] == "True"
               for c in node["status"].get("conditions", [])):
            ready.add(node["metadata"]["name"])
    return ready


@pytest.fixture(scope="module")
def kube(testbed):
    tb = testbed
    global BIN
    tools = build("tools")
    BIN = build("control-plane")
    subprocess.run([os.path.join(K8S, "pki"), os.path.join(tbcli.PKI, "k8s"), GUEST_PKI,
                    "198.18.0.1", *HOSTS], check=True, capture_output=True, timeout=120)
    indexes = {h: h.removeprefix("host") for h in HOSTS}

    def node(host):
        tb.run(host, CONTAINERD, "start", tools, timeout=600)
        if host == "host1":
            tb.run(host, KUBE, "control-plane", BIN, timeout=900)
        peers = [indexes[h] for h in HOSTS if h != host]
        tb.run(host, KUBE, "node", BIN, indexes[host], *peers, timeout=600)

    try:
        with tb.restorable("kubernetes", node):
            started = time.monotonic()
            for host in HOSTS:
                node(host)
            wait_for("both nodes are Ready", lambda: ready_nodes(tb) == set(HOSTS),
                     timeout=600, interval=2)
            # Pods are admitted once kube-controller-manager made the
            # namespace's service account.
            wait_for("the default service account", lambda: kubectl(
                tb, "get", "serviceaccount", "default", check=False).returncode == 0,
                timeout=300, interval=2)
            print(f"kubernetes: control plane and {len(HOSTS)} nodes Ready in "
                  f"{time.monotonic() - started:.0f} s")
            yield tb
    finally:
        for h in reversed(HOSTS):
            tb.run(h, KUBE, "stop", check=False)
            tb.run(h, CONTAINERD, "stop", check=False)


def pod_on(tb, name, host, *cmd, image="masq.test/tenant:1"):
    """A pod the scheduler places on `host` (by its hostname label)."""
    spec = {"spec": {"nodeSelector": {"kubernetes.io/hostname": host},
                     "containers": [{"name": name, "image": image,
                                     "imagePullPolicy": "Never", "command": list(cmd)}]}}
    kubectl(tb, "run", name, f"--image={image}", "--restart=Never",
            f"--overrides={json.dumps(spec)}")


def phase(tb, name):
    return kube_json(tb, "get", "pod", name)["status"].get("phase")


def logs_with(tb, name, text):
    out = kubectl(tb, "logs", name, check=False).stdout
    return out if text in out else None


def test_nodes_are_ready_and_a_pod_runs_on_each(kube):
    tb = kube
    nodes = {n["metadata"]["name"]: n for n in kube_json(tb, "get", "nodes")["items"]}
    assert set(nodes) == set(HOSTS)
    for host in HOSTS:
        assert nodes[host]["status"]["nodeInfo"]["kubeletVersion"] == "v1.34.4"
        assert nodes[host]["status"]["nodeInfo"]["containerRuntimeVersion"].startswith(
            "containerd://2.")
    try:
        for host in HOSTS:
            pod_on(tb, f"plain-{host}", host, "sh", "-c",
                   f"echo hello from {host}; ip -4 addr show eth0; sleep 3600")
        for host in HOSTS:
            wait_for(f"pod plain-{host} runs", lambda h=host: phase(tb, f"plain-{h}") == "Running",
                     timeout=300, interval=2)
            pod = kube_json(tb, "get", "pod", f"plain-{host}")
            assert pod["spec"]["nodeName"] == host
            # The bridge plugin's address, from this node's range, through
            # Multus (which records the network's status on the pod).
            assert pod["status"]["podIP"].startswith(f"10.244.{host.removeprefix('host')}.")
            status = pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"]
            assert json.loads(status)[0]["name"] == "pods", status
            log = wait_for(f"pod plain-{host} logs its greeting",
                           lambda h=host: logs_with(tb, f"plain-{h}", f"hello from {h}"),
                           timeout=60, interval=1)
            assert pod["status"]["podIP"] in log, log
    finally:
        for host in HOSTS:
            kubectl(tb, "delete", "pod", f"plain-{host}", "--wait=false", check=False)
