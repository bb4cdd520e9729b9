/*
 * src/transport/ against a fake masqd that the test kills with SIGKILL and
 * starts again: the session's watcher reconnects on its own, passes the
 * uverbs fd again and names every remembered QP (RESYNC_QP); verbs called
 * during the outage wait for it; a request whose masqd died after running
 * it is not run twice; threads calling at once always get their own reply;
 * each HELLO names the session's virtual device, also after a restart.
 *
 * The fake masqd is this binary run as `test_client --server PATH MEMFD`;
 * what it saw, and the "kernel" QP states, live in a shared memfd so that
 * they outlive each fake masqd, as the kernel's state outlives masqd.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cmd/ah.h"
#include "cmd/qp.h"
#include "masq_proto.h"
#include "transport/transport.h"
#include "check.h"

#define MAX_HANDLES 16

struct shared {
	int hellos, opens, opens_with_fd, modifies, queries, resyncs;
	int die_on_modify; /* run the next MODIFY_QP, then die without replying */
	int cm_steps;	   /* CM_ACCEPT_QP and CM_ESTABLISH_QP seen */
	struct masq_cm_accept_qp_req accepted;
	struct masq_cm_establish_qp_req established;
	uint8_t state[MAX_HANDLES]; /* the "kernel's" QP states */
	struct masq_resync_qp_req resynced[64];
	uint8_t hello_vdev[64]; /* the device each HELLO named, in order */
};

static struct shared *sh;
static int shm_fd;
static char sock_path[108];
static pid_t server_pid;

/* ------------------------------------------------------------ fake masqd */

static void reply(int c, const void *msg, size_t len)
{
	(void)!send(c, msg, len, MSG_NOSIGNAL);
}

static void reply_empty(int c, uint16_t op, uint32_t id)
{
	struct masq_hdr h;

	masq_hdr_init(&h, op | MASQ_REPLY, sizeof(h));
	h.request_id = id;
	reply(c, &h, sizeof(h));
}

