"""A real Kubernetes cluster on the testbed (`make test-k8s-cluster`): the
control plane (kube-apiserver on its own etcd, kube-controller-manager,
kube-scheduler) on host1 and a kubelet on each host against containerd 2,
the pods' network Multus' thin plugin delegating to the bridge plugin. All
built from the Go module proxy and cached (integration/k8s/control-plane,
integration/k8s/tools); the certificates are integration/k8s/pki's, in the
testbed's state dir (the guests' /run/masq-pki/k8s). No image is pulled:
the pods run the images containerd.sh imports (masq.test/*)."""
import concurrent.futures
import contextlib
import json
import os
import subprocess
import time

import pytest

from masq_testbed import perftest_gid, tbcli, wait_for

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
    for _ in range(8):
        r = tb.run("host1", KUBE, "kubectl", BIN, *args, check=False, timeout=timeout)
        if "Unable to connect to the server" not in r.stderr:
            break
        time.sleep(3)
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


# The README's recipe (its "On Kubernetes", docs/kubernetes.md's Deploying)
# as an operator runs it on this cluster, then what an operator does next.
# The images are made by `make images`' script on a debootstrap base and
# imported into each node's containerd (no registry here).
RECIPE = os.path.join(REPO, "integration", "build", "k8s-recipe")
EXAMPLE = os.path.join(REPO, "packaging", "kubernetes", "example")
IMAGE_ARCHIVES = os.path.join(REPO, "integration", "build", "images")
ETCD = os.path.join(REPO, "integration", "guest", "etcd.sh")
MASQCTL = os.path.join(REPO, "target", "release", "masqctl")
POLICY = os.path.join(HERE, "configs", "k8s-cluster", "policy.yaml")
UNDERLAY_IP = {"host1": "198.18.0.1", "host2": "198.18.0.2"}
METRICS_TOKEN = "a1b2c3d4e5f60718293a4b5c6d7e8f90"
# The example's image as its kustomization names it (rdma-tools, made
# locally and imported: nothing is pulled).
RDMA_TOOLS = "localhost/rdma-tools:bookworm"
# Deploying's step 3 for the testbed: its rxe0 on eth0, masq's etcd on host1.
STEP3 = {"device: mlx5_0": "device: rxe0", "netdev: ens1f0np0": "netdev: eth0",
         "https://10.1.0.10:2379": "https://198.18.0.1:2379"}


def deploy_dir():
    """packaging/kubernetes with its ConfigMap edited as step 3 says."""
    import shutil
    deploy = os.path.join(RECIPE, "deploy")
    shutil.rmtree(deploy, ignore_errors=True)
    shutil.copytree(os.path.join(REPO, "packaging", "kubernetes"), deploy,
                    ignore=shutil.ignore_patterns("check", "example"))
    path = os.path.join(deploy, "masqd-config.yaml")
    with open(path) as f:
        text = f.read()
    for old, new in STEP3.items():
        assert old in text, f"packaging/kubernetes/masqd-config.yaml no longer says {old!r}"
        text = text.replace(old, new)
    with open(path, "w") as f:
        f.write(text)
    return deploy


def ctl(tb, host, *args):
    """masqctl on the node, through the socket the DaemonSet shares."""
    return json.loads(tb.run(host, MASQCTL, "-o", "json", *args).stdout)


def endpoints(tb, host):
    return {e["name"]: e for e in ctl(tb, host, "endpoint", "list")["endpoints"]}


def mapped(tb, host):
    return {(e["vni"], e["vip"]) for e in ctl(tb, host, "vpc")["vpc"]}


