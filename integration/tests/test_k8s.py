"""Kubernetes' runtime path (`make test-k8s`): containerd 2 on both hosts,
driven through CRI by crictl as a kubelet drives it. A pod's network comes
from a conflist that chains the bridge plugin with masq-cni (as Multus calls
a NetworkAttachmentDefinition's), so the pod becomes endpoint
NAMESPACE.POD; masq-nri, the NRI plugin, gives each of its containers the
pod's CDI device and has masqd's backstop filter the pod's cgroup. Nothing
in the pod's or the container's config names masq. masqd runs in cluster
mode (etcd on host1, with roles), so each host learns the other's pods."""
import json
import os
import re
import subprocess

import pytest

from masq_testbed import perftest_gid, wait_for
from test_backstop import COUNT, RESULT, counters
from test_cluster import cluster_running
from test_cm import wait_cm_listening
from test_containers import wait_listening

pytestmark = pytest.mark.k8s

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(HERE, "configs", "k8s")
MASQCTL = os.path.join(REPO, "target", "release", "masqctl")
NRI = os.path.join(REPO, "target", "release", "masq-nri")
ROGUE = os.path.join(REPO, "integration", "build", "rogue_qp")
CONTAINERD = os.path.join(REPO, "integration", "guest", "containerd.sh")
TOOLS = os.path.join(REPO, "integration", "k8s", "tools")
IMAGES = os.path.join(REPO, "integration", "k8s", "images")
DEBIAN_ROOTFS = os.path.join(REPO, "integration", "k8s", "debian-rootfs")
HOSTS = ("host1", "host2")
NET = "k8s100"
RANGES = {"host1": ("10.0.0.40", "10.0.0.49"), "host2": ("10.0.0.50", "10.0.0.59")}
NAMESPACE = "team"
CRICTL = None  # in integration/k8s/tools' cache; the k8s fixture sets it
# As test_containers: a 1 s ACK timeout for rxe under a loaded guest.
BW = ["ib_write_bw", "-d", "vrdma0", "-x", "1", "-F", "-u", "18", "-s", "65536"]


@pytest.fixture(scope="module")
def k8s(testbed):
    tb = testbed
    tools = subprocess.run([TOOLS], capture_output=True, text=True, timeout=1800)
    assert tools.returncode == 0, tools.stderr
    bin_dir = tools.stdout.strip()
    global CRICTL
    CRICTL = os.path.join(bin_dir, "crictl")

    def runtime(host):
        tb.run(host, CONTAINERD, "start", bin_dir, timeout=600)
        tb.run(host, CONTAINERD, "net", NET, "100", "acme", "10.0.0.0/24", *RANGES[host])
        tb.run(host, CONTAINERD, "nri", NRI)

    with cluster_running(tb, CONFIG, "/masq-k8s", HOSTS):
        try:
            # A host booted again (testbed harness) gets containerd back.
            with tb.restorable("containerd", runtime):
                for host in HOSTS:
                    runtime(host)
                yield tb
        finally:
            for h in HOSTS:
                tb.run(h, CONTAINERD, "stop", check=False)


def ctl(tb, host, *args):
    return json.loads(tb.run(host, MASQCTL, "-o", "json", *args).stdout)


def endpoint(tb, host, name):
    return next((e for e in ctl(tb, host, "endpoint", "list")["endpoints"]
                 if e["name"] == name), None)


def vpc(tb, host):
    return {(e["vni"], e["vip"]): e for e in ctl(tb, host, "vpc")["vpc"]}


def eventually(what, cond, timeout=180):
    """A container under TCG on a loaded machine takes seconds to start."""
    return wait_for(what, cond, timeout=timeout, interval=0.3)


def put(tb, host, path, doc):
    """Write `doc` as JSON to `path` in `host`."""
    tb.run(host, "python3", "-c", "import sys; open(sys.argv[1], 'w').write(sys.argv[2])",
           path, json.dumps(doc))


def crictl(tb, host, *args, check=True, timeout=300):
    return tb.run(host, CRICTL, *args, check=check, timeout=timeout)


# CRI's NamespaceMode NODE: a pod in the host's network (kube-proxy's,
# a CNI's own pods), for which the runtime runs no CNI plugin.
NODE_NETWORK = {"security_context": {"namespace_options": {"network": 2}}}