/* One request on connection c; returns 0 to keep the connection. */
static int serve_one(int c)
{
	uint8_t buf[MASQ_MAX_MESSAGE];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *cm;
	struct masq_hdr h;
	ssize_t n = recvmsg(c, &mh, 0);
	int fd = -1;

	if (n <= 0)
		return -1;
	for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_type == SCM_RIGHTS)
			memcpy(&fd, CMSG_DATA(cm), sizeof(fd));
	if (masq_hdr_decode(buf, (size_t)n, &h))
		return -1;
	switch (h.opcode) {
	case MASQ_OP_HELLO: {
		struct masq_msg_hello_req q;
		struct masq_msg_hello_reply r;
		int i;

		if (masq_msg_hello_req_decode(buf, (size_t)n, &q))
			return -1;
		i = __atomic_fetch_add(&sh->hellos, 1, __ATOMIC_SEQ_CST);
		if (i < 64)
			sh->hello_vdev[i] = q.body.vdev;
		masq_msg_hello_reply_init(&r);
		r.hdr.request_id = h.request_id;
		r.body.phys_port = 1;
		r.body.session_id = (uint32_t)getpid();
		reply(c, &r, sizeof(r));
		break;
	}
	case MASQ_OP_OPEN_DEVICE:
		__atomic_add_fetch(&sh->opens, 1, __ATOMIC_SEQ_CST);
		if (fd >= 0) {
			__atomic_add_fetch(&sh->opens_with_fd, 1, __ATOMIC_SEQ_CST);
			close(fd);
		}
		reply_empty(c, h.opcode, h.request_id);
		break;
	case MASQ_OP_MODIFY_QP: {
		struct masq_msg_modify_qp_req m;

		if (masq_msg_modify_qp_req_decode(buf, (size_t)n, &m) ||
		    m.body.qp_handle >= MAX_HANDLES)
			return -1;
		__atomic_add_fetch(&sh->modifies, 1, __ATOMIC_SEQ_CST);
		if (m.body.attr_mask & IBV_QP_STATE) {
			/* The kernel refuses a transition from the wrong state. */
			if (m.body.attr.qp_state == IBV_QPS_RTR &&
			    sh->state[m.body.qp_handle] != IBV_QPS_INIT) {
				struct masq_hdr e;

				masq_hdr_init(&e, h.opcode | MASQ_REPLY, sizeof(e));
				e.request_id = h.request_id;
				e.status = -EINVAL;
				reply(c, &e, sizeof(e));
				break;
			}
			sh->state[m.body.qp_handle] = m.body.attr.qp_state;
		}
		if (__atomic_exchange_n(&sh->die_on_modify, 0, __ATOMIC_SEQ_CST))
			_exit(9);
		reply_empty(c, h.opcode, h.request_id);
		break;
	}
	case MASQ_OP_CM_ACCEPT_QP: {
		struct masq_msg_cm_accept_qp_req m;

		if (masq_msg_cm_accept_qp_req_decode(buf, (size_t)n, &m) ||
		    m.body.qp_handle >= MAX_HANDLES)
			return -1;
		sh->accepted = m.body;
		sh->state[m.body.qp_handle] = IBV_QPS_RTS; /* masqd moved it */
		__atomic_add_fetch(&sh->cm_steps, 1, __ATOMIC_SEQ_CST);
		reply_empty(c, h.opcode, h.request_id);
		break;
	}
	case MASQ_OP_CM_ESTABLISH_QP: {
		struct masq_msg_cm_establish_qp_req m;

		if (masq_msg_cm_establish_qp_req_decode(buf, (size_t)n, &m) ||
		    m.body.qp_handle >= MAX_HANDLES)
			return -1;
		sh->established = m.body;
		sh->state[m.body.qp_handle] = IBV_QPS_RTS;
		__atomic_add_fetch(&sh->cm_steps, 1, __ATOMIC_SEQ_CST);
		reply_empty(c, h.opcode, h.request_id);
		break;
	}
	case MASQ_OP_QUERY_QP: {
		struct masq_msg_query_qp_req q;
		struct masq_msg_query_qp_reply r;

		if (masq_msg_query_qp_req_decode(buf, (size_t)n, &q) ||
		    q.body.qp_handle >= MAX_HANDLES)
			return -1;
		__atomic_add_fetch(&sh->queries, 1, __ATOMIC_SEQ_CST);
		masq_msg_query_qp_reply_init(&r);
		r.hdr.request_id = h.request_id;
		r.body.qp_state = sh->state[q.body.qp_handle];
		/* The handle rides back in a field the test can check. */
		r.body.dest_qp_num = q.body.qp_handle;
		reply(c, &r, sizeof(r));
		break;
	}
	case MASQ_OP_RESYNC_QP: {
		struct masq_msg_resync_qp_req q;
		struct masq_msg_resync_qp_reply r;
		int i;

		if (masq_msg_resync_qp_req_decode(buf, (size_t)n, &q))
			return -1;
		i = __atomic_fetch_add(&sh->resyncs, 1, __ATOMIC_SEQ_CST);
		if (i < 64)
			sh->resynced[i] = q.body;
		masq_msg_resync_qp_reply_init(&r);
		r.hdr.request_id = h.request_id;
		r.body.qp_state = q.body.qp_handle < MAX_HANDLES ? sh->state[q.body.qp_handle] : 0;
		r.body.result = MASQ_RESYNC_TRACKED;
		reply(c, &r, sizeof(r));
		break;
	}
	default:
		reply_empty(c, h.opcode, h.request_id);
	}
	return 0;
}

static int server_main(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct pollfd p[33];
	int l, n = 1, i;

	unlink(path);
	/* Bound and listening under a temporary name, then renamed: the
	 * path appears only once connect() can succeed (server_start waits
	 * for it; a loaded machine used to connect between bind and listen). */
	snprintf(a.sun_path, sizeof(a.sun_path), "%s.new", path);
	unlink(a.sun_path);
	l = socket(AF_UNIX, SOCK_SEQPACKET, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) || listen(l, 16) ||
	    rename(a.sun_path, path))
		return 2;
	p[0].fd = l;
	p[0].events = POLLIN;
	for (;;) {
		if (poll(p, (nfds_t)n, -1) < 0)
			continue;
		if ((p[0].revents & POLLIN) && n < 33) {
			p[n].fd = accept(l, NULL, NULL);
			p[n].events = POLLIN;
			p[n].revents = 0;
			if (p[n].fd >= 0)
				n++;
		}
		for (i = 1; i < n; i++)
			if (p[i].revents && serve_one(p[i].fd)) {
				close(p[i].fd);
				p[i--] = p[--n];
			}
	}
}

static void server_start(void)
{
	char fdarg[16];
	int i;

	snprintf(fdarg, sizeof(fdarg), "%d", shm_fd);
	server_pid = fork();
	if (server_pid == 0) {
		execl("/proc/self/exe", "test_client", "--server", sock_path, fdarg, (char *)NULL);
		_exit(3);
	}
	/* Ready once the socket exists. */
	for (i = 0; i < 500 && access(sock_path, F_OK) != 0; i++)
		usleep(10000);
}

