// SPDX-License-Identifier: Apache-2.0
/*
 * The backstop's per-connection checks on software RoCE, as eBPF: the
 * elements an RTR waits for are hash map entries here, one bpf() call
 * each, where in nftables they cost a transaction and its commit
 * (docs/design.md, "The backstop's eBPF maps"). nftables keeps the rest:
 * the cgroups' dispatch, unknown cgroups, the hosts a tenant's UD
 * address handles may send to.
 *
 * - masq_ingress (tc ingress on each rail's netdev, the only netdevs whose
 *   RoCE packets rxe takes): a packet to a tenant QP (tenant_qps) passes
 *   only from a peer host it is connected to (conn_to); a datagram to a
 *   tenant's UD QP (ud_qps, which gives its VNI) only from a UD QP that
 *   its host's masqd announced in the same VNI (ud_from).
 * - masq_egress (cgroup/skb egress on each endpoint's and adopted cgroup):
 *   a tenant's RC/UC packets go only to the (host, QPN) pairs its endpoint
 *   was admitted to (egress).
 *
 * Keys hold addresses in network byte order and QPNs in host order.
 * Only IPv4 RoCEv2 is looked at: masq's underlay is IPv4, and nftables
 * drops a tenant's IPv6 RoCE before this runs.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define ROCE_PORT 4791
/* The BTH opcode's top 3 bits (its transport): 0b011 is UD. */
#define BTH_UD 3
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
/* How deep in the cgroup tree an endpoint's or adopted cgroup is looked
 * for (nftables' adopted maps go as deep: MAX_ADOPTED_DEPTH). */
#define MAX_CGROUP_LEVEL 8
/* Room in each map (entries are allocated as they come: no prealloc). */
#define MAX_ENTRIES 262144
#define DROPS_INGRESS 0
#define DROPS_UD_INGRESS 0xfffffffe
#define DROPS_NO_ENDPOINT 0xffffffff

struct conn_key {
	__u32 peer;
	__u32 local;
	__u32 qpn;
};

struct qp_key {
	__u32 local;
	__u32 qpn;
};

/* Another host's QP: (its address, its QPN). */
struct host_qp {
	__u32 host;
	__u32 qpn;
};

struct egress_key {
	__u32 endpoint;
	__u32 host;
	__u32 qpn;
};

#define PINNED_HASH(name, key_t, value_t)                                    \
	struct {                                                             \
		__uint(type, BPF_MAP_TYPE_HASH);                             \
		__uint(max_entries, MAX_ENTRIES);                            \
		__uint(map_flags, BPF_F_NO_PREALLOC);                        \
		__type(key, key_t);                                          \
		__type(value, value_t);                                      \
		__uint(pinning, LIBBPF_PIN_BY_NAME);                         \
	} name SEC(".maps")

/* (peer host, local address, local QPN): the peer may reach that QP. */
PINNED_HASH(conn_to, struct conn_key, __u8);
/* (local address, QPN): a tenant QP, guarded. */
PINNED_HASH(tenant_qps, struct qp_key, __u8);
/* (local address, QPN): a tenant's UD QP -> its VNI. */
PINNED_HASH(ud_qps, struct qp_key, __u32);
/* (host, QPN): another host's UD QP, as its masqd announced it -> its
 * VNI (only VNIs this host serves). */
PINNED_HASH(ud_from, struct host_qp, __u32);
/* (endpoint, peer host, peer QPN): the endpoint may send there. */
PINNED_HASH(egress, struct egress_key, __u8);
/* A cgroup's id -> the endpoint whose packets its sockets send. */
PINNED_HASH(cgroup_endpoint, __u64, __u32);
struct drops {
	__u64 packets;
	__u64 bytes;
};

/* Drops: ingress's, egress's of a cgroup with no endpoint, else an
 * endpoint's egress. */
PINNED_HASH(drops, __u32, struct drops);

/* masqd's numbers for its endpoints (the egress keys'), by name (NUL
 * padded): kept with the maps, so that a restarted masqd numbers them as
 * the elements it finds do. The programs do not read it. */
struct endpoint_name {
	char name[256];
};
PINNED_HASH(endpoint_ids, struct endpoint_name, __u32);

/* The parts of a RoCEv2 packet the checks read. */
struct roce {
	__u32 saddr;
	__u32 daddr;
	__u32 dest_qpn;
	int ud;
	/* Where the UDP header starts. */
	__u32 udp;
};

static __always_inline void count_drop(__u32 key, struct __sk_buff *skb)
{
	struct drops *d = bpf_map_lookup_elem(&drops, &key);

	if (d) {
		__sync_fetch_and_add(&d->packets, 1);
		__sync_fetch_and_add(&d->bytes, skb->len);
	} else {
		struct drops first = { .packets = 1, .bytes = skb->len };

		/* Another CPU's first may win: then add to it. */
		if (bpf_map_update_elem(&drops, &key, &first, BPF_NOEXIST)) {
			d = bpf_map_lookup_elem(&drops, &key);
			if (d) {
				__sync_fetch_and_add(&d->packets, 1);
				__sync_fetch_and_add(&d->bytes, skb->len);
			}
		}
	}
}

/*
 * Read the RoCEv2 headers of the IPv4 packet at offset `ip` of `skb`.
 * 1: it is RoCEv2; 0: it is not (or not a first fragment, which carries
 * no port: without its first fragment it cannot be reassembled);
 * -1: a fragmented RoCE packet or one too short for its BTH (rxe sends
 * neither: dropped).
 */
