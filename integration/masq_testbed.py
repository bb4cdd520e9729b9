"""Python side of the testbed for tests and benchmarks: runs commands in
hosts and tenant endpoints through the `integration/testbed` CLI, so the
tests exercise the same tool a developer uses."""
import contextlib
import importlib.machinery
import importlib.util
import json
import os
import re
import subprocess
import sys
import threading
import time

CLI = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testbed")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load_cli():
    """The testbed CLI as a module: its console scan, agent probe and
    libvirt helpers, so the harness judges a host as `testbed status` does."""
    loader = importlib.machinery.SourceFileLoader("masq_testbed_cli", CLI)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


tbcli = _load_cli()
# Where the evidence of every wedged host of a run is kept (the state dir
# goes with `testbed down`): console, vCPU stacks, what the harness saw.
WEDGES = os.environ.get("MASQ_TESTBED_WEDGES", "/var/tmp/masq-testbed-wedges")
# hostN's underlay address is 198.18.0.N (integration/testbed).
UNDERLAY = {f"host{i}": f"198.18.0.{i}" for i in range(1, 10)}


class ConsoleWatch(threading.Thread):
    """Reads every host's console as it grows. A lockup, stall or panic is
    noted for the harness's next check; if the host's agent then does not
    answer, its vCPU stacks are kept and the domain is destroyed, so a
    command hung in it ends now (with a connection error) instead of
    waiting out its timeout, and the harness boots the host again."""

    def __init__(self, tb):
        super().__init__(name="console-watch", daemon=True)
        self.tb = tb
        self.lock = threading.Lock()
        self.offsets = {}
        self.pending = {}  # host -> [console lines not yet reported]
        self.records = {}  # host -> wedge record path not yet reported
        self.scanning = threading.Lock()
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(2):
            for host in self.tb.known_hosts():
                new = self.scan(host)
                if new:
                    self.on_trouble(host, new)

    def catch_up(self, host):
        """Read what host's console printed since the last look, now (the
        harness's check must not miss a panic printed a moment ago)."""
        new = self.scan(host)
        if new:
            with self.lock:
                self.pending.setdefault(host, []).extend(new)

    def scan(self, host):
        with self.scanning:
            try:
                return self._scan(host)
            except OSError:
                return []

    def _scan(self, host):
        path = tbcli.console_path(host)
        size = os.path.getsize(path)
        start = self.offsets.get(host, 0)
        if size < start:  # a new boot started the file again
            start = 0
        if size == start:
            return []
        with open(path, "rb") as f:
            f.seek(start)
            chunk = f.read(size - start)
        # Only whole lines: the rest is read again next time.
        end = chunk.rfind(b"\n") + 1
        self.offsets[host] = start + end
        return tbcli.console_problems(chunk[:end].decode(errors="replace"))

    def on_trouble(self, host, lines):
        with self.lock:
            first = host not in self.pending
            self.pending.setdefault(host, []).extend(lines)
        if not first:
            return
        print(f"testbed: {host}'s console: {lines[0]}", file=sys.stderr, flush=True)
        if tbcli.domain_running(host) and not tbcli.agent_ready(host):
            record = self.tb.keep_wedge(host, lines)
            with self.lock:
                self.records[host] = record
            tbcli.virsh("destroy", tbcli.domain(host), check=False)
            print(f"testbed: {host} stopped answering; destroyed it (evidence in {record})",
                  file=sys.stderr, flush=True)

    def take(self, host):
        """Console trouble and the wedge record seen on host since the last take."""
        with self.lock:
            return self.pending.pop(host, []), self.records.pop(host, None)