/* SIGKILL, as `kill -9 masqd`. */
static void server_kill(void)
{
	if (server_pid > 0) {
		kill(server_pid, SIGKILL);
		waitpid(server_pid, NULL, 0);
	}
	server_pid = -1;
	unlink(sock_path);
}

static int until(int *counter, int want, int ms)
{
	while (__atomic_load_n(counter, __ATOMIC_SEQ_CST) < want && ms-- > 0)
		usleep(1000);
	return __atomic_load_n(counter, __ATOMIC_SEQ_CST) >= want;
}

/* ------------------------------------------------------------ tests */

static void clear_shared(void)
{
	memset(sh, 0, sizeof(*sh));
}

static void run(const char *name, void (*fn)(void))
{
	run_with(name, clear_shared, fn);
}

static struct ibv_qp fake_qp(uint32_t handle)
{
	struct ibv_qp qp;

	memset(&qp, 0, sizeof(qp));
	qp.handle = handle;
	qp.qp_num = 0x100 + handle;
	qp.qp_type = IBV_QPT_RC;
	return qp;
}

static int to_state(struct masq_session *s, uint32_t handle, enum ibv_qp_state st, int route)
{
	struct ibv_qp qp = fake_qp(handle);
	struct ibv_qp_attr a;
	int mask = IBV_QP_STATE;

	memset(&a, 0, sizeof(a));
	a.qp_state = st;
	if (route) {
		mask |= IBV_QP_AV;
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.sgid_index = 1;
		a.ah_attr.grh.dgid.raw[10] = a.ah_attr.grh.dgid.raw[11] = 0xff;
		a.ah_attr.grh.dgid.raw[12] = 10;
		a.ah_attr.grh.dgid.raw[15] = 2;
	}
	return masq_modify_qp(s, &qp, &a, mask);
}

static int open_fd(struct masq_session *s)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	int err = masq_session_open(s, fd, 0, 1);

	if (err)
		close(fd);
	return err ? -1 : fd;
}

static void test_watcher_reconnects_and_resyncs_without_verb_calls(void)
{
	struct masq_session s;
	int fd, i, seen1 = 0, seen2 = 0;

	server_start();
	fd = open_fd(&s);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_EQ(to_state(&s, 1, IBV_QPS_INIT, 0), 0);
	CHECK_EQ(to_state(&s, 1, IBV_QPS_RTR, 1), 0);
	CHECK_EQ(to_state(&s, 2, IBV_QPS_INIT, 0), 0);
	CHECK_EQ(to_state(&s, 3, IBV_QPS_INIT, 0), 0);
	masq_destroy_qp(&s, 3, 0x103);
	server_kill();
	server_start();
	/* No verb call from here on: the watcher alone gets it done. */
	CHECK(until(&sh->resyncs, 2, 5000));
	usleep(50000);
	CHECK_EQ(sh->hellos, 2);
	CHECK_EQ(sh->opens_with_fd, 2);
	CHECK_EQ(sh->resyncs, 2); /* the destroyed QP is not named */
	for (i = 0; i < sh->resyncs && i < 64; i++) {
		const struct masq_resync_qp_req *r = &sh->resynced[i];

		if (r->qp_handle == 1) {
			seen1 = 1;
			CHECK_EQ(r->qp_num, 0x101);
			CHECK_EQ(r->has_route, 1);
			CHECK_EQ(r->sgid_index, 1);
			CHECK_EQ(r->dgid[12], 10);
			CHECK_EQ(r->dgid[15], 2);
		} else if (r->qp_handle == 2) {
			seen2 = 1;
			CHECK_EQ(r->has_route, 0);
		}
	}
	CHECK(seen1 && seen2);
	/* And the new connection serves requests. */
	{
		struct ibv_qp qp = fake_qp(1);
		struct ibv_qp_attr a;

		CHECK_EQ(masq_query_qp(&s, &qp, &a, IBV_QP_STATE), 0);
		CHECK_EQ(a.qp_state, IBV_QPS_RTR);
	}
	masq_session_close(&s);
	close(fd);
	server_kill();
}

struct caller {
	struct masq_session *s;
	uint32_t handle;
	int rc, bad;
	long calls;
};

static int stop_callers;