static __always_inline int read_roce(struct __sk_buff *skb, __u32 ip, struct roce *r)
{
	struct iphdr iph;
	__u8 bth[8];
	__be16 dport;
	__u32 udp;

	if (bpf_skb_load_bytes(skb, ip, &iph, sizeof(iph)) < 0)
		return 0;
	if (iph.version != 4 || iph.protocol != IPPROTO_UDP || iph.ihl < 5)
		return 0;
	if (iph.frag_off & bpf_htons(IP_OFFSET))
		return 0;
	udp = ip + iph.ihl * 4;
	if (bpf_skb_load_bytes(skb, udp + 2, &dport, sizeof(dport)) < 0)
		return 0;
	if (dport != bpf_htons(ROCE_PORT))
		return 0;
	if (iph.frag_off & bpf_htons(IP_MF))
		return -1;
	if (bpf_skb_load_bytes(skb, udp + 8, bth, sizeof(bth)) < 0)
		return -1;
	r->saddr = iph.saddr;
	r->daddr = iph.daddr;
	r->dest_qpn = (__u32)bth[5] << 16 | (__u32)bth[6] << 8 | bth[7];
	r->ud = (bth[0] >> 5) == BTH_UD;
	r->udp = udp;
	return 1;
}

/*
 * A UD datagram's sending QP: the DETH's source QPN (after 8 bytes of UDP
 * header, 12 of BTH, 4 of Q_Key and a reserved byte), which rxe writes
 * from the real QP. -1 if the packet is too short for it.
 */
static __always_inline int deth_src_qpn(struct __sk_buff *skb, const struct roce *r, __u32 *qpn)
{
	__u8 src[3];

	if (bpf_skb_load_bytes(skb, r->udp + 8 + 12 + 5, src, sizeof(src)) < 0)
		return -1;
	*qpn = (__u32)src[0] << 16 | (__u32)src[1] << 8 | src[2];
	return 0;
}

/* A datagram to a tenant's UD QP passes only from a UD QP of its VNI. */
static __always_inline int ud_ingress(struct __sk_buff *skb, const struct roce *r)
{
	struct qp_key qp = { .local = r->daddr, .qpn = r->dest_qpn };
	struct host_qp from = { .host = r->saddr };
	__u32 *vni, *from_vni;

	vni = bpf_map_lookup_elem(&ud_qps, &qp);
	/* Not a tenant's (QP1's MADs, the host's own UD QPs). */
	if (!vni)
		return TC_ACT_OK;
	if (deth_src_qpn(skb, r, &from.qpn) == 0) {
		from_vni = bpf_map_lookup_elem(&ud_from, &from);
		if (from_vni && *from_vni == *vni)
			return TC_ACT_OK;
	}
	count_drop(DROPS_UD_INGRESS, skb);
	return TC_ACT_SHOT;
}

SEC("classifier")
int masq_ingress(struct __sk_buff *skb)
{
	__u16 proto = bpf_ntohs(skb->protocol);
	__u32 ip = ETH_HLEN;
	struct roce r;
	int is;

	/* Up to two VLAN tags not taken off by the NIC (a VLAN netdev over a
	 * rail reaches the rail's rxe device too). */
	for (int i = 0; i < 2 && (proto == ETH_P_8021Q || proto == ETH_P_8021AD); i++) {
		__be16 inner;

		if (bpf_skb_load_bytes(skb, ip + 2, &inner, sizeof(inner)) < 0)
			return TC_ACT_OK;
		proto = bpf_ntohs(inner);
		ip += 4;
	}
	if (proto != ETH_P_IP)
		return TC_ACT_OK;
	is = read_roce(skb, ip, &r);
	if (is < 0) {
		count_drop(DROPS_INGRESS, skb);
		return TC_ACT_SHOT;
	}
	if (is == 0)
		return TC_ACT_OK;
	if (r.ud)
		return ud_ingress(skb, &r);
	struct conn_key conn = { .peer = r.saddr, .local = r.daddr, .qpn = r.dest_qpn };

	if (bpf_map_lookup_elem(&conn_to, &conn))
		return TC_ACT_OK;
	struct qp_key qp = { .local = r.daddr, .qpn = r.dest_qpn };

	if (bpf_map_lookup_elem(&tenant_qps, &qp)) {
		count_drop(DROPS_INGRESS, skb);
		return TC_ACT_SHOT;
	}
	return TC_ACT_OK;
}

/* The endpoint of the cgroup a packet's socket is in, or an ancestor's. */
static __always_inline __u32 *endpoint_of(struct __sk_buff *skb)
{
	for (int level = MAX_CGROUP_LEVEL; level >= 1; level--) {
		__u64 id = bpf_skb_ancestor_cgroup_id(skb, level);
		__u32 *ep;

		if (!id)
			continue;
		ep = bpf_map_lookup_elem(&cgroup_endpoint, &id);
		if (ep)
			return ep;
	}
	return 0;
}

SEC("cgroup_skb/egress")
int masq_egress(struct __sk_buff *skb)
{
	struct roce r;
	__u32 *ep;
	int is;

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return 1;
	is = read_roce(skb, 0, &r);
	if (is == 0 || (is > 0 && r.ud))
		return 1;
	ep = endpoint_of(skb);
	if (!ep) {
		/* Attached here, yet no endpoint: masqd is changing the map
		 * (it fills it before attaching). Fail closed. */
		count_drop(DROPS_NO_ENDPOINT, skb);
		return 0;
	}
	if (is > 0) {
		struct egress_key k = { .endpoint = *ep, .host = r.daddr, .qpn = r.dest_qpn };

		if (bpf_map_lookup_elem(&egress, &k))
			return 1;
	}
	count_drop(*ep, skb);
	return 0;
}

/* No GPL-only helper is called. */
char LICENSE[] SEC("license") = "Apache-2.0";
