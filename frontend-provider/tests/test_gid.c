/*
 * The virtual GID table (src/masq_gid.c) as a fake masqd gives it over a
 * socket pair (QUERY_GID_TABLE), in a table as long as rxe's (1024): what
 * ibv_query_gid, ibv_query_gid_ex, ibv_query_gid_table and
 * ibv_query_gid_type answer for a populated entry, an empty one, one past
 * the table and another port, errno included, as the kernel answers them
 * for the physical port.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/transport.h"
#include "masq_gid.h"
#include "masq_proto.h"
#include "check.h"

#define RXE_GID_TBL_LEN 1024

static void run(const char *name, void (*fn)(void))
{
	run_with(name, NULL, fn);
}

static const uint8_t link_local[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
					0xf0, 0x23, 0x2e, 0xff, 0xfe, 0x35, 0x5d, 0x41 };
static const uint8_t vip[16] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1 };
static const uint8_t zero[16];

/* ------------------------------------------------------------ fake masqd */

static struct {
	int fd;
	struct masq_gid_table table; /* what it answers */
	int port_asked;
} fake;

static void *fake_main(void *arg)
{
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;

	(void)arg;
	while ((n = recv(fake.fd, buf, sizeof(buf), 0)) > 0) {
		struct masq_msg_query_gid_table_req q;
		struct masq_msg_query_gid_table_reply r;

		if (masq_msg_query_gid_table_req_decode(buf, (size_t)n, &q))
			break;
		fake.port_asked = q.body.port;
		masq_msg_query_gid_table_reply_init(&r);
		r.hdr.request_id = q.hdr.request_id;
		r.body = fake.table;
		if (send(fake.fd, &r, sizeof(r), MSG_NOSIGNAL) < 0)
			break;
	}
	return NULL;
}

static void add_entry(uint32_t index, uint32_t type, const uint8_t gid[16])
{
	struct masq_gid_entry *e = &fake.table.entries[fake.table.count++];

	e->index = index;
	e->gid_type = type;
	memcpy(e->gid, gid, 16);
}

/* The table masqd gives today (0: link-local, 1: the vIP), as libmasq
 * holds it after ibv_open_device on a port of phys_len entries. */
static struct masq_gid_view table_from_masqd(int phys_len, int sparse)
{
	struct masq_gid_view t;
	struct masq_session sess;
	pthread_t th;
	int sv[2];

	memset(&fake, 0, sizeof(fake));
	add_entry(0, IBV_GID_TYPE_ROCE_V2, link_local);
	add_entry(sparse ? 3 : 1, IBV_GID_TYPE_ROCE_V2, vip);
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		abort();
	fake.fd = sv[1];
	memset(&sess, 0, sizeof(sess));
	sess.fd = sv[0];
	sess.wake_fd = -1;
	sess.cmd_fd = -1;
	sess.port = 1;
	pthread_mutex_init(&sess.lock, NULL);
	pthread_cond_init(&sess.cond, NULL);
	if (pthread_create(&th, NULL, fake_main, NULL))
		abort();
	memset(&t, 0, sizeof(t));
	CHECK_EQ(masq_query_gid_table(&sess, t.gids, &t.ngids), 0);
	CHECK_EQ(fake.port_asked, 1);
	CHECK_EQ(t.ngids, 2);
	masq_session_close(&sess);
	pthread_join(th, NULL);
	close(fake.fd);
	t.port = 1;
	masq_gid_view_set_len(&t, phys_len);
	return t;
}

/* ------------------------------------------------------------ tests */

static void test_length_is_the_physical_ports(void)
{
	struct masq_gid_view t = table_from_masqd(RXE_GID_TBL_LEN, 0);

	CHECK_EQ(t.len, RXE_GID_TBL_LEN);
	/* Unknown (the port query failed): as long as the entries need. */
	t = table_from_masqd(0, 0);
	CHECK_EQ(t.len, 2);
	t = table_from_masqd(0, 1);
	CHECK_EQ(t.len, 4);
	/* Never shorter than the entries masqd gave. */
	t = table_from_masqd(2, 1);
	CHECK_EQ(t.len, 4);
}

static void test_populated_entry(void)
{
	struct masq_gid_view t = table_from_masqd(RXE_GID_TBL_LEN, 0);
	struct ibv_gid_entry e;
	union ibv_gid gid;
	unsigned int type = 7;

	CHECK_EQ(masq_gid_query(&t, 1, 1, &gid), 0);
	CHECK(memcmp(gid.raw, vip, 16) == 0);
	CHECK_EQ(masq_gid_query(&t, 1, 0, &gid), 0);
	CHECK(memcmp(gid.raw, link_local, 16) == 0);

	memset(&e, 0xa5, sizeof(e));
	CHECK_EQ(masq_gid_query_ex(&t, 1, 1, &e, 0, sizeof(e)), 0);
	CHECK(memcmp(e.gid.raw, vip, 16) == 0);
	CHECK_EQ(e.gid_index, 1);
	CHECK_EQ(e.port_num, 1);
	CHECK_EQ(e.gid_type, IBV_GID_TYPE_ROCE_V2);
	CHECK_EQ(e.ndev_ifindex, 0);

	CHECK_EQ(masq_gid_query_type(&t, 1, 1, &type), 0);
	CHECK_EQ(type, 1); /* RoCE v2 */
}

