#!/usr/bin/env python3
"""Fail on an import cycle between masqd's modules, or on a `use` that goes
up the layer order. Edges: every `crate::`, `super::` and `self::` path in
non-test code (a `#[cfg(test)] mod tests` block is skipped: fixtures may
reach across). Usage: check-modules [--cycles-only] [--allow m1,m2,..] [SRC]
(SRC defaults to backend/src; --allow tolerates one known cycle made of exactly
those modules, for the commits before it is broken)."""
import os, re, sys
args = sys.argv[1:]
CYCLES_ONLY = "--cycles-only" in args
ALLOW = set()
if "--allow" in args:
    ALLOW = set(args[args.index("--allow") + 1].split(","))
    del args[args.index("--allow"):args.index("--allow") + 2]
args = [a for a in args if a != "--cycles-only"]
SRC = args[0] if args else "backend/src"
# Folder -> layer; a module may use its own folder (acyclically) or a lower layer.
# A folder's mod.rs is its interface: mod.rs -> child edges are not counted.
# Sibling folders of one layer may not use each other (only their common lower layers).
# Root files not named here (error, config, counters, run, lib) are layer 0.
LAYERS = {"kernel": 1, "transport": 1, "peer": 1, "cluster": 2, "pipeline": 3,
          "enforce": 4, "cm": 4, "tenants": 5, "operator": 6, "daemon": 7}
mods = {}
for d, _, fs in os.walk(SRC):
    for f in fs:
        if not f.endswith(".rs") or d.startswith(os.path.join(SRC, "bin")):
            continue
        rel = os.path.relpath(os.path.join(d, f), SRC)[:-3].split(os.sep)
        if rel[-1] in ("mod", "lib"): rel = rel[:-1]
        mods[tuple(rel)] = os.path.join(d, f)
def resolve(here, path):
    p = path.split("::")
    if p[0] == "crate": base, p = (), p[1:]
    elif p[0] in ("super", "self"):
        base = here
        while p and p[0] == "super": base, p = base[:-1], p[1:]
        if p and p[0] == "self": p = p[1:]
    else: return None
    best = None
    for i in range(len(p) + 1):
        if base + tuple(p[:i]) in mods: best = base + tuple(p[:i])
    return best
def flat(group):   # a::{b, c::{d, e}} -> a::b, a::c::d, a::c::e
    m = re.match(r"^(.*?)\{(.*)\}$", group, re.S)
    if not m: return [group]
    parts, depth, cur = [], 0, ""
    for ch in m.group(2):
        depth += ch == "{"; depth -= ch == "}"
        if ch == "," and depth == 0: parts.append(cur); cur = ""
        else: cur += ch
    parts.append(cur)
    return [x for q in parts if q.strip() for x in flat(m.group(1) + q.strip())]
edges = {}
for m, path in mods.items():
    if m == ():   # lib.rs: `pub mod` and re-exports of old paths, no dependency
        continue
    text = open(path).read()
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", text)[0]
    text = re.sub(r"//[^\n]*", "", text)
    uses = [u for g in re.findall(r"\buse\s+([^;]+);", text) for u in flat(" ".join(g.split()))]
    uses += re.findall(r"(?<![\w:])((?:crate|super|self)(?:::\w+)+)", text)
    for u in uses:
        t = resolve(m, u.split(" as ")[0].strip())
        if t is not None and t != m and t[:len(m)] != m:
            edges.setdefault(m, {}).setdefault(t, u)
def layer(m): return LAYERS.get(m[0], 0) if m else 0
bad = 0
for a, ts in edges.items():
    for b, why in ts.items():
        if not CYCLES_ONLY and (layer(b) > layer(a) or 0 < layer(b) == layer(a) and a[0] != b[0]):
            print(f"layer: {'::'.join(a)} ({layer(a)}) uses {'::'.join(b)} ({layer(b)}) via {why}"); bad = 1
idx, low, st, on, n = {}, {}, [], set(), [0]
def scc(v):
    idx[v] = low[v] = n[0]; n[0] += 1; st.append(v); on.add(v)
    for w in edges.get(v, {}):
        if w not in idx: scc(w); low[v] = min(low[v], low[w])
        elif w in on: low[v] = min(low[v], idx[w])
    if low[v] == idx[v]:
        c = []
        while True:
            w = st.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1 and {"::".join(x) for x in c} != ALLOW:
            global bad; bad = 1
            print("cycle:", ", ".join(sorted("::".join(x) for x in c)))
            for x in c:
                for y, why in edges.get(x, {}).items():
                    if y in c: print(f"  {'::'.join(x)} -> {'::'.join(y)}: {why}")
sys.setrecursionlimit(10000)
for v in sorted(mods):
    if v not in idx: scc(v)
sys.exit(bad)
