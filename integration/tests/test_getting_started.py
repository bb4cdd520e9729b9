"""docs/getting-started.md followed literally on the testbed.

The page's convention: a fenced block whose info string is `sh` followed
by host names (```sh host1, ```sh host2, ```sh host1 host2) is a step to
run on those hosts, in that order; every other block (```sh, ```yaml, a
bare ```) is shown, not run. The test runs each marked block as written
with `sh -ec` in the host, from a directory holding the package (the page
says "from the directory you copied it to"), after replacing only what
TESTBED_VALUES lists: the page's device, netdev and addresses by the
testbed's, its tenant image by the local root file system the testbed
builds (no registry is reachable from the guests), and `systemctl enable
--now masqd` by the unit's own ExecStartPre and ExecStart lines, read from
the installed unit (the guests run no systemd; the unit under systemd is
tested in test_faults.py). No testbed helper runs a masq step: the harness
only stops the suite's masqd, builds podman's configuration and root file
system (`testbed podman setup`: the guests have podman and Debian's CNI
plugins, and no archive to install them from) and copies the package in.

The first test needs no testbed: it reads the page and checks the marked
blocks are there, in order, and that each value to replace is in them."""
import glob
import os
import re

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PAGE = os.path.join(REPO, "docs", "getting-started.md")
TESTBED = os.path.join(REPO, "integration", "testbed")
WORKDIR = "/var/tmp/masq-getting-started"
MANDB_AUTO = "/var/lib/man-db/auto-update"

# What the unit does under systemd: check, then start masqd (here in the
# background, its log beside the package) and wait for it to serve.
START_AS_THE_UNIT = f"""\
unit=$(ls /lib/systemd/system/masqd.service /usr/lib/systemd/system/masqd.service 2>/dev/null | head -n 1)
pre=$(sed -n 's/^ExecStartPre=//p' "$unit")
start=$(sed -n 's/^ExecStart=//p' "$unit")
$pre
setsid $start >{WORKDIR}/masqd.log 2>&1 </dev/null &
echo $! >{WORKDIR}/masqd.pid
for i in $(seq 300); do
    grep -q 'masqd ready' {WORKDIR}/masqd.log && break
    kill -0 "$(cat {WORKDIR}/masqd.pid)" || {{ cat {WORKDIR}/masqd.log >&2; exit 1; }}
    sleep 0.1
done
grep -q 'masqd ready' {WORKDIR}/masqd.log"""

# The page's values -> the testbed's; nothing else in a block changes.
TESTBED_VALUES = {
    "mlx5_0": "rxe0",
    "ens1f0": "eth0",
    "198.51.100.1": "198.18.0.1",
    "198.51.100.2": "198.18.0.2",
    "localhost/rdma-tools:bookworm": "--rootfs /var/lib/masq-rootfs",
    "systemctl enable --now masqd": START_AS_THE_UNIT,
}

MARKED = re.compile(r"^```sh((?:\s+host\d+)+)\s*$")
FENCE = re.compile(r"^```")


def marked_blocks(text):
    """[(hosts, block)] of the page's marked blocks, in the page's order."""
    blocks, hosts, lines, in_block = [], None, [], False
    for line in text.splitlines():
        if not in_block:
            if FENCE.match(line):
                in_block = True
                m = MARKED.match(line)
                hosts = m.group(1).split() if m else None
                lines = []
        elif FENCE.match(line):
            in_block = False
            if hosts:
                blocks.append((hosts, "\n".join(lines) + "\n"))
        else:
            lines.append(line)
    assert not in_block, "an unclosed code block"
    return blocks


def for_testbed(block):
    for page_value, testbed_value in TESTBED_VALUES.items():
        block = block.replace(page_value, testbed_value)
    return block


def test_the_page_has_its_marked_blocks_in_order():
    """Without the testbed: the steps the extended test runs are on the
    page, in the order it says, and every value it replaces is used."""
    with open(PAGE) as f:
        blocks = marked_blocks(f.read())
    steps = [(tuple(h), b.splitlines()[0]) for h, b in blocks]
    firsts = [first for _, first in steps]
    order = ["apt-get install -y ./masq_*.deb", "cat >/etc/masq/masqd.yaml <<'EOF'",
             "cat >/etc/masq/policy.yaml <<'EOF'", "masqd --check --config /etc/masq/masqd.yaml",
             "systemctl enable --now masqd", "masqctl daemon show",
             "ip link add mvx42 type vxlan id 42 group 239.1.1.1 dev ens1f0 dstport 4789",
             "cat >/etc/cni/net.d/acme.conflist <<'EOF'",
             "podman run -d --name web-2 --network acme --device masq.io/endpoint=web-2 \\",
             "pid=$(podman inspect -f '{{.State.Pid}}' web-2)",
             "podman run --rm --name web-1 --network acme --device masq.io/endpoint=web-1 \\",
             "test \"$(podman wait web-2)\" = 0"]
    at = [firsts.index(o) for o in order]
    assert at == sorted(at), steps
    assert ("host1",) in [h for h, _ in steps] and ("host2",) in [h for h, _ in steps]
    assert all(set(h) <= {"host1", "host2"} for h, _ in steps), steps
    text = "".join(b for _, b in blocks)
    for value in TESTBED_VALUES:
        assert value in text, f"{value!r} is in no marked block"
    # The two hosts' configs differ in their own address only.
    configs = [b for h, b in blocks if b.startswith("cat >/etc/masq/masqd.yaml")]
    assert len(configs) == 2 and configs[0].replace("ip: 198.51.100.1", "ip: 198.51.100.2") \
        == configs[1]
    assert "rxe0" in for_testbed(configs[0]) and "mlx5_0" not in for_testbed(configs[0])


