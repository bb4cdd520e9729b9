"""masqd's own side of a bench run, from its Prometheus metrics.

The bench's clients time each step as the app sees it; masqd's histograms
say how much of that is masqd's work: `masq_rtr_step_duration_seconds`
(each step of a move to RTR), `masq_cm_qp_step_duration_seconds` (the
CM's accept and establish of a QP), `masq_peer_message_duration_seconds`
(messages between masqds) and `masq_request_duration_seconds` (each
request, by opcode). Its counters say what the data path cost: packets
the backstop dropped (`masq_backstop_dropped_packets_total`) and the RNIC
port's own counters (`masq_rnic_port_total`: rxe's retries among them).
Both hosts' metrics are read before and after every run; the difference
belongs to that run (nothing else talks to masqd during a bench). What is
left of a step's time once masqd's part is taken out is the round trip,
the thread hand-offs and the app's own work.
"""
import collections
import os
import re
import shutil

LISTEN = "127.0.0.1:9464"
HOSTS = ("host1", "host2")
RTR_STEPS = ("route", "owner", "admit", "track", "backstop", "modify", "record")
_SAMPLE = re.compile(r'^masq_(rtr_step|request|cm_qp_step|peer_message)_duration_seconds_(sum|count)'
                     r'\{(?:step|op|stage)="([^"]+)"(?:,msg="([^"]+)")?\} (\S+)$')
_PREFIX = {"rtr_step": "step", "request": "op", "cm_qp_step": "cm", "peer_message": "peer"}
# The RNIC's counters carry their device first (one per rail); summed here.
_COUNTER = re.compile(
    r'^masq_(backstop_dropped_packets|rnic_port)_total\{(?:device="[^"]+",)?counter="([^"]+)"\} (\S+)$')
# The RNIC counters that mean a packet was lost or sent again (rxe).
RETRIES = ("completer_retry_err", "retry_exceeded_err", "rcvd_seq_err", "duplicate_request",
           "out_of_seq_request")


def config_with_metrics(src, dst):
    """A copy of the masq config directory src in dst whose host configs
    serve metrics on LISTEN (added where a host config has no `metrics:`
    of its own); returns dst."""
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    for name in sorted(os.listdir(dst)):
        path = os.path.join(dst, name)
        if not name.endswith((".yaml", ".yml")):
            continue
        with open(path) as f:
            text = f.read()
        # Host configs name the device they serve; policy files do not.
        if not re.search(r"^device:", text, re.M) or re.search(r"^metrics:", text, re.M):
            continue
        with open(path, "a") as f:
            f.write(f"\n# Added by integration/bench/run: masqd's own timings.\n"
                    f"metrics: {{ listen: \"{LISTEN}\" }}\n")
    return dst


def scrape(tb):
    """{host: {"step:NAME" | "op:NAME" | "cm:NAME" | "peer:STAGE:MSG":
    [sum_s, count], "drop:NAME" | "rnic:NAME": [value, 0]}} from both
    masqds; a host whose masqd does not answer maps to None."""
    out = {}
    for host in HOSTS:
        r = tb.run(host, "curl", "-s", "-m", "5", f"http://{LISTEN}/metrics", check=False, timeout=30)
        if r.returncode != 0:
            out[host] = None
            continue
        d = {}
        for line in r.stdout.splitlines():
            m = _SAMPLE.match(line)
            if m:
                kind, field, label, msg, value = m.groups()
                key = f"{_PREFIX[kind]}:{label}" + (f":{msg}" if msg else "")
                d.setdefault(key, [0.0, 0])[0 if field == "sum" else 1] = float(value)
            m = _COUNTER.match(line)
            if m:
                kind, label, value = m.groups()
                key = f"{'drop' if kind.startswith('backstop') else 'rnic'}:{label}"
                d.setdefault(key, [0.0, 0])[0] += float(value)
        out[host] = d
    return out


def delta(before, after):
    """What changed between two scrapes: {host: {key: [sum_s, count]}},
    only histograms whose count grew and counters that grew; None where a
    scrape failed."""
    out = {}
    for host in HOSTS:
        b, a = before.get(host), after.get(host)
        if b is None or a is None:
            out[host] = None
            continue
        out[host] = {k: [v[0] - b.get(k, [0.0, 0])[0], int(v[1] - b.get(k, [0.0, 0])[1])]
                     for k, v in a.items()
                     if v[1] > b.get(k, [0.0, 0])[1] or (k[:5] in ("drop:", "rnic:")
                                                         and v[0] > b.get(k, [0.0, 0])[0])}
    return out