class Testbed:
    cli = CLI

    def __init__(self):
        # Steps that put back what a module's fixture made on a host, run
        # in order after that host was booted again: [(name, fn(host))].
        self.restore_steps = []
        # Endpoints made with tenant_add and not deleted: {(host, name): (vni, vip)}.
        self.tenants = {}
        self.watch = None

    # Health: a host that stopped answering fails its test and comes back --
    def known_hosts(self):
        # The CLI module was loaded before the testbed came up (or changed
        # its number of hosts or rails): its host table, which its agent probe
        # reads, follows the running testbed's.
        tbcli.HOSTS = tbcli.host_table(*tbcli._running_shape())
        return list(tbcli.HOSTS)

    def start_watching(self):
        self.watch = ConsoleWatch(self)
        self.watch.start()

    @contextlib.contextmanager
    def restorable(self, name, fn):
        """For the block, fn(host) is run on any host booted again."""
        step = (name, fn)
        self.restore_steps.append(step)
        try:
            yield
        finally:
            self.restore_steps.remove(step)

    def trouble(self, probe_agents=True):
        """{host: why} for every host that is not fit to run the next test:
        its domain is not running, its console showed a lockup or panic, or
        (probe_agents) its agent does not answer."""
        found = {}
        for host in self.known_hosts():
            why = []
            state = tbcli.virsh("domstate", tbcli.domain(host), check=False).strip()
            if state != "running":
                why.append(f"its domain is {state or 'gone'}")
            if self.watch:
                self.watch.catch_up(host)
            lines, record = self.watch.take(host) if self.watch else ([], None)
            if lines:
                why.append("its console shows: " + " | ".join(lines[:4]))
            if state == "running" and probe_agents and not tbcli.agent_ready(host):
                why.append("its agent does not answer")
            if why:
                if record is None and state == "running":
                    record = self.keep_wedge(host, lines)
                found[host] = (why, record)
        return found

    def keep_wedge(self, host, lines):
        """Write what is known of a wedged host to WEDGES; return the path."""
        os.makedirs(WEDGES, exist_ok=True)
        path = os.path.join(WEDGES, f"{time.strftime('%Y%m%d-%H%M%S')}-{host}.txt")
        try:
            stacks = tbcli.vcpu_stacks(host)
        except Exception as e:  # noqa: BLE001 - evidence is best effort
            stacks = f"(no stacks: {e})"
        try:
            console = open(tbcli.console_path(host), errors="replace").read()
        except OSError:
            console = "(no console log)"
        with open(path, "w") as f:
            f.write(f"{host} at {time.ctime()}\n\nconsole trouble:\n" + "\n".join(lines)
                    + f"\n\nvCPU stacks:\n{stacks}\n\nconsole:\n{console}")
        return path

    def recover(self, host):
        """Boot host again and put back what the running fixtures made."""
        subprocess.run([CLI, "poweroff", host], capture_output=True, timeout=120)
        self._run([CLI, "poweron", host], True, 900)
        failed = []
        for (at, name), (vni, vip) in list(self.tenants.items()):
            if at == host:
                try:
                    self._run([CLI, "tenant", "add", host, name, "--vni", str(vni), "--vip", vip],
                              True, 60)
                except AssertionError as e:
                    failed.append(f"tenant {name}: {e}")
        for name, fn in list(self.restore_steps):
            try:
                fn(host)
            except Exception as e:  # noqa: BLE001 - say which step, go on
                failed.append(f"{name}: {e}")
        return failed

    def is_up(self):
        return subprocess.run([CLI, "status"], capture_output=True).returncode == 0

    def hosts(self):
        """The hosts of the running testbed, host1..hostN."""
        out = self._run([CLI, "status"], False, 120).stdout
        return [line.split(":", 1)[0] for line in out.splitlines() if line.startswith("host")]

    def up(self, hosts, rails=None):
        """Bring the testbed to `hosts` hosts (boots or removes the
        difference); with `rails`, that many underlay segments (another
        number than runs boots every host again)."""
        self._run([CLI, "up", "--hosts", str(hosts), *(["--rails", str(rails)] if rails else [])],
                  True, 900)

    def poweroff(self, host):
        """Pull host's plug (virsh destroy): everything in it is gone."""
        self._run([CLI, "poweroff", host], True, 120)

    def poweron(self, host):
        """Boot a powered-off host again, fresh; returns when its agent answers."""
        self._run([CLI, "poweron", host], True, 600)

    # Commands in a host ---------------------------------------------------
    def run(self, host, *cmd, check=True, timeout=300):
        return self._run([CLI, "exec", host, "--", *cmd], check, timeout)

    def spawn(self, host, *cmd):
        return self._spawn([CLI, "exec", host, "--", *cmd])

    # masqd on both hosts ---------------------------------------------------
    @contextlib.contextmanager
    def masq_running(self, config):
        """masqd on both hosts from the configs in `config` for the block."""
        self._run([CLI, "masq", "up", "--config", config], True, 300)
        try:
            # A host booted again gets its endpoints and masqd back.
            with self.restorable(f"masq up --config {config}", lambda _host: self._run(
                    [CLI, "masq", "up", "--config", config], True, 300)):
                yield self
        finally:
            self._run([CLI, "masq", "down"], False, 120)

    def masqd_log(self, host):
        return self.run(host, "cat", "/run/masq-testbed/masqd.log").stdout

    # Commands in a tenant endpoint -----------------------------------------
    def tenant_add(self, host, name, vni, vip):
        self._run([CLI, "tenant", "add", host, name, "--vni", str(vni), "--vip", vip], True, 60)
        self.tenants[(host, name)] = (vni, vip)

    def tenant_del(self, host, name, check=True):
        self.tenants.pop((host, name), None)
        self._run([CLI, "tenant", "del", host, name], check, 60)

    def tenant_run(self, host, name, *cmd, check=True, timeout=300):
        return self._run([CLI, "tenant", "exec", host, name, "--", *cmd], check, timeout)

    def tenant_spawn(self, host, name, *cmd):
        return self._spawn([CLI, "tenant", "exec", host, name, "--", *cmd])

    def wait_listening(self, host, port, tenant=None, proto="tcp", timeout=60):
        """Block until something listens on port (in the host or tenant)."""
        flag = "-Hltn" if proto == "tcp" else "-Hlun"
        cmd = ["ss", flag, f"sport = :{port}"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if tenant:
                r = self.tenant_run(host, tenant, *cmd, check=False)
            else:
                r = self.run(host, *cmd, check=False)
            if r.stdout.strip():
                return
            time.sleep(0.3)
        raise TimeoutError(f"nothing listens on {proto}/{port} in {tenant or host}")

    @staticmethod
    def _run(argv, check, timeout):
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} exited {r.returncode}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
            )
        return r

    @staticmethod
    def _spawn(argv):
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