def team_pod(tb, name, host, vip, cmd, image=RDMA_TOOLS, restart="Never", namespace="team",
             labels=None):
    """A pod of namespace team (or `namespace`) on `host`, on the example's
    network with address `vip`, as the example's pods are."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": namespace, "labels": labels or {},
                        "annotations": {
               "k8s.v1.cni.cncf.io/networks": json.dumps([{"name": "acme100",
                                                           "ips": [f"{vip}/24"]}])}},
           "spec": {"restartPolicy": restart,
                    "nodeSelector": {"kubernetes.io/hostname": host},
                    "containers": [{"name": "app", "image": image,
                                    "imagePullPolicy": "IfNotPresent", "command": cmd}]}}
    path = os.path.join(RECIPE, f"pod-{namespace}-{name}.json")
    with open(path, "w") as f:
        json.dump(pod, f)
    kubectl(tb, "apply", "-f", path)


def pod_logs(tb, name, text):
    out = kubectl(tb, "logs", "-n", "team", name, check=False).stdout
    return out if text in out else None


def pod_phase(tb, name):
    r = kubectl(tb, "get", "pod", "-n", "team", name, "-o", "json", check=False)
    return json.loads(r.stdout)["status"].get("phase") if r.returncode == 0 else None


@contextlib.contextmanager
def explained(tb, *pods):
    """A failed wait says what the cluster said of the pods: their phase,
    node and events (a CNI or NRI refusal is an event), and their logs."""
    try:
        yield
    except AssertionError as e:
        said = [kubectl(tb, "get", "pods", "-n", "team", "-o", "wide", check=False).stdout]
        for pod in pods:
            said.append(kubectl(tb, "describe", "pod", "-n", "team", pod,
                                check=False).stdout[-2500:])
            said.append(f"logs of {pod}:\n" + kubectl(tb, "logs", "-n", "team", pod,
                                                      check=False).stdout[-1500:])
        raise AssertionError(f"{e}\n" + "\n".join(said)) from None


def operator_files():
    """Step 2's one-time material, where the guests see it (the checkout):
    the testbed's CA, with its key, and etcd root's and the operator's
    certificates."""
    import shutil
    pki = os.path.join(RECIPE, "pki")
    os.makedirs(pki, exist_ok=True)
    for src, name in ((os.path.join(tbcli.STATE, "ca", "ca.pem"), "ca.pem"),
                      (os.path.join(tbcli.STATE, "ca", "ca-key.pem"), "ca-key.pem"),
                      *((os.path.join(tbcli.PKI, f), f) for f in (
                          "root.pem", "root-key.pem", "operator.pem", "operator-key.pem"))):
        shutil.copyfile(src, os.path.join(pki, name))
    return pki


def apply_policy(tb, operator, policy=POLICY):
    """Step 7: the operator's certificate and key written into a masqd
    container (mode 0600) for the apply and removed after; the policy on
    standard input."""
    pod = kube_json(tb, "get", "pods", "-n", "masq-system", "-l",
                    "app.kubernetes.io/name=masqd")["items"][0]["metadata"]["name"]
    kubectl_exec = f"{KUBE} kubectl {BIN} exec -n masq-system {pod} -c masqd -i --"
    for f in ("operator.pem", "operator-key.pem"):
        tb.run("host1", "sh", "-c", f"{kubectl_exec} sh -c 'umask 077 && cat >/tmp/{f}' "
               f"< {os.path.join(operator, f)}", timeout=120)
    try:
        r = tb.run("host1", "sh", "-c",
                   f"{kubectl_exec} masqctl policy apply - --operator-cert /tmp/operator.pem "
                   f"--operator-key /tmp/operator-key.pem < {policy}",
                   check=False, timeout=120)
        assert r.returncode == 0, r.stderr + r.stdout
    finally:
        kubectl(tb, "exec", "-n", "masq-system", pod, "-c", "masqd", "--", "rm", "-f",
                "/tmp/operator.pem", "/tmp/operator-key.pem", check=False)


@pytest.fixture(scope="module")
def recipe(kube):
    tb = kube
    os.makedirs(RECIPE, exist_ok=True)
    images = build("images").split()

    def import_images(host):  # each guest unpacks on its own vCPU
        for image in images:
            archive = os.path.join(IMAGE_ARCHIVES, os.path.basename(image).replace(":", "-")
                                   + ".oci.tar")
            tb.run(host, CONTAINERD, "image", image, archive, timeout=1200)

    with concurrent.futures.ThreadPoolExecutor(len(HOSTS)) as pool:
        list(pool.map(import_images, HOSTS))
    # masq's etcd (docs/cluster.md), on host1 beside the control plane; its
    # roles are masq-signer's to make.
    tb.run("host1", ETCD, "wipe")
    tb.run("host1", ETCD, "start")
    for host in HOSTS:
        tb.run(host, "rm", "-rf", "/etc/masq/pki")
        # Step 6: the VPC's bridge joined to VXLAN 100.
        tb.run(host, "sh", "-c",
               f"ip link add mvx100 type vxlan id 100 local {UNDERLAY_IP[host]} "
               "group 239.1.1.1 dev eth0 dstport 4789 && "
               "{ ip link show mbr100 >/dev/null 2>&1 || ip link add mbr100 type bridge; } && "
               "ip link set mvx100 master mbr100 && ip link set mvx100 up && "
               "ip link set mbr100 up")
    deploy = deploy_dir()
    pki = operator_files()
    try:
        kubectl(tb, "label", "node", *HOSTS, "masq.io/rdma=true", "--overwrite")
        # Step 2, once: what masq-signer signs nodes' certificates with.
        kubectl(tb, "apply", "-f", os.path.join(deploy, "namespace.yaml"))
        kubectl(tb, "-n", "masq-system", "create", "secret", "generic", "masq-signer",
                *[f"--from-file={f}={pki}/{f}" for f in ("ca.pem", "ca-key.pem", "root.pem",
                                                          "root-key.pem")])
        kubectl(tb, "-n", "masq-system", "create", "configmap", "masq-ca",
                f"--from-file=ca.pem={pki}/ca.pem")
        kubectl(tb, "-n", "masq-system", "create", "secret", "generic", "masq-metrics",
                f"--from-literal=token={METRICS_TOKEN}")
        kubectl(tb, "apply", "-k", deploy)
        for what in ("deploy/masq-signer", "ds/masqd"):
            kubectl(tb, "rollout", "status", "-n", "masq-system", what, "--timeout=900s",
                    timeout=960)
        apply_policy(tb, pki)
        kubectl(tb, "apply", "-k", EXAMPLE)
        yield tb
    finally:
        kubectl(tb, "delete", "namespace", "team", "--wait=true", "--timeout=300s",
                check=False, timeout=360)
        kubectl(tb, "delete", "-k", deploy, "--wait=true", "--timeout=300s", check=False,
                timeout=360)
        kubectl(tb, "delete", "csr", "--all", check=False)
        tb.run("host1", ETCD, "wipe", check=False)
        for host in HOSTS:
            tb.run(host, "sh", "-c", "ip link del mvx100; ip link del mbr100; rm -rf /etc/masq/pki",
                   check=False)


def test_each_node_joined_by_itself(recipe):
    """No node was given its identity: masq-signer's join asked with a CSR,
    its controller checked it against the node and signed it; the
    certificate names the node and its underlay IP."""
    tb = recipe
    csrs = [c for c in kube_json(tb, "get", "csr")["items"]
            if c["spec"]["signerName"] == "masq.io/node"]
    assert len(csrs) == len(HOSTS), csrs
    for c in csrs:
        assert any(cond["type"] == "Approved" for cond in c["status"]["conditions"]), c
        assert c["status"].get("certificate"), c
    for host in HOSTS:
        out = tb.run(host, "openssl", "x509", "-in", "/etc/masq/pki/host.pem", "-noout",
                     "-subject", "-ext", "subjectAltName").stdout
        assert f"CN = {host}" in out and f"IP Address:{UNDERLAY_IP[host]}" in out, out


def test_the_readmes_recipe_runs_ib_write_bw_across_the_nodes(recipe):
    tb = recipe
    out = wait_for("the example's client reports its bandwidth",
                   lambda: pod_logs(tb, "cli", "BW average"), timeout=600, interval=5)
    print(out)
    srv = wait_for("the example's server reports its bandwidth",
                   lambda: pod_logs(tb, "srv", "BW average"), timeout=120, interval=5)
    # Two nodes, each pod's vIP in perftest's GIDs, never an underlay's.
    pods = {p["metadata"]["name"]: p for p in kube_json(tb, "get", "pods", "-n", "team")["items"]}
    assert pods["srv"]["spec"]["nodeName"] != pods["cli"]["spec"]["nodeName"]
    gids = ["GID: 00:00:00:00:00:00:00:00:00:00:255:255:" + perftest_gid(vip)
            for vip in ("10.0.0.60", "10.0.0.61")]
    for text in (out, srv):
        assert all(gid in text for gid in gids), text


def test_a_rollout_restart_keeps_a_running_app_and_its_cm_listener(recipe):
    """`kubectl rollout restart` of the DaemonSet replaces masqd on each node
    in turn: a running ib_write_bw goes on, and an RDMA CM server that
    listened before is reached by a client started after."""
    tb = recipe
    team_pod(tb, "long-srv", "host2", "10.0.0.70",
             ["ib_write_bw", "-d", "vrdma0", "-x", "1", "-F", "-D", "90", "-p", "18912"])
    team_pod(tb, "cm-srv", "host2", "10.0.0.72", ["rping", "-s", "-P", "-a", "10.0.0.72", "-v", "-p", "18920"])
    with explained(tb, "long-srv", "cm-srv"):
        wait_for("the servers run", lambda: pod_phase(tb, "long-srv") == pod_phase(tb, "cm-srv")
                 == "Running", timeout=300, interval=2)
    wait_for("host1 maps them", lambda: {(100, "10.0.0.70"), (100, "10.0.0.72")}
             <= mapped(tb, "host1"), timeout=120, interval=2)
    team_pod(tb, "long-cli", "host1", "10.0.0.71",
             ["ib_write_bw", "-d", "vrdma0", "-x", "1", "-F", "-D", "90", "-p", "18912",
              "10.0.0.70"], restart="OnFailure")
    wait_for("the client's bandwidth run started",
             lambda: pod_logs(tb, "long-cli", "#bytes"), timeout=300, interval=3)
    kubectl(tb, "rollout", "restart", "-n", "masq-system", "ds/masqd")
    kubectl(tb, "rollout", "status", "-n", "masq-system", "ds/masqd", "--timeout=600s",
            timeout=660)
    out = wait_for("the client's run ends with its bandwidth",
                   lambda: pod_logs(tb, "long-cli", "BW average"), timeout=300, interval=5)
    assert pod_phase(tb, "long-cli") == "Succeeded", out
    restarts = kube_json(tb, "get", "pod", "-n", "team", "long-cli")["status"][
        "containerStatuses"][0]["restartCount"]
    assert restarts == 0, f"the client was restarted: {out}"
    team_pod(tb, "cm-cli", "host1", "10.0.0.73",
             ["rping", "-c", "-a", "10.0.0.72", "-p", "18920", "-C", "5", "-v"])
    out = wait_for("the RDMA CM client pings the listener",
                   lambda: pod_logs(tb, "cm-cli", "rdma-ping-4"), timeout=300, interval=3)
    assert out.count("ping data: rdma-ping-") == 5, out


def test_a_deleted_pod_leaves_every_host(recipe):
    tb = recipe
    team_pod(tb, "gone", "host2", "10.0.0.74", ["sleep", "3600"])
    wait_for("every host maps pod gone", lambda: all(
        (100, "10.0.0.74") in mapped(tb, h) for h in HOSTS), timeout=300, interval=2)
    assert "team.gone" in endpoints(tb, "host2")
    kubectl(tb, "delete", "pod", "-n", "team", "gone", "--wait=true", "--timeout=300s",
            timeout=360)
    wait_for("every host forgets pod gone", lambda: not any(
        (100, "10.0.0.74") in mapped(tb, h) for h in HOSTS), timeout=120, interval=2)
    assert "team.gone" not in endpoints(tb, "host2")


def test_a_pod_in_no_security_group_gets_eacces_at_rtr(recipe):
    tb = recipe
    team_pod(tb, "target", "host2", "10.0.0.76", ["sleep", "3600"], image="masq.test/tenant:1")
    wait_for("host1 maps pod target", lambda: (100, "10.0.0.76") in mapped(tb, "host1"),
             timeout=300, interval=2)
    team_pod(tb, "stranger", "host1", "10.0.0.77", ["qp_probe", "vrdma0", "1", "10.0.0.76"],
             image="masq.test/tenant:1")
    out = wait_for("the stranger's probe ends", lambda: pod_phase(tb, "stranger") in (
        "Succeeded", "Failed") and kubectl(tb, "logs", "-n", "team", "stranger").stdout,
        timeout=300, interval=2)
    assert "modify_qp_rtr: errno=13" in out, out


def service_targets(tb, service):
    """The Service's ready endpoints as Prometheus' file_sd targets, labelled
    as docs/metrics.md's kubernetes_sd relabelling labels them (`node`)."""
    slices = kube_json(tb, "get", "endpointslices", "-n", "masq-system",
                       "-l", f"kubernetes.io/service-name={service}")["items"]
    targets = []
    for s in slices:
        port = next(p["port"] for p in s.get("ports") or [])
        for e in s.get("endpoints") or []:
            if e.get("conditions", {}).get("ready"):
                targets += [{"targets": [f"{a}:{port}"], "labels": {"node": e.get("nodeName")}}
                            for a in e["addresses"]]
    return targets