def aggregate(runs):
    """Mean us and count per key and host over the runs' deltas:
    {host: {key: {"mean_us": x, "count": n}}}, or None if no run has one."""
    acc = {h: collections.defaultdict(lambda: [0.0, 0]) for h in HOSTS}
    seen = False
    for r in runs:
        for host, d in (r.get("masqd") or {}).items():
            if d is None:
                continue
            seen = True
            for k, (s, n) in d.items():
                acc[host][k][0] += s
                acc[host][k][1] += n
    if not seen:
        return None
    return {h: {k: {"mean_us": s / n * 1e6, "count": n} for k, (s, n) in sorted(d.items()) if n}
            for h, d in acc.items()}


def steps_table(agg, per, label):
    """masqd's steps of a move to RTR, of the CM's accept and establish,
    its messages to the other masqd and its time per request, per host;
    `per` is (the number counts are divided by, what it counts)."""
    if not agg:
        return None
    out = [f"masqd's work per move to RTR [us], mean over the masq runs of {label} "
           "(masq_rtr_step_duration_seconds; host1 moves the client's QPs, host2 the server's; "
           "total = the sum of the steps):",
           f"{'':<8}" + "".join(f" {s:>8}" for s in RTR_STEPS) + f" {'total':>8} {'RTRs':>7}"]
    for host in HOSTS:
        d = agg.get(host) or {}
        steps = [d.get(f"step:{s}") for s in RTR_STEPS]
        if not any(steps):
            continue
        total = sum(s["mean_us"] for s in steps if s)
        n = max(s["count"] for s in steps if s)
        out.append(f"{host:<8}" + "".join(f" {s['mean_us']:>8.0f}" if s else f" {'-':>8}" for s in steps)
                   + f" {total:>8.0f} {n:>7}")
    cm = cm_lines(agg, per)
    if cm:
        out.append(cm)
    out.append(ops_line(agg, per))
    return "\n".join(out)


def host_lines(agg, prefix, per, by_count=False):
    """Per host, every key under `prefix`: "NAME MEAN_US x COUNT/per",
    in key order or, with by_count, the most frequent first."""
    rows = []
    for host in HOSTS:
        d = agg.get(host) or {}
        parts = [(k[len(prefix):], v) for k, v in d.items() if k.startswith(prefix)]
        if by_count:
            parts.sort(key=lambda p: -p[1]["count"])
        if parts:
            rows.append(f"  {host}: " + ", ".join(f"{name} {v['mean_us']:.0f} x {v['count'] / per[0]:.2g}"
                                                  for name, v in parts))
    return rows


def cm_lines(agg, per):
    """The RDMA CM's steps of a QP and the messages between the masqds:
    mean us, and how many per `per`."""
    lines = []
    for prefix, title in (("cm:", "the CM's accept/establish of a QP (masq_cm_qp_step_duration_seconds)"),
                          ("peer:", "messages between masqds, queued = hand-off to the link's sender, "
                                    "handled = the reader's work (masq_peer_message_duration_seconds)")):
        rows = host_lines(agg, prefix, per)
        if rows:
            lines += [f"masqd's time [us] x per {per[1]}, {title}:"] + rows
    return "\n".join(lines)


def ops_line(agg, per):
    """Each request masqd answered: mean us, and how many per `per`."""
    return "\n".join([f"masqd's time per request [us] (masq_request_duration_seconds) x requests "
                      f"per {per[1]}:"] + host_lines(agg, "op:", per, by_count=True))


def losses(runs):
    """(backstop drops, rxe retries) summed over the runs and both hosts,
    or None if no run has masqd's counters."""
    drops = retries = 0
    seen = False
    for r in runs:
        for d in (r.get("masqd") or {}).values():
            if d is None:
                continue
            seen = True
            drops += sum(v[0] for k, v in d.items() if k.startswith("drop:"))
            retries += sum(v[0] for k, v in d.items() if k[5:] in RETRIES and k.startswith("rnic:"))
    return (int(drops), int(retries)) if seen else None