class Pod:
    """A pod as a kubelet asks containerd for it: metadata, a log directory
    and a cgroup parent of its own (kubelet's kubepods/<class>/pod<uid>).
    With `host_network`, in the host's network: no CNI, so not masq's."""

    def __init__(self, tb, host, name, namespace=NAMESPACE, host_network=False):
        self.tb, self.host, self.name = tb, host, name
        self.endpoint = f"{namespace}.{name}"
        self.config = f"/tmp/pod-{name}.json"
        self.linux = NODE_NETWORK if host_network else {}
        put(tb, host, self.config, {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                         "attempt": 0},
            "log_directory": f"/tmp/pods/{name}",
            "linux": {"cgroup_parent": f"/kubepods/besteffort/poduid-{name}", **self.linux},
        })
        r = crictl(tb, host, "runp", self.config, check=False)
        self.id = r.stdout.strip() if r.returncode == 0 else None
        self.refused = None if r.returncode == 0 else r.stderr

    def create(self, name, *cmd, image="masq.test/tenant:1", check=True):
        """`crictl create` container `name` running cmd: its answer."""
        config = f"/tmp/ctr-{self.name}-{name}.json"
        put(self.tb, self.host, config, {
            "metadata": {"name": name}, "image": {"image": image},
            "command": list(cmd), "log_path": f"{name}.log", "linux": self.linux,
        })
        return crictl(self.tb, self.host, "create", "--no-pull", self.id, config,
                      self.config, check=check)

    def run(self, name, *cmd, wait=True, image="masq.test/tenant:1"):
        """Create and start container `name` running cmd; with `wait`, its
        exit code and log once it ends."""
        cid = self.create(name, *cmd, image=image).stdout.strip()
        crictl(self.tb, self.host, "start", cid)
        return self.wait(cid) if wait else cid

    def wait(self, cid, timeout=300):
        def state():
            info = json.loads(crictl(self.tb, self.host, "inspect", cid).stdout)["status"]
            return info if info["state"] == "CONTAINER_EXITED" else None
        status = eventually(f"container {cid[:12]} exits", state, timeout)
        log = crictl(self.tb, self.host, "logs", cid, check=False)
        return status["exitCode"], log.stdout + log.stderr

    def exec(self, cid, *cmd, **kw):
        return crictl(self.tb, self.host, "exec", cid, *cmd, **kw)

    def remove(self):
        if self.id is None:
            return
        crictl(self.tb, self.host, "stopp", self.id, check=False)
        crictl(self.tb, self.host, "rmp", self.id, check=False)


@pytest.fixture
def pods(k8s):
    """pods(host, name, ...) makes a pod (Pod's arguments); one the runtime
    refused has no id and says why in `refused`; the others must start."""
    made = []

    def pod(host, name, refused=False, **kw):
        p = Pod(k8s, host, name, **kw)
        made.append(p)
        assert refused or p.id, f"pod {name}: {p.refused}"
        return p
    yield pod
    for p in made:
        p.remove()


def test_pods_on_two_hosts_run_ib_write_bw_by_vip(k8s, pods):
    tb = k8s
    srv = pods("host2", "srv")
    ep = eventually("pod srv is an endpoint on host2", lambda: endpoint(tb, "host2", "team.srv"))
    assert ep["cni"]["containerId"] == srv.id
    cli = pods("host1", "cli")
    eventually("host1 maps the server pod", lambda: (100, ep["vip"]) in vpc(tb, "host1"), 60)
    # The container sees the pod's device and nothing of the host's.
    code, out = cli.run("devices", "ibv_devices")
    assert code == 0 and "vrdma0" in out and "rxe0" not in out, out
    # The backstop filters a pod's cgroup from its first container on.
    assert endpoint(tb, "host1", "team.cli")["cgroups"] == ["/kubepods/besteffort/poduid-cli"]
    server = srv.run("bw", *BW, "-D", "5", "-p", "18911", wait=False)
    assert endpoint(tb, "host2", "team.srv")["cgroups"] == ["/kubepods/besteffort/poduid-srv"]
    wait_listening(tb, "host2", ep["netns"], 18911)
    code, out = cli.run("bw", *BW, "-D", "5", "-p", "18911", ep["vip"])
    assert code == 0 and "BW average" in out, out
    # perftest prints both ends' GIDs: the pods' vIPs, never an underlay's.
    vip_cli = endpoint(tb, "host1", "team.cli")["vip"]
    assert [perftest_gid(vip_cli), perftest_gid(ep["vip"])] == re.findall(
        r"GID: 00:00:00:00:00:00:00:00:00:00:255:255:(\S+)", out), out
    code, out = srv.wait(server)
    assert code == 0, out
    log = tb.run("host2", "cat", "/run/masq-testbed/masq-nri.log").stdout
    assert "pod team/srv container bw: device masq.io/endpoint=team.srv" in log, log