static void test_empty_entry_answers_as_the_kernels(void)
{
	struct masq_gid_view t = table_from_masqd(RXE_GID_TBL_LEN, 0);
	struct ibv_gid_entry e, before;
	union ibv_gid gid;
	unsigned int type = 7;
	uint32_t i;

	for (i = 2; i < RXE_GID_TBL_LEN; i += 1021) { /* the first and the last */
		/* ibv_query_gid: success and a zero GID; errno as the ioctl
		 * left it. */
		memset(&gid, 0xff, sizeof(gid));
		errno = 0;
		CHECK_EQ(masq_gid_query(&t, 1, (int)i, &gid), 0);
		CHECK(memcmp(gid.raw, zero, 16) == 0);
		CHECK_EQ(errno, ENODATA);

		/* ibv_query_gid_ex: ENODATA, the entry untouched. */
		memset(&e, 0xa5, sizeof(e));
		before = e;
		errno = 0;
		CHECK_EQ(masq_gid_query_ex(&t, 1, i, &e, 0, sizeof(e)), ENODATA);
		CHECK_EQ(errno, ENODATA);
		CHECK(memcmp(&e, &before, sizeof(e)) == 0);

		/* rdma-core's ibv_query_gid_type: IB/RoCE v1. */
		CHECK_EQ(masq_gid_query_type(&t, 1, i, &type), 0);
		CHECK_EQ(type, 0);
	}

	/* A hole between masqd's entries is empty too. */
	t = table_from_masqd(RXE_GID_TBL_LEN, 1);
	CHECK_EQ(masq_gid_query_ex(&t, 1, 1, &e, 0, sizeof(e)), ENODATA);
	CHECK_EQ(masq_gid_query_ex(&t, 1, 3, &e, 0, sizeof(e)), 0);
	CHECK(memcmp(e.gid.raw, vip, 16) == 0);
	CHECK_EQ(e.gid_index, 3);
}

static void test_past_the_table_and_other_ports_are_einval(void)
{
	struct masq_gid_view t = table_from_masqd(RXE_GID_TBL_LEN, 0);
	struct ibv_gid_entry e;
	union ibv_gid gid;
	unsigned int type;

	errno = 0;
	CHECK_EQ(masq_gid_query(&t, 1, RXE_GID_TBL_LEN, &gid), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(masq_gid_query(&t, 1, -1, &gid), -1);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(masq_gid_query(&t, 2, 1, &gid), -1);
	CHECK_EQ(errno, EINVAL);

	CHECK_EQ(masq_gid_query_ex(&t, 1, RXE_GID_TBL_LEN, &e, 0, sizeof(e)), EINVAL);
	CHECK_EQ(masq_gid_query_ex(&t, 0, 1, &e, 0, sizeof(e)), EINVAL);
	CHECK_EQ(masq_gid_query_ex(&t, 2, 2, &e, 0, sizeof(e)), EINVAL);
	CHECK_EQ(masq_gid_query_ex(&t, 1, 1, &e, 1, sizeof(e)), EINVAL); /* flags */
	CHECK_EQ(masq_gid_query_ex(&t, 1, 1, &e, 0, sizeof(e) - 1), EINVAL);

	errno = 0;
	CHECK_EQ(masq_gid_query_type(&t, 1, RXE_GID_TBL_LEN, &type), -1);
	CHECK_EQ(errno, EINVAL);
}

static void test_table_lists_populated_entries_only(void)
{
	struct masq_gid_view t = table_from_masqd(RXE_GID_TBL_LEN, 0);
	struct ibv_gid_entry e[4];

	memset(e, 0xa5, sizeof(e));
	CHECK_EQ(masq_gid_query_table(&t, e, 4, 0, sizeof(e[0])), 2);
	CHECK_EQ(e[0].gid_index, 0);
	CHECK(memcmp(e[0].gid.raw, link_local, 16) == 0);
	CHECK_EQ(e[1].gid_index, 1);
	CHECK(memcmp(e[1].gid.raw, vip, 16) == 0);
	CHECK_EQ(e[1].port_num, 1);
	CHECK_EQ(e[1].gid_type, IBV_GID_TYPE_ROCE_V2);
	/* Exactly as many as there are populated entries is enough. */
	CHECK_EQ(masq_gid_query_table(&t, e, 2, 0, sizeof(e[0])), 2);
	/* Fewer: the kernel's -EINVAL (rdma_query_gid_table). */
	errno = 0;
	CHECK_EQ(masq_gid_query_table(&t, e, 1, 0, sizeof(e[0])), -EINVAL);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(masq_gid_query_table(&t, e, 0, 0, sizeof(e[0])), -EINVAL);
	CHECK_EQ(masq_gid_query_table(&t, e, 4, 1, sizeof(e[0])), -EINVAL);

	/* Sparse: the entries at their own indexes. */
	t = table_from_masqd(RXE_GID_TBL_LEN, 1);
	CHECK_EQ(masq_gid_query_table(&t, e, 4, 0, sizeof(e[0])), 2);
	CHECK_EQ(e[1].gid_index, 3);
}

int main(void)
{
	run("length_is_the_physical_ports", test_length_is_the_physical_ports);
	run("populated_entry", test_populated_entry);
	run("empty_entry_answers_as_the_kernels", test_empty_entry_answers_as_the_kernels);
	run("past_the_table_and_other_ports_are_einval",
	    test_past_the_table_and_other_ports_are_einval);
	run("table_lists_populated_entries_only", test_table_lists_populated_entries_only);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