def test_prometheus_scrapes_every_masqd_through_the_service(recipe):
    """docs/metrics.md's scrape of masqd in Kubernetes, run by Debian's
    Prometheus on host1: the Service's endpoints are both nodes' masqd,
    scraped over HTTPS against the masq CA with the token. Debian builds
    Prometheus without Kubernetes discovery (`kubernetes_sd_configs` is an
    unknown field there), so the Service's EndpointSlices, which that
    discovery would read, are given to it as file_sd targets."""
    tb = recipe
    conf = os.path.join(RECIPE, "prometheus")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "token"), "w") as f:
        f.write(METRICS_TOKEN)
    def both():
        t = service_targets(tb, "masqd-metrics")
        return t if {x["labels"]["node"] for x in t} == set(HOSTS) else None

    targets = wait_for("the Service has both masqd ready", both, timeout=120, interval=3)
    with open(os.path.join(conf, "masqd.json"), "w") as f:
        json.dump(targets, f)
    with open(os.path.join(conf, "prometheus.yml"), "w") as f:
        f.write(f"""global: {{ scrape_interval: 5s }}
scrape_configs:
  - job_name: masqd
    scheme: https
    authorization: {{ credentials_file: {conf}/token }}
    tls_config: {{ ca_file: {RECIPE}/pki/ca.pem }}
    file_sd_configs:
      - files: [{conf}/masqd.json]
""")
    data = "/run/masq-testbed/prometheus"
    prom = tb.spawn("host1", "sh", "-c", f"exec timeout 600 prometheus "
                    f"--config.file={conf}/prometheus.yml --storage.tsdb.path={data} "
                    f"--web.listen-address=127.0.0.1:9090 >{data}.log 2>&1")
    try:
        def up():
            r = tb.run("host1", "curl", "-sf", "http://127.0.0.1:9090/api/v1/query",
                       "--data-urlencode", 'query=up{job="masqd"}', check=False)
            if r.returncode != 0:
                return None
            result = json.loads(r.stdout)["data"]["result"]
            nodes = {x["metric"].get("node"): x["value"][1] for x in result}
            return nodes if nodes == {h: "1" for h in HOSTS} else None

        try:
            wait_for("Prometheus finds both masqd up", up, timeout=300, interval=5)
        except AssertionError as e:
            # What Prometheus found and why a target is down, and its log.
            targets = tb.run("host1", "curl", "-s", "http://127.0.0.1:9090/api/v1/targets",
                             check=False).stdout[-3000:]
            log = tb.run("host1", "tail", "-n", "30", f"{data}.log", check=False).stdout
            raise AssertionError(f"{e}\ntargets: {targets}\nlog:\n{log}") from None
        r = tb.run("host1", "curl", "-s", "http://127.0.0.1:9090/api/v1/query",
                   "--data-urlencode", "query=count by (node) (masq_build_info)")
        assert len(json.loads(r.stdout)["data"]["result"]) == len(HOSTS), r.stdout
    finally:
        tb.run("host1", "pkill", "-f", f"storage.tsdb.path={data}", check=False)
        prom.wait(timeout=60)
        tb.run("host1", "rm", "-rf", data, check=False)
    # Without the token, /metrics is refused; the probes stay open.
    r = tb.run("host1", "curl", "-sk", "-o", "/dev/null", "-w", "%{http_code}",
               f"https://{UNDERLAY_IP['host2']}:9464/metrics", check=False)
    assert r.stdout == "401", r.stdout


