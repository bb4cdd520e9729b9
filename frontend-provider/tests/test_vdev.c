/*
 * Which physical devices ibv_get_device_list shows, and as what
 * (src/masq_vdev.c), against a fake masqd thread describing the endpoint's
 * virtual devices: an older masqd's one device, with never a HELLO naming
 * another; several devices, each described by its own HELLO and shown in
 * vdev order; the ones masqd refuses or the process cannot see left out;
 * none while masqd is away.
 * No RDMA device: the physical devices are structs with names.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/transport.h"
#include "masq_proto.h"
#include "masq_vdev.h"
#include "check.h"
#include "fake_masqd.h"

/* ------------------------------------------------------------ fake masqd */

static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	unsigned int count;  /* vdev_count to answer; 0: as an older masqd */
	const char *phys[16]; /* each device's physical one; NULL: refused */
	uint8_t hellos[64];   /* the device each HELLO named, in order */
	int nhellos;
} srv;

static void reply_status(int c, uint32_t req_id, int32_t status)
{
	struct masq_hdr h;

	masq_hdr_init(&h, MASQ_OP_HELLO | MASQ_REPLY, sizeof(h));
	h.request_id = req_id;
	h.status = status;
	(void)!send(c, &h, sizeof(h), MSG_NOSIGNAL);
}

static void serve_hello(int c, const uint8_t *buf, size_t n)
{
	struct masq_msg_hello_req q;
	struct masq_msg_hello_reply r;
	unsigned int v;

	if (masq_msg_hello_req_decode(buf, n, &q))
		return;
	v = q.body.vdev;
	pthread_mutex_lock(&srv_lock);
	if (srv.nhellos < 64)
		srv.hellos[srv.nhellos++] = (uint8_t)v;
	if (v >= (srv.count ? srv.count : 1) || v >= 16 || !srv.phys[v]) {
		pthread_mutex_unlock(&srv_lock);
		reply_status(c, q.hdr.request_id, -ENODEV);
		return;
	}
	masq_msg_hello_reply_init(&r);
	r.hdr.request_id = q.hdr.request_id;
	snprintf(r.body.vdev_name, sizeof(r.body.vdev_name), "vrdma%u", v);
	masq_copy_name(r.body.phys_dev_name, sizeof(r.body.phys_dev_name), srv.phys[v]);
	r.body.node_guid = 0x1000 + v;
	r.body.phys_port = 1;
	r.body.vdev_count = (uint8_t)srv.count;
	pthread_mutex_unlock(&srv_lock);
	(void)!send(c, &r, sizeof(r), MSG_NOSIGNAL);
}

/* One connection at a time, as libmasq describes the devices in turn. */
static void *server_main(void *arg)
{
	int lfd = *(int *)arg, c;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;

	while ((c = accept(lfd, NULL, NULL)) >= 0) {
		while ((n = recv(c, buf, sizeof(buf), 0)) > 0)
			serve_hello(c, buf, (size_t)n);
		close(c);
	}
	return NULL;
}

/* Describe count devices (0: an older masqd), phys[i] backing device i. */
static void serve(unsigned int count, const char *const *phys, unsigned int nphys)
{
	unsigned int i;

	pthread_mutex_lock(&srv_lock);
	memset(&srv, 0, sizeof(srv));
	srv.count = count;
	for (i = 0; i < nphys && i < 16; i++)
		srv.phys[i] = phys[i];
	pthread_mutex_unlock(&srv_lock);
}

static int hellos(uint8_t *out)
{
	int n;

	pthread_mutex_lock(&srv_lock);
	n = srv.nhellos;
	memcpy(out, srv.hellos, sizeof(srv.hellos));
	pthread_mutex_unlock(&srv_lock);
	return n;
}

/* ------------------------------------------------------------ tests */

/* The host's physical devices, as libibverbs would list them. */
static struct ibv_device phys[3];

static void fresh_devices(void)
{
	static const char *const names[] = { "rxe0", "rxe1", "mlx5_0" };
	int i;

	for (i = 0; i < 3; i++)
		snprintf(phys[i].name, sizeof(phys[i].name), "%s", names[i]);
}

/* What ibv_get_device_list would return: the kept ones in list, the
 * others (to be put) in others. */
static int select_devices(struct ibv_device *list[4], struct ibv_device *others[4])
{
	int i;

	for (i = 0; i < 3; i++)
		list[i] = &phys[i];
	list[3] = NULL;
	return masq_vdev_select(list, 3, others);
}

static void test_an_older_masqd_shows_one_device_and_hears_of_no_other(void)
{
	static const char *const backing[] = { "rxe0" };
	struct ibv_device *list[4], *others[4];
	struct masq_device d;
	uint8_t seen[64];
	int round;

	serve(0, backing, 1);
	for (round = 1; round <= 2; round++) { /* the second: already renamed */
		CHECK_EQ(select_devices(list, others), 1);
		CHECK(list[0] == &phys[0] && list[1] == NULL);
		CHECK(strcmp(phys[0].name, "vrdma0") == 0);
		CHECK(others[0] == &phys[1] && others[1] == &phys[2] && others[2] == NULL);
		CHECK_EQ(hellos(seen), round);
		CHECK_EQ(seen[round - 1], 0);
	}
	CHECK_EQ(masq_vdev_lookup(&phys[0], &d), 0);
	CHECK_EQ(d.vdev, 0);
	CHECK_EQ(d.vdev_count, 1);
	CHECK_EQ(d.node_guid, 0x1000);
	CHECK_EQ(masq_vdev_lookup(&phys[1], &d), -1);
}

