#!/bin/bash
# Loads rendered masq rulesets on a real Linux bridge and checks that they
# enforce the policy: three endpoint namespaces of VNI 100 (a 10.0.0.1 web,
# b 10.0.0.2 db, c 10.0.1.5 batch) on bridge br100, and two of VNI 200
# reusing addresses (z 10.0.1.5, w 10.0.0.2 which admits nothing) on br200,
# all in one "host" namespace with veth host ends veth-a ... veth-w.
# Usage: bridge_check.sh DIR, where DIR holds a.nft ... w.nft rendered for
# those interfaces (tests/nft.rs does this).
# Needs root, nf_conntrack_bridge and nft_meta_bridge. Everything lives in
# namespaces made here and is removed on exit.
set -euo pipefail
dir=$1
tag=mqp$$
H=${tag}h
pids=()

cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for e in h a b c z w; do ip netns del "${tag}$e" 2>/dev/null || true; done
}
trap cleanup EXIT

helper=$(mktemp)
trap 'cleanup; rm -f "$helper"' EXIT
cat >"$helper" <<'EOF'
import socket, sys, threading, time
mode = sys.argv[1]
if mode == "serve":
    # serve tcp:PORT udp:PORT ...: echo whatever arrives
    def tcp(port):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port)); s.listen(16)
        while True:
            c, _ = s.accept()
            try:
                c.sendall(c.recv(64))
            finally:
                c.close()
    def udp(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
        while True:
            d, a = s.recvfrom(64); s.sendto(d, a)
    for spec in sys.argv[2:]:
        proto, port = spec.split(":")
        threading.Thread(target=tcp if proto == "tcp" else udp, args=(int(port),), daemon=True).start()
    time.sleep(120)
else:
    # client PROTO HOST PORT [SPORT]: exit 0 if the echo comes back in 1.5 s
    proto, host, port = sys.argv[2], sys.argv[3], int(sys.argv[4])
    sport = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    try:
        if proto == "icmp":
            # Echo request by raw socket: ping may not be installed.
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.settimeout(1.5)
            body = bytes([8, 0, 0, 0, 0x12, 0x34, 0, 1]) + b"masq"
            csum = sum(int.from_bytes(body[i:i+2], "big") for i in range(0, len(body), 2))
            csum = (csum & 0xffff) + (csum >> 16); csum = ~(csum + (csum >> 16)) & 0xffff
            s.sendto(body[:2] + csum.to_bytes(2, "big") + body[4:], (host, 0))
            ok = False
            while not ok:
                d = s.recv(128); ihl = (d[0] & 15) * 4
                ok = d[ihl] == 0 and d[ihl+4:ihl+6] == b"\x12\x34"
        elif proto == "tcp":
            s = socket.create_connection((host, port), timeout=1.5)
            s.sendall(b"masq"); ok = s.recv(64) == b"masq"
        else:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.5)
            s.bind(("0.0.0.0", sport))
            s.sendto(b"masq", (host, port)); ok = s.recvfrom(64)[0] == b"masq"
    except OSError:
        ok = False
    sys.exit(0 if ok else 1)
EOF

ip netns add "$H"
ip -n "$H" link set lo up
declare -A vip=([a]=10.0.0.1 [b]=10.0.0.2 [c]=10.0.1.5 [z]=10.0.1.5 [w]=10.0.0.2)
declare -A br=([a]=br100 [b]=br100 [c]=br100 [z]=br200 [w]=br200)
for b in br100 br200; do
    ip -n "$H" link add "$b" type bridge
    ip -n "$H" link set "$b" up
done
for e in a b c z w; do
    ns=${tag}$e
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip -n "$H" link add "veth-$e" type veth peer name eth0 netns "$ns"
    ip -n "$H" link set "veth-$e" master "${br[$e]}" up
    ip -n "$ns" addr add "${vip[$e]}/16" dev eth0
    ip -n "$ns" link set eth0 up
done
for e in a b c z w; do
    ip netns exec "$H" nft -f "$dir/$e.nft"
done

ip netns exec "${tag}a" python3 "$helper" serve tcp:80 & pids+=($!)
ip netns exec "${tag}b" python3 "$helper" serve tcp:18515 tcp:18516 udp:5005 udp:6000 & pids+=($!)
ip netns exec "${tag}c" python3 "$helper" serve tcp:80 & pids+=($!)
ip netns exec "${tag}w" python3 "$helper" serve udp:5005 & pids+=($!)
sleep 1

fail=0
expect() { # expect allow|deny FROM PROTO TO PORT why [SPORT]
    local want=$1 from=$2 proto=$3 to=$4 port=$5 why=$6 sport=${7:-0} got
    if ip netns exec "${tag}$from" python3 "$helper" client "$proto" "${vip[$to]}" "$port" "$sport"; then
        got=allow
    else
        got=deny
    fi
    printf '%-5s %s -> %s %s/%-5s %-5s %s\n' "$([ "$got" = "$want" ] && echo ok || echo FAIL)" \
        "$from" "$to" "$proto" "$port" "$got" "$why"
    [ "$got" = "$want" ] || fail=1
}
expect allow a tcp b 18515 "web->db tcp 18515; reply passes db's egress [] by state"
expect deny  a tcp b 18516 "db ingress has no rule for 18516"
expect deny  c tcp b 18515 "db ingress: batch subnet gets udp only"
expect allow c udp b 5005  "batch egress udp to db, db ingress udp 5000-5010; reply by state"
expect deny  c udp b 6000  "outside db's udp range"
expect deny  c tcp a 80    "batch egress only to db (web's ingress would allow)"
expect deny  b tcp a 80    "db egress: []"
expect deny  a tcp c 80    "batch has no ingress rules"
expect allow b icmp c 0     "icmp is not filtered (only tcp/udp are)"
# Same 5-tuple in another VNI: c's flow must not make z's look established.
expect allow c udp b 5005  "VNI 100 flow from source port 40000" 40000
expect deny  z udp w 5005  "VNI 200, same addresses and ports: own conntrack zone, w admits nothing" 40000
# The connections above were tracked in the VNI's zone (101).
if command -v conntrack >/dev/null; then
    n=$(ip netns exec "$H" conntrack -L -w 101 2>/dev/null | grep -c 'dport=18515' || true)
    echo "conntrack entries in zone 101 for dport 18515: $n"
    [ "$n" -ge 1 ] || fail=1
fi
exit $fail