# Issue 57 on the real control plane: masq-netpol mirrors the API into
# masq's etcd and masqd decides by it. team/np-db admits its own namespace
# only, both ways (a QP is allowed when either direction is, so egress is
# isolated too).
NETPOL_POLICY = os.path.join(HERE, "configs", "k8s-cluster", "policy-netpol.yaml")
# TCP 18992, perftest's exchange port, is open to every namespace: a rule
# with ports admits that TCP and no QP, so other's ib_write_bw exchanges
# its QP's address and gets EACCES at RTR.
DB_ONLY_TEAM = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"namespace": "team", "name": "db-only-team"},
                "spec": {"podSelector": {"matchLabels": {"app": "np-db"}},
                         "policyTypes": ["Ingress", "Egress"],
                         "ingress": [{"from": [{"podSelector": {}}]},
                                     {"from": [{"namespaceSelector": {}}],
                                      "ports": [{"port": 18992}]}],
                         "egress": [{"to": [{"podSelector": {}}]}]}}
NP_DB = "10.0.0.82"


def probe(tb, namespace, pod):
    """qp_probe's QP from the pod to team/np-db, moved to RTR."""
    return kubectl(tb, "exec", "-n", namespace, pod, "--", "qp_probe", "vrdma0", "1", NP_DB,
                   check=False, timeout=180).stdout