HW_COUNTERS = "/sys/class/infiniband/rxe0/ports/1/hw_counters"


def rxe_counters(tb, host):
    """rxe0's packet counters on a host (sent_pkts, rcvd_pkts, retries...)."""
    out = tb.run(host, "grep", "-r", ".", HW_COUNTERS).stdout
    return {
        path.rsplit("/", 1)[1]: int(value)
        for path, value in (line.split(":", 1) for line in out.split())
    }


@contextlib.contextmanager
def rdma_moved(tb, receiver, size, count):
    """Around a run that moves `count` messages of `size` bytes into
    `receiver`: checks rxe0 there received at least the packets that takes
    (4096 B is the largest RoCE MTU). Perftest's own rates are not a correctness check: it prints 0.00
    when its cycle-counter calibration fails under emulation load."""
    before = rxe_counters(tb, receiver)
    yield
    after = rxe_counters(tb, receiver)
    got = after["rcvd_pkts"] - before["rcvd_pkts"]
    delta = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    least = count * -(-size // 4096)
    assert got >= least, f"{receiver} received {got} RoCE packets, want >= {least}: {delta}"


def wait_cm_listener(tb, host, port, endpoint=None, procs=(), timeout=60):
    """Block until an RDMA CM id listens on port: in masqd (masqctl cm) for
    an endpoint's app, in the kernel (`rdma res show cm_id`) for a native
    one. Apps whose listener is no TCP socket (rsockets) are waited on so.
    Fails early when one of procs (spawned commands) exited."""
    masqctl = os.path.join(REPO, "target", "release", "masqctl")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if endpoint:
            ids = json.loads(tb.run(host, masqctl, "-o", "json", "cm").stdout)["ids"]
            if any(i["endpoint"] == endpoint and i["side"] == "listen"
                   and i["local"].endswith(f":{port}") for i in ids):
                return
        else:
            ids = json.loads(tb.run(host, "rdma", "-j", "res", "show", "cm_id").stdout or "[]")
            if any(i.get("state") == "LISTEN" and i.get("src-addr", "").endswith(f":{port}")
                   for i in ids):
                return
        for p in procs:
            if p.poll() is not None:
                rc, out, err = finish(p)
                raise AssertionError(f"exited ({rc}) before listening:\n{out}\n{err}")
        time.sleep(0.3)
    raise TimeoutError(f"no RDMA CM listener on port {port} on {host}")


def wait_for(what, fn, timeout=60, interval=0.5):
    """fn()'s first true value, polled every `interval` s; fails after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        assert time.monotonic() < deadline, f"{what}: not within {timeout}s"
        time.sleep(interval)


def finish(proc, timeout=300):
    """Wait for a spawned command; return (returncode, stdout, stderr)."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return proc.returncode, out, err


def finish_pair(srv, cli, timeout=300):
    """Once the client (a CompletedProcess) ended: wait for its server (a
    spawned command), stopping one still waiting for a client that failed;
    fail unless both succeeded. Returns (server stdout, client stdout)."""
    if cli.returncode != 0:
        srv.kill()  # a server still waiting for its client would never exit
    rc, out, err = finish(srv, timeout)
    assert cli.returncode == 0, f"client failed:\n{cli.stdout}\n{cli.stderr}"
    assert rc == 0, f"server failed:\n{out}\n{err}"
    return out, cli.stdout


# perftest / ibverbs-utils output ------------------------------------------

# perftest prints "-nan" for the deviation of some runs, and "inf" for every
# time when its cycle clock failed to calibrate (under emulation load); keep
# them as floats: no test reads perftest's clock, only its counts.
_NUM = r"(-?nan|inf|[\d.]+)"
_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)" + (r"\s+" + _NUM) * 3 + r"\s*$", re.M)
_LAT_ROW = re.compile(r"^\s*(\d+)\s+(\d+)" + (r"\s+" + _NUM) * 5, re.M)
_PP_BYTES = re.compile(r"^(\d+) bytes in ([\d.]+) seconds = ([\d.]+) Mbit/sec$", re.M)
_PP_ITERS = re.compile(r"^(\d+) iters in ([\d.]+) seconds = ([\d.]+) usec/iter$", re.M)


