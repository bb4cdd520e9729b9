"""Where an integration run's time goes: per test file, the fixtures'
share (setup and teardown: masqd started, endpoints, containers) apart
from the tests' own, and the testbed's boot apart from both. conftest.py
feeds it; the run prints the table and writes it as JSON for
scripts/test-budget, which weighs it against make test's budget."""
import json
import os
import time


class RunTimes:
    def __init__(self):
        self.started = time.time()
        self.ups = []  # (seconds, boot seconds) of each testbed's `up` (one per worker)
        self.files = {}  # path -> {"tests", "setup", "call", "teardown"}
        self.tests = {}  # nodeid -> seconds (setup + call + teardown)

    def record(self, nodeid, when, seconds, up=None):
        """One report's time; up: (seconds, boot seconds) of a testbed's
        `up` that this report's setup waited for: the testbed's time, not
        the file's fixtures'. The boot alone (no kernel fetched, no
        initramfs built) is the probe of the machine's speed."""
        if up is not None:
            up_seconds, boot = up
            self.ups.append((up_seconds, boot))
            seconds = max(0.0, seconds - up_seconds)
        path = nodeid.split("::")[0]
        f = self.files.setdefault(path, {"tests": 0, "setup": 0.0, "call": 0.0, "teardown": 0.0})
        if when == "setup":
            f["tests"] += 1
        f[when] += seconds
        self.tests[nodeid] = self.tests.get(nodeid, 0.0) + seconds

    def boot(self):
        """The probe of this machine's speed: the slowest testbed's boot
        (side by side, they boot at once), None if none booted."""
        boots = [b for _, b in self.ups if b]
        return max(boots) if boots else None

    def total(self):
        return time.time() - self.started

    def rows(self):
        """(path, tests, fixtures, tests' own, total), costliest first."""
        out = []
        for path, f in self.files.items():
            fixtures = f["setup"] + f["teardown"]
            out.append((path, f["tests"], fixtures, f["call"], fixtures + f["call"]))
        return sorted(out, key=lambda r: -r[4])

    def table(self, slowest=15):
        lines = [f"{'total':>8} {'fixtures':>9} {'tests':>8} {'n':>4}  file"]
        for path, n, fixtures, call, total in self.rows():
            lines.append(f"{total:7.0f}s {fixtures:8.0f}s {call:7.0f}s {n:4d}  {path}")
        for secs, boot in self.ups:
            boot = f", its boot {boot:.0f}s" if boot else ""
            lines.append(f"{secs:7.0f}s {'':>9} {'':>8} {'':>4}  (a testbed's up{boot})")
        lines.append(f"{self.total():7.0f}s in all")
        lines.append("")
        lines.append(f"the {slowest} slowest tests (setup + call + teardown):")
        for nodeid, secs in sorted(self.tests.items(), key=lambda kv: -kv[1])[:slowest]:
            lines.append(f"{secs:7.0f}s  {nodeid}")
        return lines

    def write(self, path):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        doc = {
            "seconds": round(self.total(), 1),
            "boot_seconds": None if self.boot() is None else round(self.boot(), 1),
            "testbeds": len(self.ups),
            "up_seconds": [round(u, 1) for u, _ in self.ups],
            # What `up` spent beyond booting (a kernel fetched, an initramfs
            # built: a cold cache's one-time cost), the longest of the workers'.
            "cache_fill_seconds": round(max([u - b for u, b in self.ups if b] or [0.0]), 1),
            "files": [{"file": p, "tests": n, "fixtures_seconds": round(fx, 1),
                       "tests_seconds": round(c, 1), "seconds": round(t, 1)}
                      for p, n, fx, c, t in self.rows()],
            "tests": {nodeid: round(secs, 1) for nodeid, secs in
                      sorted(self.tests.items(), key=lambda kv: -kv[1])},
        }
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=1)
        os.replace(tmp, path)