def newest_deb():
    debs = glob.glob(os.path.join(REPO, "target", "masq_*.deb")) + \
        glob.glob(os.path.join(REPO, "target", "*", "masq_*.deb"))
    if not debs:
        pytest.fail("no masq_*.deb under target/: run `make deb`")
    return max(debs, key=os.path.getmtime)


def prepare(tb, host, deb):
    """What the page leaves to the reader: a clean host, the package copied
    in, podman's configuration and a local image."""
    tb.run(host, "sh", "-c", f"rm -rf {WORKDIR} && mkdir -p {WORKDIR} && cp {deb} {WORKDIR}/")
    # man-db's trigger rebuilds the manual index (minutes under TCG).
    tb.run(host, "sh", "-c", f"[ ! -e {MANDB_AUTO} ] || mv {MANDB_AUTO} {MANDB_AUTO}.off")
    clean(tb, host)


def clean(tb, host):
    tb.run(host, "sh", "-c", f"""
        podman rm -f -t 0 web-1 web-2 >/dev/null 2>&1 || true
        if [ -s {WORKDIR}/masqd.pid ]; then
            kill -TERM "$(cat {WORKDIR}/masqd.pid)" 2>/dev/null || true
            sleep 1; kill -KILL "$(cat {WORKDIR}/masqd.pid)" 2>/dev/null || true
            rm -f {WORKDIR}/masqd.pid
        fi
        nft delete table inet masq_backstop 2>/dev/null || true
        rm -f /run/masq/runtime-endpoints.yaml
        ip link del mvx42 2>/dev/null || true
        ip link del mbr42 2>/dev/null || true
        rm -rf /etc/cni/net.d/acme.conflist /var/lib/cni/networks/acme
        rm -f /etc/masq/masqd.yaml /etc/masq/policy.yaml""", check=False, timeout=120)


@pytest.mark.extended
def test_the_getting_started_page_runs_as_written_on_two_hosts(testbed):
    tb, deb = testbed, newest_deb()
    with open(PAGE) as f:
        blocks = marked_blocks(f.read())
    # The suite's masqd would hold /run/masq: the page's starts instead.
    tb._run([TESTBED, "masq", "down"], False, 120)
    tb._run([TESTBED, "podman", "setup"], True, 900)
    for host in ("host1", "host2"):
        prepare(tb, host, deb)
    out = {}
    try:
        for hosts, block in blocks:
            for host in hosts:
                r = tb.run(host, "env", "DEBIAN_FRONTEND=noninteractive", "sh", "-ec",
                           f"cd {WORKDIR}\n{for_testbed(block)}", check=False, timeout=600)
                if r.returncode != 0:
                    # What the host holds, before the cleanup takes it away.
                    state = tb.run(host, "sh", "-c", "ls -l /var/lib/cni/networks/acme; "
                                   "head -n 3 /var/lib/cni/networks/acme/*; podman ps -a; "
                                   "tail -n 20 " + f"{WORKDIR}/masqd.log", check=False).stdout
                    pytest.fail(f"{host}:\n{block}\n{r.stdout}\n{r.stderr}\nstate:\n{state}")
                out[(host, block)] = r.stdout
        client = next(o for (h, b), o in out.items()
                      if h == "host1" and "ib_write_bw -d vrdma0 -x 1 10.0.0.2" in b)
        # perftest prints the GIDs it uses: the containers' virtual IPs.
        assert "255:255:10:00:00:01" in client and "255:255:10:00:00:02" in client, client
        assert re.search(r"^\s*65536\s+\d+\s+[\d.]+\s+[\d.]+", client, re.M), client
        listed = next(o for (h, b), o in out.items()
                      if h == "host2" and "masqctl endpoint list" in b)
        assert "web-2" in listed and "10.0.0.2" in listed, listed
    finally:
        for host in ("host1", "host2"):
            clean(tb, host)
            tb.run(host, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y",
                   "masq", check=False, timeout=600)
            tb.run(host, "sh", "-c",
                   f"[ ! -e {MANDB_AUTO}.off ] || mv {MANDB_AUTO}.off {MANDB_AUTO}; rm -rf {WORKDIR}",
                   check=False)