static void *query_loop(void *arg)
{
	struct caller *c = arg;
	struct ibv_qp qp = fake_qp(c->handle);
	struct ibv_qp_attr a;
	int i, rc;

	for (i = 0; !__atomic_load_n(&stop_callers, __ATOMIC_SEQ_CST); i++) {
		memset(&a, 0, sizeof(a));
		rc = masq_query_qp(c->s, &qp, &a, IBV_QP_STATE);
		if (rc)
			c->rc = rc;
		else if (a.dest_qp_num != c->handle)
			c->bad++; /* someone else's reply */
	}
	c->calls = i;
	return NULL;
}

/* The CM's one-request steps: what they carry, and that the QP they
 * moved is named again with its route after a restart. */
static void test_cm_qp_steps_are_one_request_and_resync_with_their_route(void)
{
	struct ibv_qp passive = fake_qp(4), active = fake_qp(5);
	struct masq_cm_conn_param param = { .responder_resources = 1, .qp_num = 0x104 };
	struct masq_cm_qp_attr rtr = { .attr_mask = IBV_QP_STATE | IBV_QP_AV };
	struct masq_session s;
	int fd, i, seen = 0;

	clear_shared();
	server_start();
	fd = open_fd(&s);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	rtr.attr.qp_state = IBV_QPS_RTR;
	rtr.attr.ah_attr.is_global = 1;
	rtr.attr.ah_attr.sgid_index = 1;
	rtr.attr.ah_attr.dgid[10] = rtr.attr.ah_attr.dgid[11] = 0xff;
	rtr.attr.ah_attr.dgid[12] = 10;
	rtr.attr.ah_attr.dgid[15] = 7;
	CHECK_EQ(masq_cm_move_qp(&s, &passive, 21, &param, &rtr), 0);
	CHECK_EQ(sh->accepted.id, 21);
	CHECK_EQ(sh->accepted.qp_handle, 4);
	CHECK_EQ(sh->accepted.param.qp_num, 0x104);
	CHECK_EQ(sh->accepted.param.responder_resources, 1);
	CHECK_EQ(masq_cm_move_qp(&s, &active, 22, NULL, &rtr), 0);
	CHECK_EQ(sh->established.id, 22);
	CHECK_EQ(sh->established.qp_handle, 5);
	CHECK_EQ(sh->established.qp_num, 0x105);
	CHECK_EQ(sh->cm_steps, 2);
	CHECK_EQ(sh->modifies, 0);
	server_kill();
	server_start();
	CHECK(until(&sh->resyncs, 2, 5000));
	for (i = 0; i < sh->resyncs && i < 64; i++) {
		const struct masq_resync_qp_req *r = &sh->resynced[i];

		if (r->qp_handle != 4 && r->qp_handle != 5)
			continue;
		seen++;
		CHECK_EQ(r->qp_num, 0x100 + r->qp_handle);
		CHECK_EQ(r->has_route, 1);
		CHECK_EQ(r->sgid_index, 1);
		CHECK_EQ(r->dgid[15], 7);
	}
	CHECK_EQ(seen, 2);
	masq_session_close(&s);
	close(fd);
	server_kill();
}

static void test_calls_during_an_outage_wait_and_get_their_own_replies(void)
{
	struct masq_session s;
	struct caller c[4];
	pthread_t t[4];
	int fd, i, k;

	stop_callers = 0;
	server_start();
	fd = open_fd(&s);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	for (i = 0; i < 4; i++) {
		c[i] = (struct caller){ .s = &s, .handle = (uint32_t)i + 1 };
		pthread_create(&t[i], NULL, query_loop, &c[i]);
	}
	stop_callers = 0;
	for (k = 0; k < 3; k++) {
		/* Each masqd is reached before it goes: under load the watcher's
		 * backoff can outlast a fixed nap and skip one. */
		CHECK(until(&sh->hellos, k + 1, 10000));
		usleep(50000);
		server_kill();
		usleep(100000); /* callers block meanwhile */
		server_start();
	}
	CHECK(until(&sh->hellos, 4, 10000));
	usleep(50000);
	__atomic_store_n(&stop_callers, 1, __ATOMIC_SEQ_CST);
	for (i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(c[i].rc, 0);
		CHECK_EQ(c[i].bad, 0);
		CHECK(c[i].calls > 10);
	}
	CHECK_EQ(sh->hellos, 4);
	masq_session_close(&s);
	close(fd);
	server_kill();
}

static void test_a_call_fails_with_eagain_when_masqd_stays_away(void)
{
	struct masq_session s;
	struct ibv_qp qp = fake_qp(1);
	struct ibv_qp_attr a;
	int fd;

	server_start();
	fd = open_fd(&s);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	server_kill();
	setenv("MASQ_RECONNECT_WAIT_MS", "200", 1);
	CHECK_EQ(masq_query_qp(&s, &qp, &a, IBV_QP_STATE), EAGAIN);
	unsetenv("MASQ_RECONNECT_WAIT_MS");
	/* Closing while reconnecting ends the watcher promptly. */
	masq_session_close(&s);
	close(fd);
}