static void test_two_devices_are_described_in_turn_and_shown_in_vdev_order(void)
{
	static const char *const backing[] = { "rxe1", "rxe0" };
	struct ibv_device *list[4], *others[4];
	struct masq_device d;
	uint8_t seen[64];
	int round;

	serve(2, backing, 2);
	for (round = 1; round <= 2; round++) {
		CHECK_EQ(select_devices(list, others), 2);
		CHECK(list[0] == &phys[1] && list[1] == &phys[0] && list[2] == NULL);
		CHECK(strcmp(phys[1].name, "vrdma0") == 0);
		CHECK(strcmp(phys[0].name, "vrdma1") == 0);
		CHECK(others[0] == &phys[2] && others[1] == NULL);
		CHECK_EQ(hellos(seen), 2 * round);
		CHECK_EQ(seen[2 * round - 2], 0);
		CHECK_EQ(seen[2 * round - 1], 1);
	}
	CHECK_EQ(masq_vdev_lookup(&phys[0], &d), 0);
	CHECK_EQ(d.vdev, 1);
	CHECK_EQ(d.node_guid, 0x1001);
	CHECK(strcmp(d.phys_dev_name, "rxe0") == 0);
	CHECK_EQ(masq_vdev_lookup(&phys[1], &d), 0);
	CHECK_EQ(d.vdev, 0);
}

static void test_a_refused_or_unseen_device_is_left_out(void)
{
	static const char *const backing[] = { "rxe0", NULL, "rxe9", "rxe1" };
	struct ibv_device *list[4], *others[4];
	struct masq_device d;
	uint8_t seen[64];
	int i;

	serve(4, backing, 4);
	CHECK_EQ(select_devices(list, others), 2);
	CHECK(list[0] == &phys[0] && list[1] == &phys[1] && list[2] == NULL);
	CHECK(strcmp(phys[1].name, "vrdma3") == 0);
	CHECK_EQ(masq_vdev_lookup(&phys[1], &d), 0);
	CHECK_EQ(d.vdev, 3);
	CHECK_EQ(hellos(seen), 4);
	for (i = 0; i < 4; i++)
		CHECK_EQ(seen[i], i);
}

static void test_devices_past_libmasqs_limit_are_not_asked_for(void)
{
	static const char *const backing[] = { "rxe0" };
	struct ibv_device *list[4], *others[4];
	uint8_t seen[64];
	int i;

	serve(MASQ_MAX_VDEVS + 2, backing, 1);
	CHECK_EQ(select_devices(list, others), 1);
	CHECK_EQ(hellos(seen), MASQ_MAX_VDEVS);
	for (i = 0; i < MASQ_MAX_VDEVS; i++)
		CHECK_EQ(seen[i], i);
}

static void test_without_masqd_nothing_is_shown(void)
{
	const char *path = getenv("MASQ_SOCKET");
	struct ibv_device *list[4], *others[4];
	struct masq_device d;
	char *saved = path ? strdup(path) : NULL;

	setenv("MASQ_SOCKET", "/nonexistent/masq.sock", 1);
	CHECK_EQ(select_devices(list, others), 0);
	CHECK(list[0] == NULL);
	CHECK(others[0] == &phys[0] && others[1] == &phys[1] && others[2] == &phys[2]);
	/* Shown before: still the virtual device, for the app that kept it. */
	CHECK_EQ(masq_vdev_lookup(&phys[0], &d), 0);
	CHECK_EQ(d.node_guid, 0x1000);
	if (saved)
		setenv("MASQ_SOCKET", saved, 1);
	free(saved);
}

int main(void)
{
	struct fake_masqd masqd;

	if (fake_masqd_start(&masqd, "vdev", server_main))
		return 1;

	run_with("an_older_masqd_shows_one_device_and_hears_of_no_other", fresh_devices,
		 test_an_older_masqd_shows_one_device_and_hears_of_no_other);
	run_with("two_devices_are_described_in_turn_and_shown_in_vdev_order", fresh_devices,
		 test_two_devices_are_described_in_turn_and_shown_in_vdev_order);
	run_with("a_refused_or_unseen_device_is_left_out", fresh_devices,
		 test_a_refused_or_unseen_device_is_left_out);
	run_with("devices_past_libmasqs_limit_are_not_asked_for", fresh_devices,
		 test_devices_past_libmasqs_limit_are_not_asked_for);
	run_with("without_masqd_nothing_is_shown", fresh_devices,
		 test_without_masqd_nothing_is_shown);

	fake_masqd_remove(&masqd);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