@pytest.fixture(scope="module")
def debian11(k8s):
    """A tenant image of another release: Debian 11 (glibc 2.31, rdma-core
    33, its own perftest and rdmacm-utils), made by debootstrap and cached,
    turned into an OCI archive by this machine's podman. The guests read
    the archive through the checkout, which they mount uncached (their view
    of this machine's root is as it was at boot)."""
    r = subprocess.run([DEBIAN_ROOTFS, "bullseye", "ibverbs-providers", "ibverbs-utils",
                        "perftest", "rdmacm-utils"],
                       capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr
    rootfs = r.stdout.strip()
    image = "masq.test/tenant-debian11:1"
    archive = os.path.join(REPO, "integration", "build", "images",
                           os.path.basename(rootfs).replace(".tar", ".oci.tar"))
    if not os.path.exists(archive):
        os.makedirs(os.path.dirname(archive), exist_ok=True)
        for cmd in (["podman", "import", "--change", 'ENTRYPOINT ["/bin/sh"]', rootfs, image],
                    ["podman", "save", "--format", "oci-archive", "-o", archive + ".tmp", image],
                    ["podman", "rmi", image]):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            assert r.returncode == 0, f"{cmd}: {r.stderr}"
        os.rename(archive + ".tmp", archive)
    for host in HOSTS:
        k8s.run(host, CONTAINERD, "image", image, archive, timeout=900)
    return image


def test_a_debian_11_image_runs_perftest_and_rdma_cm_by_vip(k8s, pods, debian11):
    """libmasq is built on Debian 12 for glibc 2.17 and later, and answers
    the private verbs of any rdma-core release (frontend-provider's
    glibc_floor.h and ibv_query_gid_type); the image's own stock tools run
    through it."""
    tb = k8s
    srv = pods("host2", "old-srv")
    ep = eventually("pod old-srv is an endpoint", lambda: endpoint(tb, "host2", "team.old-srv"))
    cli = pods("host1", "old-cli")
    eventually("host1 maps old-srv", lambda: (100, ep["vip"]) in vpc(tb, "host1"), 60)
    code, out = cli.run("release", "sh", "-c", "cat /etc/debian_version; ldd --version; "
                        "ls /usr/lib/x86_64-linux-gnu/libibverbs", image=debian11)
    assert code == 0 and out.startswith("11.") and "2.31" in out and "rdmav33" in out, out
    # The device as the image's own ibv_devinfo shows it: the pod's vIP as
    # a RoCE v2 GID (the GID type comes through rdma-core 33's private ABI).
    code, out = cli.run("devinfo", "ibv_devinfo", "-v", "-d", "vrdma0", image=debian11)
    assert code == 0 and "rxe0" not in out, out
    vip_cli = endpoint(tb, "host1", "team.old-cli")["vip"]
    assert f"::ffff:{vip_cli}, RoCE v2" in out, out
    server = srv.run("bw", *BW, "-D", "3", "-p", "18921", wait=False, image=debian11)
    wait_listening(tb, "host2", ep["netns"], 18921)
    code, out = cli.run("bw", *BW, "-D", "3", "-p", "18921", ep["vip"], image=debian11)
    scode, sout = srv.wait(server)
    assert code == 0 and "BW average" in out, f"{out}\n--- server ---\n{sout}"
    assert scode == 0, sout
    # The RDMA CM by vIP: rping's server binds the pod's vIP.
    server = srv.run("rping", "rping", "-s", "-a", ep["vip"], "-p", "18922", "-C", "10", "-v",
                     wait=False, image=debian11)
    wait_cm_listening(tb, "host2", "team.old-srv", 18922, timeout=180)
    code, out = cli.run("rping", "rping", "-c", "-a", ep["vip"], "-p", "18922", "-C", "10",
                        "-v", image=debian11)
    assert code == 0 and out.count("ping data: rdma-ping-") == 10, out
    code, out = srv.wait(server)
    assert code == 0 and out.count("ping data: rdma-ping-") == 10, out


def test_a_removed_pod_leaves_every_host(k8s, pods):
    tb = k8s
    srv = pods("host2", "gone")
    ep = eventually("pod gone is an endpoint", lambda: endpoint(tb, "host2", "team.gone"))
    eventually("host1 maps it", lambda: (100, ep["vip"]) in vpc(tb, "host1"), 60)
    srv.remove()
    assert endpoint(tb, "host2", "team.gone") is None
    eventually("host1 forgets it", lambda: (100, ep["vip"]) not in vpc(tb, "host1"), 60)
    assert tb.run("host2", "ls", "/var/run/cdi").stdout.count("team.gone") == 0


def test_a_node_whose_masqd_is_away_fails_only_the_pods_that_asked_for_masq(k8s, pods):
    """Issue 52: masq-nri decides from the pod itself (the marker masq-cni
    left at the sandbox's CNI ADD) before it asks masqd anything. With
    masqd down, a pod in the host's network (no CNI, as kube-proxy's)
    starts, and a container of a masq pod is refused with masq-nri's
    reason, within the runtime's NRI timeout; once masqd is back, both
    work."""
    tb = k8s
    masq = pods("host1", "waiting")
    eventually("pod waiting is an endpoint", lambda: endpoint(tb, "host1", "team.waiting"))
    tb._run([tb.cli, "masq", "kill", "host1"], True, 300)
    try:
        plain = pods("host1", "plain", host_network=True)
        # The tenant image has no shell tools: ibv_devices is its command
        # that needs no device (it lists sysfs; no masq device here).
        code, out = plain.run("hello", "ibv_devices")
        assert code == 0 and "vrdma0" not in out, out
        r = masq.create("app", "ibv_devices", check=False)
        assert r.returncode != 0, r.stdout
        assert "pod team/waiting container app asked for masq (network k8s100" in r.stderr, \
            r.stderr
        assert "cannot reach masqd at /run/masq/control.sock" in r.stderr, r.stderr
    finally:
        tb._run([tb.cli, "masq", "start", "host1"], True, 300)
    code, out = masq.run("devices", "ibv_devices")
    assert code == 0 and "vrdma0" in out, out
    code, out = plain.run("again", "ibv_devices")
    assert code == 0 and "vrdma0" not in out, out
    log = tb.run("host1", "cat", "/run/masq-testbed/masq-nri.log").stdout
    assert "pod team/plain" not in log, log


def test_a_pod_of_a_namespace_its_tenant_does_not_admit_gets_no_network(k8s, pods):
    """Issue 52: a network names its tenant in a string any namespace can
    reference (Multus), so the tenant says which namespaces are its own
    (the policy's tenants.acme.kubernetes.namespaces: team). masq-cni
    passes the pod's K8S_POD_NAMESPACE, masqd refuses the endpoint naming
    the tenant and the namespace, and the runtime refuses the pod."""
    tb = k8s
    intruder = pods("host1", "intruder", namespace="other", refused=True)
    assert intruder.id is None, "the pod of namespace other started"
    assert "tenant acme admits Kubernetes namespaces team, not other" in intruder.refused, \
        intruder.refused
    assert endpoint(tb, "host1", "other.intruder") is None
    # The runtime's DEL after the failed ADD took masq-nri's marker too:
    # markers are left only for the pods that run.
    marked = set(tb.run("host1", "ls", "-A", "/run/masq/pods", check=False).stdout.split())
    running = {p["id"] for p in json.loads(crictl(tb, "host1", "pods", "-o", "json").stdout)
               ["items"] if p["state"] == "SANDBOX_READY"}
    assert marked <= running, (marked, running)


def test_a_pod_in_no_security_group_is_refused_at_rtr(k8s, pods):
    tb = k8s
    srv = pods("host2", "srv")
    ep = eventually("pod srv is an endpoint", lambda: endpoint(tb, "host2", "team.srv"))
    srv.run("idle", "sleep", "120", wait=False)
    deny = pods("host1", "deny")
    eventually("host1 maps the server pod", lambda: (100, ep["vip"]) in vpc(tb, "host1"), 60)
    code, out = deny.run("probe", "qp_probe", "vrdma0", "1", ep["vip"])
    assert code == 3 and "modify_qp_rtr: errno=13" in out, out


def test_a_pod_that_skips_libmasq_moves_no_data(k8s, pods):
    """rogue_qp in a pod without LD_PRELOAD drives the device itself
    (rdma-core finds rxe0 over netlink, past the sysfs view); the
    pod's cgroup was adopted when its container was created (and again
    when masqd restarted), so the backstop drops its RoCE packets. Its peer
    runs on host2 outside any tenant, where nothing filters."""
    tb = k8s
    pod = pods("host1", "rogue")
    eventually("pod rogue is an endpoint", lambda: endpoint(tb, "host1", "team.rogue"))
    cid = pod.run("idle", "sleep", "300", wait=False)
    cgroups = ["/kubepods/besteffort/poduid-rogue"]
    assert endpoint(tb, "host1", "team.rogue")["cgroups"] == cgroups
    # Across a masqd restart too: no session of the pod brings it back.
    tb._run([tb.cli, "masq", "kill"], True, 300)
    tb._run([tb.cli, "masq", "start"], True, 300)
    assert endpoint(tb, "host1", "team.rogue")["cgroups"] == cgroups
    before = counters(tb, "host1").get("drop_team_rogue", 0)
    bypasses = endpoint(tb, "host1", "team.rogue")["audit_bypasses"]
    inside = subprocess.Popen(
        [tb.cli, "exec", "-i", "host1", "--", CRICTL, "exec", "-i", cid,
         "sh", "-c", f"unset LD_PRELOAD; exec rogue_qp rxe0 1 {COUNT}"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    outside = subprocess.Popen(
        [tb.cli, "exec", "-i", "host2", "--", ROGUE, "rxe0", "1", str(COUNT)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        a, b = (p.stdout.readline().split() for p in (inside, outside))
        assert a[:1] == ["QPN"] and b[:1] == ["QPN"], (a, b, inside.stderr.read())
        # The pod's QP to host2's real GID.
        inside.stdin.write(f"{b[1]} {b[3]}\n")
        inside.stdin.flush()
        outside.stdin.write(f"{a[1]} {a[3]}\n")
        outside.stdin.flush()
        ra, rb = (RESULT.match(p.stdout.readline().strip()) for p in (inside, outside))
        assert ra and rb, (inside.stderr.read(), outside.stderr.read())
        # Nothing the pod sent arrived (host2's sends, from the host
        # itself, are not a tenant's and may arrive).
        assert int(ra[1]) == 0, ra.group(0)
        assert int(rb[4]) == 0, rb.group(0)
    finally:
        for p in (inside, outside):
            try:
                p.stdin.close()
                p.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()
                p.wait()
    assert counters(tb, "host1")["drop_team_rogue"] > before
    # The audit (logging only here) saw the pod's QP as a bypass of masq.
    assert endpoint(tb, "host1", "team.rogue")["audit_bypasses"] > bypasses


def test_the_node_image_holds_what_the_daemonset_runs():
    """packaging/container/Containerfile built on the package by
    integration/k8s/images (a debootstrap base: no registry here): what the
    DaemonSet's containers run and install is in it and runs. Read through
    `podman image mount` and chroot: this machine's own container runtime
    is not what is under test."""
    r = subprocess.run([IMAGES], capture_output=True, text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    image = r.stdout.split()[0]
    mnt = subprocess.run(["podman", "image", "mount", image], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        out = subprocess.run(
            ["chroot", mnt, "sh", "-c", "masqd --version && masqctl --version && "
             "masq-nri -h 2>&1 | head -1 && ls /usr/lib/cni/masq-cni /usr/lib/masq"],
            capture_output=True, text=True)
    finally:
        subprocess.run(["podman", "image", "unmount", image], capture_output=True)
    assert out.returncode == 0, out.stderr
    version = image.rsplit(":", 1)[1]
    for want in (f"masqd {version}", f"masqctl {version}", "usage: masq-nri",
                 "/usr/lib/cni/masq-cni", "libmasq.so"):
        assert want in out.stdout, (want, out.stdout)