struct restarter {
	int delay_ms;
};

static void *restart_after_death(void *arg)
{
	struct restarter *r = arg;

	waitpid(server_pid, NULL, 0);
	server_pid = -1;
	unlink(sock_path);
	usleep((useconds_t)r->delay_ms * 1000);
	server_start();
	return NULL;
}

static void test_masqd_dying_mid_request_does_not_run_it_twice(void)
{
	struct restarter r = { .delay_ms = 100 };
	struct masq_session s;
	pthread_t t;
	int fd;

	server_start();
	fd = open_fd(&s);
	CHECK(fd >= 0);
	if (fd < 0)
		return;
	CHECK_EQ(to_state(&s, 4, IBV_QPS_INIT, 0), 0);
	/* masqd runs INIT->RTR, then dies before replying. Sending it again
	 * would fail in the kernel (RTR->RTR): the client must see it done. */
	sh->die_on_modify = 1;
	pthread_create(&t, NULL, restart_after_death, &r);
	CHECK_EQ(to_state(&s, 4, IBV_QPS_RTR, 1), 0);
	pthread_join(t, NULL);
	CHECK_EQ(sh->state[4], IBV_QPS_RTR);
	CHECK_EQ(sh->modifies, 2);
	CHECK_EQ(sh->resyncs, 1);
	masq_session_close(&s);
	close(fd);
	server_kill();
}

/* A session serves one virtual device: its HELLO names it, and so does the
 * HELLO a restarted masqd gets; the CM's plain connection names device 0
 * and opens it with the descriptor it is given. */
static void test_hello_names_the_sessions_device_also_after_a_restart(void)
{
	struct masq_session s;
	struct masq_conn c;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	server_start();
	CHECK_EQ(masq_session_open(&s, fd, 1, 1), 0);
	CHECK_EQ(sh->hellos, 1);
	CHECK_EQ(sh->hello_vdev[0], 1);
	server_kill();
	server_start();
	CHECK(until(&sh->opens, 2, 5000));
	CHECK_EQ(sh->hellos, 2);
	CHECK_EQ(sh->hello_vdev[1], 1);
	CHECK_EQ(masq_conn_open(&c, fd), 0);
	CHECK_EQ(sh->hellos, 3);
	CHECK_EQ(sh->hello_vdev[2], 0);
	CHECK_EQ(sh->opens, 3);
	CHECK_EQ(sh->opens_with_fd, 3);
	masq_conn_close(&c);
	masq_session_close(&s);
	close(fd);
	server_kill();
}

int main(int argc, char **argv)
{
	char dir[] = "/tmp/masq-test-XXXXXX";

	if (argc == 4 && strcmp(argv[1], "--server") == 0) {
		sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, atoi(argv[3]),
			  0);
		if (sh == MAP_FAILED)
			return 2;
		signal(SIGPIPE, SIG_IGN);
		return server_main(argv[2]);
	}
	shm_fd = memfd_create("masq-test", 0); /* inherited by the fake masqd */
	if (shm_fd < 0 || ftruncate(shm_fd, sizeof(*sh)) ||
	    (sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0)) ==
		    MAP_FAILED || !mkdtemp(dir)) {
		perror("test_client: setup");
		return 1;
	}
	snprintf(sock_path, sizeof(sock_path), "%s/masq.sock", dir);
	setenv("MASQ_SOCKET", sock_path, 1);

	run("watcher_reconnects_and_resyncs_without_verb_calls",
	    test_watcher_reconnects_and_resyncs_without_verb_calls);
	run("cm_qp_steps_are_one_request_and_resync_with_their_route",
	    test_cm_qp_steps_are_one_request_and_resync_with_their_route);
	run("calls_during_an_outage_wait_and_get_their_own_replies",
	    test_calls_during_an_outage_wait_and_get_their_own_replies);
	run("a_call_fails_with_eagain_when_masqd_stays_away",
	    test_a_call_fails_with_eagain_when_masqd_stays_away);
	run("masqd_dying_mid_request_does_not_run_it_twice",
	    test_masqd_dying_mid_request_does_not_run_it_twice);
	run("hello_names_the_sessions_device_also_after_a_restart",
	    test_hello_names_the_sessions_device_also_after_a_restart);

	server_kill();
	rmdir(dir);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