def perftest_gid(vip):
    """The last four bytes of a GID as perftest prints them."""
    return ":".join(f"{int(b):02d}" for b in vip.split("."))


def parse_bw(text):
    """The result row of ib_{write,read,send}_bw: bytes, iterations, MB/s."""
    m = _BW_ROW.search(text)
    if not m:
        raise ValueError(f"no bandwidth row in perftest output:\n{text}")
    return {
        "bytes": int(m.group(1)),
        "iterations": int(m.group(2)),
        "bw_peak_mbps": float(m.group(3)),
        "bw_avg_mbps": float(m.group(4)),
        "msg_rate_mpps": float(m.group(5)),
    }


def parse_lat(text):
    """The result row of ib_*_lat: bytes, iterations, latencies in usec."""
    m = _LAT_ROW.search(text)
    if not m:
        raise ValueError(f"no latency row in perftest output:\n{text}")
    return {
        "bytes": int(m.group(1)),
        "iterations": int(m.group(2)),
        "t_min_us": float(m.group(3)),
        "t_max_us": float(m.group(4)),
        "t_typical_us": float(m.group(5)),
        "t_avg_us": float(m.group(6)),
        "t_stdev_us": float(m.group(7)),
    }


def parse_pingpong(text):
    b, i = _PP_BYTES.search(text), _PP_ITERS.search(text)
    if not (b and i):
        raise ValueError(f"no result lines in ibv_rc_pingpong output:\n{text}")
    return {
        "bytes": int(b.group(1)),
        "mbit_per_s": float(b.group(3)),
        "iters": int(i.group(1)),
        "usec_per_iter": float(i.group(3)),
    }


# masqd's metrics ---------------------------------------------------------

_SAMPLE = re.compile(r'^([a-z_]+)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(tb, host):
    """{(name, frozenset(labels)): value} from masqd's /metrics (its config
    must have `metrics: { listen: "127.0.0.1:9464" }`)."""
    r = tb.run(host, "curl", "-sS", "-f", "-D", "-", "http://127.0.0.1:9464/metrics")
    # (text mode: the reply's CRLFs arrive as newlines)
    head, _, body = r.stdout.partition("\n\n")
    assert "application/openmetrics-text" in head, head
    assert body.rstrip().endswith("# EOF"), body[-200:]
    out = {}
    for line in body.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out[(m[1], frozenset(_LABEL.findall(m[2] or "")))] = float(m[3])
    return out


def value(samples, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


# rsockets' rstream/riostream and libfabric's fi_pingpong ------------------

def rstream(*args, size=4096, count=50):
    """rstream (or riostream: argv[0] given) ping-ponging count messages of
    size bytes: a server without -s, a client with -s ADDR."""
    return [*args, "-S", str(size), "-C", str(count)]


def parse_rstream(text):
    """(size, transfers) of rstream's/riostream's result row, which reads
    `custom  4k  50  1  400k  0.22s ...`."""
    m = re.search(r"^custom\s+(\d+)k\s+(\d+)\s+1\s", text, re.M)
    if not m:
        raise ValueError(f"no result row in rstream output:\n{text}")
    return int(m.group(1)) * 1024, int(m.group(2))


def fi_pingpong(port, *dest, size=4096, iters=20):
    """fi_pingpong over libfabric's verbs provider with MSG endpoints (RC
    QPs through the RDMA CM); its own TCP control connection is on port:
    the server's (-B) without dest, the client's (-P) with it."""
    return ["fi_pingpong", "-p", "verbs", "-e", "msg", "-B" if not dest else "-P", str(port),
            "-S", str(size), "-I", str(iters), *dest]


def parse_fi_pingpong(text):
    """(size, sent, acked) of fi_pingpong's result row, which reads
    `4k  20  =20  160k  1.20s ...`."""
    m = re.search(r"^(\d+)k\s+(\d+)\s+=(\d+)\s", text, re.M)
    if not m:
        raise ValueError(f"no result row in fi_pingpong output:\n{text}")
    return int(m.group(1)) * 1024, int(m.group(2)), int(m.group(3))