def tcp_to_db(tb, namespace, pod):
    r = kubectl(tb, "exec", "-n", namespace, pod, "--", "socat", "-t5", "-T5", "-",
                f"TCP:{NP_DB}:18990,connect-timeout=5", check=False, timeout=180)
    return r.returncode == 0 and r.stdout.strip() == "db"


def pingpong_in(tb, namespace, pod, *args):
    """A long ibv_rc_pingpong in a running pod (kubectl exec, in the
    background)."""
    return tb.spawn("host1", KUBE, "kubectl", BIN, "exec", "-n", namespace, pod, "--",
                    "ibv_rc_pingpong", "-d", "vrdma0", "-g", "1", "-n", "1000000",
                    "-p", "18991", *args)


def exec_in(tb, namespace, pod, *cmd, timeout=180):
    """`cmd` in a running pod: (exit code, output)."""
    r = kubectl(tb, "exec", "-n", namespace, pod, "--", *cmd, check=False, timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def exec_bg(tb, namespace, pod, *cmd):
    return tb.spawn("host1", KUBE, "kubectl", BIN, "exec", "-n", namespace, pod, "--", *cmd)


def served(tb, namespace, server, client, limit):
    """`server` started in np-db, then `client` in namespace's np-cli once
    the server had 5 s to listen: (client's exit code, its output, the
    server's output). The client may take `limit` seconds, the server 30
    more, each under busybox's timeout: a killed `kubectl exec` leaves its
    process running in the pod."""
    srv = exec_bg(tb, "team", "np-db", "busybox", "timeout", str(limit + 30), *server)
    try:
        time.sleep(5)
        rc, out = exec_in(tb, namespace, "np-cli", "busybox", "timeout", str(limit), *client,
                          timeout=limit + 60)
    finally:
        if srv.poll() is None:
            srv.kill()
        srv_out, srv_err = srv.communicate()
    return rc, out, srv_out + srv_err


def perftest_from(tb, namespace):
    """ib_write_bw from namespace's np-cli to np-db: (exit code, output)."""
    argv = ["ib_write_bw", "-d", "vrdma0", "-x", "1", "-F", "-D", "3", "-p", "18992"]
    rc, out, _ = served(tb, namespace, argv, [*argv, NP_DB], limit=120)
    return rc, out


def rping_from(tb, namespace, port):
    """rping (the RDMA CM) from namespace's np-cli to np-db, as test_cm
    pairs them: (whether it pinged, both sides' output)."""
    argv = ["-a", NP_DB, "-p", str(port), "-C", "3", "-v"]
    rc, out, srv = served(tb, namespace, ["rping", "-s", *argv], ["rping", "-c", *argv],
                          limit=60)
    return (out.count("ping data: rdma-ping-") == 3,
            f"client (exit {rc}):\n{out}\nserver:\n{srv}")


def tracked_with(tb, host, vip):
    return [e for e in ctl(tb, host, "conntrack", "-L")["entries"]
            if vip in (e.get("local_vip"), e.get("remote_vip"))]


def test_networkpolicy_decides_rdma_and_tcp_between_namespaces(recipe):
    """With masq-netpol deployed and tenant acme's networkPolicy on, a pod
    of team reaches team/np-db by RDMA and TCP, a pod of namespace other
    gets EACCES at RTR and no TCP: qp_probe, perftest (`ib_write_bw`,
    whose TCP exchange a port rule admits) and rping (the RDMA CM, its
    connect dropped); deleting the NetworkPolicy admits it, and putting it
    back resets its live connection (onRuleChange: reset)."""
    tb = recipe
    deploy = os.path.join(RECIPE, "deploy", "netpol")
    network = os.path.join(RECIPE, "network-other.yaml")
    with open(os.path.join(EXAMPLE, "network.yaml")) as f:
        text = f.read()
    assert "namespace: team" in text, text
    with open(network, "w") as f:
        f.write(text.replace("namespace: team", "namespace: other"))
    policy = os.path.join(RECIPE, "db-only-team.json")
    with open(policy, "w") as f:
        json.dump(DB_ONLY_TEAM, f)
    live = []
    try:
        kubectl(tb, "apply", "-k", deploy)
        kubectl(tb, "rollout", "status", "-n", "masq-system", "deploy/masq-netpol",
                "--timeout=600s", timeout=660)
        apply_policy(tb, os.path.join(RECIPE, "pki"), NETPOL_POLICY)
        kubectl(tb, "create", "namespace", "other")
        kubectl(tb, "apply", "-f", network)
        kubectl(tb, "apply", "-f", policy)
        team_pod(tb, "np-db", "host2", NP_DB, ["socat", "TCP-LISTEN:18990,reuseaddr,fork",
                                               "SYSTEM:echo db"],
                 image="masq.test/tenant:1", labels={"app": "np-db"})
        team_pod(tb, "np-cli", "host1", "10.0.0.83", ["sleep", "3600"],
                 image="masq.test/tenant:1", labels={"app": "np-cli"})
        team_pod(tb, "np-cli", "host1", "10.0.0.84", ["sleep", "3600"],
                 image="masq.test/tenant:1", namespace="other", labels={"app": "np-cli"})
        with explained(tb, "np-db", "np-cli"):
            wait_for("team/np-cli's QP reaches RTR", lambda: "state=2" in probe(
                tb, "team", "np-cli"), timeout=300, interval=5)
        out = probe(tb, "other", "np-cli")
        assert "modify_qp_rtr: errno=13" in out, out
        assert tcp_to_db(tb, "team", "np-cli")
        assert not tcp_to_db(tb, "other", "np-cli")
        rc, out = perftest_from(tb, "team")
        assert rc == 0 and "BW average" in out, out
        rc, out = perftest_from(tb, "other")
        assert rc != 0 and "BW average" not in out, out
        pinged, out = rping_from(tb, "team", 18993)
        assert pinged, out
        pinged, out = rping_from(tb, "other", 18994)
        assert not pinged, out
        kubectl(tb, "delete", "-f", policy)
        wait_for("other/np-cli's QP reaches RTR", lambda: "state=2" in probe(
            tb, "other", "np-cli"), timeout=120, interval=3)
        wait_for("other/np-cli reaches np-db over TCP", lambda: tcp_to_db(
            tb, "other", "np-cli"), timeout=120, interval=3)
        live.append(pingpong_in(tb, "team", "np-db"))
        time.sleep(5)
        client = pingpong_in(tb, "other", "np-cli", NP_DB)
        live.append(client)
        wait_for("host2 tracks other/np-cli's live connection",
                 lambda: tracked_with(tb, "host2", "10.0.0.84"), timeout=180, interval=3)
        kubectl(tb, "apply", "-f", policy)
        wait_for("host2 resets other/np-cli's connection",
                 lambda: not tracked_with(tb, "host2", "10.0.0.84"), timeout=120, interval=3)
        client.wait(timeout=120)
        assert client.returncode != 0, client.communicate()
    finally:
        for p in live:
            if p.poll() is None:
                p.kill()
            p.communicate()
        kubectl(tb, "delete", "namespace", "other", "--wait=true", "--timeout=300s",
                check=False, timeout=360)
        for pod in ("np-db", "np-cli"):
            kubectl(tb, "delete", "pod", "-n", "team", pod, "--wait=false", check=False)
        kubectl(tb, "delete", "-f", policy, check=False)
        kubectl(tb, "delete", "-k", deploy, "--wait=true", "--timeout=300s", check=False,
                timeout=360)
        apply_policy(tb, os.path.join(RECIPE, "pki"))
