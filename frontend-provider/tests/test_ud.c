/*
 * The UD address handle client (src/cmd/ah.c): reading received GRHs in both
 * RoCE v2 forms, the AH attributes on the wire, and CREATE_AH / BIND_AH /
 * RESOLVE_GRH against a fake masqd on a socket pair (what it was sent,
 * what the caller gets back, errors as errno values).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cmd/ah.h"
#include "masq_proto.h"
#include "transport/transport.h"
#include "check.h"

static void run(const char *name, void (*fn)(void))
{
	run_with(name, NULL, fn);
}

static const uint8_t mapped_prefix[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

static void v4_mapped(uint8_t gid[16], uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	memcpy(gid, mapped_prefix, 12);
	gid[12] = a;
	gid[13] = b;
	gid[14] = c;
	gid[15] = d;
}

/* An IPv4 header with a valid checksum at p (20 bytes). */
static void ipv4_header(uint8_t *p, const char *src, const char *dst, uint8_t tos, uint8_t ttl)
{
	uint32_t sum = 0;
	int i;

	memset(p, 0, 20);
	p[0] = 0x45;
	p[1] = tos;
	p[3] = 60;
	p[8] = ttl;
	p[9] = 17; /* UDP */
	inet_pton(AF_INET, src, p + 12);
	inet_pton(AF_INET, dst, p + 16);
	for (i = 0; i < 20; i += 2)
		sum += (uint32_t)(p[i] << 8 | p[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	p[10] = (uint8_t)(~sum >> 8);
	p[11] = (uint8_t)~sum;
}

static void test_ipv4_grh_gives_mapped_host_gids(void)
{
	struct ibv_grh grh;
	struct masq_grh_info g;
	uint8_t want[16];

	/* rxe: the first 20 bytes unused, the IPv4 header after them. */
	memset(&grh, 0, sizeof(grh));
	ipv4_header((uint8_t *)&grh + 20, "198.18.0.2", "198.18.0.1", 46 << 2, 63);
	CHECK_EQ(masq_parse_grh(&grh, &g), 0);
	v4_mapped(want, 198, 18, 0, 2);
	CHECK(memcmp(g.sgid, want, 16) == 0);
	v4_mapped(want, 198, 18, 0, 1);
	CHECK(memcmp(g.dgid, want, 16) == 0);
	CHECK_EQ(g.traffic_class, 46 << 2);
	CHECK_EQ(g.hop_limit, 63);
	CHECK_EQ(g.flow_label, 0);
}

static void test_ipv6_grh_is_read_as_such(void)
{
	struct ibv_grh grh;
	struct masq_grh_info g;

	memset(&grh, 0, sizeof(grh));
	grh.version_tclass_flow = htonl(6u << 28 | 0x28u << 20 | 0x12345);
	grh.hop_limit = 64;
	grh.next_hdr = 17;
	v4_mapped(grh.sgid.raw, 198, 18, 0, 2);
	v4_mapped(grh.dgid.raw, 198, 18, 0, 1);
	/* Its last 20 bytes (the GIDs' tails) are no valid IPv4 header. */
	CHECK_EQ(masq_parse_grh(&grh, &g), 0);
	CHECK(memcmp(g.sgid, grh.sgid.raw, 16) == 0);
	CHECK(memcmp(g.dgid, grh.dgid.raw, 16) == 0);
	CHECK_EQ(g.traffic_class, 0x28);
	CHECK_EQ(g.flow_label, 0x12345);
	CHECK_EQ(g.hop_limit, 64);
	/* Version 6 in front and a checksummed IPv4 header behind: IPv4, as
	 * libibverbs decides. */
	ipv4_header((uint8_t *)&grh + 20, "198.18.0.3", "198.18.0.1", 0, 1);
	CHECK_EQ(masq_parse_grh(&grh, &g), 0);
	CHECK_EQ(g.sgid[15], 3);
	CHECK_EQ(g.flow_label, 0);
}

static void test_neither_form_is_refused(void)
{
	struct ibv_grh grh;
	struct masq_grh_info g;

	memset(&grh, 0, sizeof(grh));
	CHECK_EQ(masq_parse_grh(&grh, &g), EPROTONOSUPPORT);
	memset(&grh, 0xa5, sizeof(grh));
	CHECK_EQ(masq_parse_grh(&grh, &g), EPROTONOSUPPORT);
}

static void test_ah_attr_round_trip(void)
{
	struct ibv_ah_attr a, b;
	struct masq_ah_attr w;

	memset(&a, 0, sizeof(a));
	v4_mapped(a.grh.dgid.raw, 10, 0, 0, 2);
	a.grh.flow_label = 0xffffffff;
	a.grh.sgid_index = 1;
	a.grh.hop_limit = 64;
	a.grh.traffic_class = 0x10;
	a.is_global = 1;
	a.sl = 3;
	a.port_num = 1;
	masq_ah_attr_to_wire(&w, &a);
	CHECK_EQ(w.flow_label, 0xFFFFF); /* what the GRH carries */
	masq_ah_attr_from_wire(&b, &w);
	a.grh.flow_label = 0xFFFFF;
	CHECK(memcmp(&a, &b, sizeof(a)) == 0);
}

/* ------------------------------------------------------------ fake masqd */

static struct {
	int fd;
	int status; /* 0, or the negative errno every reply carries */
	struct masq_create_ah_req create;
	struct masq_bind_ah_req bind;
	struct masq_resolve_grh_req resolve;
	int creates, binds, resolves;
} fake;

static void *fake_main(void *arg)
{
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;

	(void)arg;
	while ((n = recv(fake.fd, buf, sizeof(buf), 0)) > 0) {
		struct masq_hdr h;
		union {
			struct masq_msg_create_ah_reply c;
			struct masq_msg_resolve_grh_reply r;
			struct masq_hdr e;
		} out;
		size_t len = sizeof(struct masq_hdr);

		if (masq_hdr_decode(buf, (size_t)n, &h))
			break;
		memset(&out, 0, sizeof(out));
		masq_hdr_init(&out.e, h.opcode | MASQ_REPLY, sizeof(out.e));
		if (h.opcode == MASQ_OP_CREATE_AH) {
			struct masq_msg_create_ah_req q;

			if (masq_msg_create_ah_req_decode(buf, (size_t)n, &q))
				break;
			fake.create = q.body;
			fake.creates++;
			if (!fake.status) {
				masq_msg_create_ah_reply_init(&out.c);
				out.c.body.ah_id = 7;
				out.c.body.ah_attr = q.body.ah_attr;
				v4_mapped(out.c.body.ah_attr.dgid, 198, 18, 0, 2);
				out.c.body.ah_attr.sgid_index = 3;
				len = sizeof(out.c);
			}
		} else if (h.opcode == MASQ_OP_BIND_AH) {
			struct masq_msg_bind_ah_req q;

			if (masq_msg_bind_ah_req_decode(buf, (size_t)n, &q))
				break;
			fake.bind = q.body;
			fake.binds++;
		} else if (h.opcode == MASQ_OP_RESOLVE_GRH) {
			struct masq_msg_resolve_grh_req q;

			if (masq_msg_resolve_grh_req_decode(buf, (size_t)n, &q))
				break;
			fake.resolve = q.body;
			fake.resolves++;
			if (!fake.status) {
				masq_msg_resolve_grh_reply_init(&out.r);
				v4_mapped(out.r.body.sgid, 10, 0, 0, 2);
				out.r.body.sgid_index = 1;
				len = sizeof(out.r);
			}
		}
		out.e.request_id = h.request_id;
		out.e.length = (uint32_t)len;
		if (len == sizeof(struct masq_hdr))
			out.e.status = fake.status;
		if (send(fake.fd, &out, len, MSG_NOSIGNAL) < 0)
			break;
	}
	return NULL;
}

static struct masq_session sess;
static pthread_t fake_thread;

/* A session already connected to the fake (no watcher, no device). */
static void session_up(int status)
{
	int sv[2];

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		abort();
	memset(&fake, 0, sizeof(fake));
	fake.fd = sv[1];
	fake.status = status;
	memset(&sess, 0, sizeof(sess));
	sess.fd = sv[0];
	sess.wake_fd = -1;
	sess.cmd_fd = -1;
	pthread_mutex_init(&sess.lock, NULL);
	pthread_cond_init(&sess.cond, NULL);
	if (pthread_create(&fake_thread, NULL, fake_main, NULL))
		abort();
}

static void session_down(void)
{
	masq_session_close(&sess);
	pthread_join(fake_thread, NULL);
	close(fake.fd);
}

static void virtual_ah(struct ibv_ah_attr *a)
{
	memset(a, 0, sizeof(*a));
	v4_mapped(a->grh.dgid.raw, 10, 0, 0, 2);
	a->grh.sgid_index = 1;
	a->grh.hop_limit = 64;
	a->is_global = 1;
	a->port_num = 1;
}

static void test_create_ah_sends_virtual_and_returns_physical(void)
{
	struct ibv_ah_attr v, p;
	uint32_t id = 0;

	session_up(0);
	virtual_ah(&v);
	CHECK_EQ(masq_create_ah_admit(&sess, &v, &p, &id), 0);
	CHECK_EQ(fake.creates, 1);
	CHECK(memcmp(fake.create.ah_attr.dgid, v.grh.dgid.raw, 16) == 0);
	CHECK_EQ(fake.create.ah_attr.sgid_index, 1);
	CHECK_EQ(id, 7);
	CHECK_EQ(p.grh.dgid.raw[15], 2);
	CHECK_EQ(p.grh.dgid.raw[12], 198);
	CHECK_EQ(p.grh.sgid_index, 3);
	CHECK_EQ(p.is_global, 1);
	CHECK_EQ(masq_bind_ah(&sess, id, 42, &v), 0);
	CHECK_EQ(fake.bind.ah_id, 7);
	CHECK_EQ(fake.bind.ah_handle, 42);
	/* Remembered with its virtual attributes, for RESYNC_AH. */
	CHECK_EQ(sess.nahs, 1);
	CHECK_EQ(sess.ahs[0].handle, 42);
	CHECK(memcmp(sess.ahs[0].virt.dgid, v.grh.dgid.raw, 16) == 0);
	masq_destroy_ah(&sess, 42);
	CHECK_EQ(sess.nahs, 0);
	session_down();
}

static void test_refusals_become_errno(void)
{
	struct ibv_ah_attr v, p;
	struct masq_grh_info g;
	uint8_t gid[16];
	uint8_t idx;
	uint32_t id;

	session_up(-EHOSTUNREACH);
	virtual_ah(&v);
	CHECK_EQ(masq_create_ah_admit(&sess, &v, &p, &id), EHOSTUNREACH);
	memset(&g, 0, sizeof(g));
	CHECK_EQ(masq_resolve_grh(&sess, 0x12, &g, gid, &idx), EHOSTUNREACH);
	session_down();
	session_up(-EACCES);
	CHECK_EQ(masq_create_ah_admit(&sess, &v, &p, &id), EACCES);
	CHECK_EQ(masq_bind_ah(&sess, 1, 2, &v), EACCES);
	CHECK_EQ(sess.nahs, 0);
	session_down();
	/* Out of range: refused before masqd hears of it. */
	session_up(0);
	v.sl = 16;
	CHECK_EQ(masq_create_ah_admit(&sess, &v, &p, &id), EINVAL);
	CHECK_EQ(fake.creates, 0);
	session_down();
}

static void test_resolve_grh_carries_qpn_and_gids(void)
{
	struct masq_grh_info g;
	uint8_t gid[16], idx = 0;

	session_up(0);
	memset(&g, 0, sizeof(g));
	v4_mapped(g.sgid, 198, 18, 0, 2);
	v4_mapped(g.dgid, 198, 18, 0, 1);
	CHECK_EQ(masq_resolve_grh(&sess, 0x12, &g, gid, &idx), 0);
	CHECK_EQ(fake.resolve.src_qp, 0x12);
	CHECK(memcmp(fake.resolve.sgid, g.sgid, 16) == 0);
	CHECK(memcmp(fake.resolve.dgid, g.dgid, 16) == 0);
	CHECK_EQ(gid[15], 2);
	CHECK_EQ(gid[12], 10);
	CHECK_EQ(idx, 1);
	session_down();
}

int main(void)
{
	run("ipv4_grh_gives_mapped_host_gids", test_ipv4_grh_gives_mapped_host_gids);
	run("ipv6_grh_is_read_as_such", test_ipv6_grh_is_read_as_such);
	run("neither_form_is_refused", test_neither_form_is_refused);
	run("ah_attr_round_trip", test_ah_attr_round_trip);
	run("create_ah_sends_virtual_and_returns_physical",
	    test_create_ah_sends_virtual_and_returns_physical);
	run("refusals_become_errno", test_refusals_become_errno);
	run("resolve_grh_carries_qpn_and_gids", test_resolve_grh_carries_qpn_and_gids);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
