/*
 * cm_async_pair: an RDMA CM connection between two processes, each with
 * its CM id on an event channel of its own, then SEND/RECV messages both
 * ways: the flow an app on librdmacm's asynchronous API follows, written
 * from the API (rdma_cma.h, rdma_verbs.h).
 *
 *   cm_async_pair [--ext-qp|--app-init] [--ack-timeout T] [--msgs N] [--open-first] both ADDR PORT
 *   cm_async_pair [--ext-qp|--app-init] [--ack-timeout T] [--msgs N] server ADDR PORT
 *   cm_async_pair [--ext-qp|--app-init] [--ack-timeout T] [--msgs N] client BIND PEER PORT
 *
 * both      the parent forks the passive and the active side, which meet on
 *           ADDR:PORT (one endpoint, its own address) and keep in step
 *           through pipes, as a test harness's barrier would: the passive
 *           side posts each RECV before the active side sends
 * server    the passive side alone; client the active side alone (across
 *           hosts). Each side posts its RECV before the other can send.
 *
 * Without --ext-qp the ids' QPs come from rdma_create_qp with no CQs, so
 * librdmacm's CQs and completion channels are used: rdma_post_send,
 * rdma_post_recv, rdma_get_send_comp and rdma_get_recv_comp.
 * With --ext-qp each side creates its QP and CQ itself and names the QP in
 * rdma_conn_param.qp_num; it moves the QP with rdma_init_qp_attr's
 * attributes: the passive side before rdma_accept, the active side on
 * CONNECT_RESPONSE, then rdma_establish; it passes ECE along as such an
 * app does (rdma_set_local_ece, rdma_get_remote_ece). It polls its own CQ.
 * --ack-timeout T: rdma_set_option's ACK timeout on each side's id, and
 * the QP's timeout read back (ibv_query_qp) once connected.
 * --app-init: --ext-qp, and each side takes its QP to INIT with attributes
 * of its own right after creating it (port 1, P_Key index 0), so the CM's
 * INIT attributes come as an INIT to INIT change.
 * --open-first: the parent opens the first device and queries its port
 * before forking (a harness choosing a device does), and keeps it open.
 *
 * Prints each step with the milliseconds since the side started, "ok: N
 * messages" per side at the end (both: "ok" from the parent); on a failure
 * a line naming the side, the step and the event or errno, exit 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define WAIT_MS 30000
#define MSG_SIZE 1024

static const char *side = "parent";
static long started_ms;
static int ext_qp, app_init, ack_timeout = -1, msgs = 10;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void failf(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "cm_async_pair: %s: ", side);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define CHECK(call)                                                              \
	do {                                                                     \
		if (call)                                                        \
			failf("%s: %s (errno %d)", #call, strerror(errno), errno); \
	} while (0)

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

static void step(const char *what)
{
	printf("%s %6ld ms %s\n", side, now_ms() - started_ms, what);
	fflush(stdout);
}

/* ---------------------------------------------------------- in step */

/* Pipes between the two sides in `both` mode: each writes a byte to its
 * peer and waits for one, which is a two-party barrier. -1: no peer. */
static int to_peer = -1, from_peer = -1;

static void barrier(const char *name)
{
	struct pollfd p = { .fd = from_peer, .events = POLLIN };
	char b = 'b';
	int n;

	if (to_peer < 0)
		return;
	if (write(to_peer, &b, 1) != 1)
		failf("barrier %s: write: %s", name, strerror(errno));
	do
		n = poll(&p, 1, WAIT_MS);
	while (n < 0 && errno == EINTR);
	if (n <= 0 || read(from_peer, &b, 1) != 1)
		failf("barrier %s: the other side never came", name);
}

/* ----------------------------------------------------------- events */

/* The next event on ch, which must be want; acked here. The channel is
 * non-blocking: poll, then rdma_get_cm_event, as an event loop would. */
static void expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
			 struct rdma_cm_id **id)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	long deadline = now_ms() + WAIT_MS;

	for (;;) {
		if (poll(&p, 1, 100) < 0 && errno != EINTR)
			failf("poll for %s: %s", rdma_event_str(want), strerror(errno));
		if (!rdma_get_cm_event(ch, &ev))
			break;
		if (errno != EAGAIN)
			failf("rdma_get_cm_event for %s: %s (errno %d)", rdma_event_str(want),
			      strerror(errno), errno);
		if (now_ms() > deadline)
			failf("no CM event within %d ms waiting for %s", WAIT_MS,
			      rdma_event_str(want));
	}
	if (ev->event != want || ev->status)
		failf("waiting for %s, got %s status %d", rdma_event_str(want),
		      rdma_event_str(ev->event), ev->status);
	if (id)
		*id = ev->id;
	rdma_ack_cm_event(ev);
	step(rdma_event_str(want));
}

static struct rdma_event_channel *nonblocking_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	int flags;

	if (!ch)
		failf("rdma_create_event_channel: %s", strerror(errno));
	flags = fcntl(ch->fd, F_GETFL);
	if (flags < 0 || fcntl(ch->fd, F_SETFL, flags | O_NONBLOCK) < 0)
		failf("O_NONBLOCK on the channel: %s", strerror(errno));
	return ch;
}

/* ------------------------------------------------------------ the QP */

struct conn {
	struct rdma_cm_id *id;
	struct ibv_qp *qp; /* the id's, or the app's own (--ext-qp) */
	struct ibv_cq *cq; /* --ext-qp only */
	struct ibv_mr *mr;
	char buf[MSG_SIZE];
};

static void create_qp(struct conn *c)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	/* librdmacm gives every id on a device the device's PD; an app may
	 * build on it (pyverbs' CMID.pd). */
	if (!c->id->verbs || !c->id->pd)
		failf("the id has no %s", c->id->verbs ? "PD" : "device");
	if (!ext_qp) {
		CHECK(rdma_create_qp(c->id, NULL, &attr));
		c->qp = c->id->qp;
		step("rdma_create_qp");
		return;
	}
	c->cq = ibv_create_cq(c->id->verbs, msgs, NULL, NULL, 0);
	if (!c->cq)
		failf("ibv_create_cq: %s", strerror(errno));
	attr.send_cq = attr.recv_cq = c->cq;
	c->qp = ibv_create_qp(c->id->pd, &attr);
	if (!c->qp)
		failf("ibv_create_qp: %s", strerror(errno));
	step("ibv_create_qp (external)");
	if (app_init) {
		struct ibv_qp_attr init = {
			.qp_state = IBV_QPS_INIT,
			.pkey_index = 0,
			.port_num = 1,
			.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ,
		};
		int err = ibv_modify_qp(c->qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
							      IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

		if (err)
			failf("ibv_modify_qp to INIT (the app's own attributes): %s",
			      strerror(err));
		step("external QP at INIT (the app's attributes)");
	}
}

/* The app's own QP to INIT, RTR and RTS with the CM's attributes. */
static void move_ext_qp(struct conn *c)
{
	static const enum ibv_qp_state states[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS };
	struct ibv_qp_attr attr;
	unsigned int i;
	int mask, err;

	for (i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		memset(&attr, 0, sizeof(attr));
		attr.qp_state = states[i];
		CHECK(rdma_init_qp_attr(c->id, &attr, &mask));
		err = ibv_modify_qp(c->qp, &attr, mask);
		if (err)
			failf("ibv_modify_qp to state %d: %s", states[i], strerror(err));
	}
	step("external QP at RTS");
}

/* ECE as an app with its own QP exchanges it (rdma_cma.h): the QP's own
 * before connecting or accepting, the peer's onto the QP once it came.
 * EOPNOTSUPP from the device (rxe has no ECE) is no failure. */
static void send_ece(struct conn *c)
{
	struct ibv_ece ece;
	int err;

	memset(&ece, 0, sizeof(ece));
	err = ibv_query_ece(c->qp, &ece);
	if (err == EOPNOTSUPP)
		return;
	if (err)
		failf("ibv_query_ece: %s", strerror(err));
	CHECK(rdma_set_local_ece(c->id, &ece));
}

static void take_ece(struct conn *c)
{
	struct ibv_ece ece;
	int err;

	CHECK(rdma_get_remote_ece(c->id, &ece));
	err = ibv_set_ece(c->qp, &ece);
	if (err && err != EOPNOTSUPP)
		failf("ibv_set_ece: %s", strerror(err));
}

/* --ack-timeout: the option on the id before its QP is connected, and
 * the QP's timeout read back once connected (the kernel's CM puts it in
 * the RTS attributes). */
static void set_ack_timeout(struct conn *c)
{
	uint8_t t = (uint8_t)ack_timeout;

	if (ack_timeout >= 0)
		CHECK(rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t,
				      sizeof(t)));
}

static void check_ack_timeout(struct conn *c)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr attr;

	if (ack_timeout < 0)
		return;
	CHECK(ibv_query_qp(c->qp, &attr, IBV_QP_TIMEOUT, &init));
	if (attr.timeout != ack_timeout)
		failf("the QP's ACK timeout is %u, the app set %d", attr.timeout, ack_timeout);
	step("ACK timeout as set");
}

static void reg_mr(struct conn *c)
{
	c->mr = rdma_reg_msgs(c->id, c->buf, sizeof(c->buf));
	if (!c->mr)
		failf("rdma_reg_msgs: %s", strerror(errno));
}

static void post_recv(struct conn *c)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf, .length = MSG_SIZE,
			       .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	int err;

	if (!ext_qp) {
		CHECK(rdma_post_recv(c->id, (void *)1, c->buf, sizeof(c->buf), c->mr));
		return;
	}
	err = ibv_post_recv(c->qp, &wr, &bad);
	if (err)
		failf("ibv_post_recv: %s", strerror(err));
}

static void post_send(struct conn *c, const char *text)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->buf, .length = MSG_SIZE,
			       .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	int err;

	snprintf(c->buf, MSG_SIZE, "%s", text);
	if (!ext_qp) {
		CHECK(rdma_post_send(c->id, (void *)2, c->buf, sizeof(c->buf), c->mr,
				     IBV_SEND_SIGNALED));
		return;
	}
	err = ibv_post_send(c->qp, &wr, &bad);
	if (err)
		failf("ibv_post_send: %s", strerror(err));
}

/* The completion of the one outstanding send (2) or recv (1). */
static void completion(struct conn *c, uint64_t wr_id)
{
	const char *what = wr_id == 1 ? "recv" : "send";
	long deadline = now_ms() + WAIT_MS;
	struct ibv_wc wc;
	int n;

	if (!ext_qp) {
		/* rdma_get_*_comp wait on librdmacm's completion channels. */
		n = wr_id == 1 ? rdma_get_recv_comp(c->id, &wc) : rdma_get_send_comp(c->id, &wc);
		if (n != 1)
			failf("rdma_get_%s_comp: %d (%s)", what, n, strerror(errno));
	} else {
		while ((n = ibv_poll_cq(c->cq, 1, &wc)) == 0) {
			if (now_ms() > deadline)
				failf("no %s completion within %d ms", what, WAIT_MS);
			usleep(100);
		}
		if (n < 0)
			failf("ibv_poll_cq: %d", n);
	}
	if (wc.status != IBV_WC_SUCCESS)
		failf("%s completion: %s", what, ibv_wc_status_str(wc.status));
	if (wc.wr_id != wr_id)
		failf("%s completion came with wr_id %llu", what, (unsigned long long)wc.wr_id);
}

static void expect_text(struct conn *c, const char *want)
{
	if (strncmp(c->buf, want, MSG_SIZE) != 0)
		failf("received \"%.*s\", expected \"%s\"", 64, c->buf, want);
}

static void teardown(struct conn *c)
{
	if (ext_qp) {
		CHECK(ibv_destroy_qp(c->qp));
		CHECK(ibv_destroy_cq(c->cq));
	} else {
		rdma_destroy_qp(c->id);
	}
	CHECK(rdma_dereg_mr(c->mr));
}

static void sockaddr_of(struct sockaddr_in *sin, const char *addr, int port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, addr, &sin->sin_addr) != 1)
		failf("not an IPv4 address: %s", addr);
}

/* -------------------------------------------------------- the sides */

static void passive(const char *addr, int port)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 5, .rnr_retry_count = 5 };
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listener;
	struct sockaddr_in sin;
	struct conn c;
	char text[MSG_SIZE];
	int i;

	side = "passive";
	started_ms = now_ms();
	memset(&c, 0, sizeof(c));
	sockaddr_of(&sin, addr, port);
	ch = nonblocking_channel();
	CHECK(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP));
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&sin));
	CHECK(rdma_listen(listener, 1));
	step("listening");
	barrier("listening");
	expect_event(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &c.id);
	create_qp(&c);
	set_ack_timeout(&c);
	reg_mr(&c);
	if (ext_qp) {
		/* The app's own QP goes to RTS before the accept names it. */
		take_ece(&c);
		move_ext_qp(&c);
		send_ece(&c);
		param.qp_num = c.qp->qp_num;
	}
	if (to_peer < 0)
		post_recv(&c); /* across hosts: before the peer can send */
	CHECK(rdma_accept(c.id, &param));
	step("rdma_accept");
	expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	check_ack_timeout(&c);
	barrier("established");
	for (i = 0; i < msgs; i++) {
		if (to_peer >= 0)
			post_recv(&c);
		barrier("recv posted");
		barrier("sent");
		completion(&c, 1);
		snprintf(text, sizeof(text), "ping %d", i);
		expect_text(&c, text);
		if (to_peer < 0 && i + 1 < msgs)
			post_recv(&c);
		post_send(&c, "pong");
		completion(&c, 2);
		barrier("answered");
	}
	step("messages done");
	CHECK(rdma_disconnect(c.id));
	expect_event(ch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	teardown(&c);
	CHECK(rdma_destroy_id(c.id));
	CHECK(rdma_destroy_id(listener));
	rdma_destroy_event_channel(ch);
	printf("passive ok: %d messages\n", msgs);
	exit(0);
}

static void active(const char *bind_addr, const char *peer, int port)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 5, .rnr_retry_count = 5 };
	struct rdma_event_channel *ch;
	struct sockaddr_in src, dst;
	struct conn c;
	char text[MSG_SIZE];
	int i;

	side = "active";
	started_ms = now_ms();
	memset(&c, 0, sizeof(c));
	sockaddr_of(&src, bind_addr, 0);
	sockaddr_of(&dst, peer, port);
	ch = nonblocking_channel();
	CHECK(rdma_create_id(ch, &c.id, NULL, RDMA_PS_TCP));
	CHECK(rdma_resolve_addr(c.id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	barrier("listening");
	CHECK(rdma_resolve_route(c.id, 2000));
	expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	create_qp(&c);
	set_ack_timeout(&c);
	reg_mr(&c);
	if (ext_qp) {
		send_ece(&c);
		param.qp_num = c.qp->qp_num;
	}
	CHECK(rdma_connect(c.id, &param));
	step("rdma_connect");
	if (ext_qp) {
		expect_event(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL);
		take_ece(&c);
		move_ext_qp(&c);
		CHECK(rdma_establish(c.id));
		step("rdma_establish");
	} else {
		expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	}
	check_ack_timeout(&c);
	barrier("established");
	for (i = 0; i < msgs; i++) {
		snprintf(text, sizeof(text), "ping %d", i);
		barrier("recv posted");
		if (to_peer < 0)
			post_recv(&c); /* across hosts: before the pong can come */
		post_send(&c, text);
		completion(&c, 2);
		if (to_peer >= 0)
			post_recv(&c);
		barrier("sent");
		barrier("answered");
		completion(&c, 1);
		expect_text(&c, "pong");
	}
	step("messages done");
	expect_event(ch, RDMA_CM_EVENT_DISCONNECTED, NULL);
	CHECK(rdma_disconnect(c.id));
	teardown(&c);
	CHECK(rdma_destroy_id(c.id));
	rdma_destroy_event_channel(ch);
	printf("active ok: %d messages\n", msgs);
	exit(0);
}

/* ------------------------------------------------------------ main */

static struct ibv_context *open_first_device(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr port;
	struct ibv_context *ctx;

	if (!list || !list[0])
		failf("no RDMA device");
	ctx = ibv_open_device(list[0]);
	if (!ctx)
		failf("ibv_open_device: %s", strerror(errno));
	if (ibv_query_port(ctx, 1, &port))
		failf("ibv_query_port: %s", strerror(errno));
	ibv_free_device_list(list);
	return ctx;
}

static pid_t fork_side(int in, int out, void (*fn)(const char *, int), const char *addr,
		       int port)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		failf("fork: %s", strerror(errno));
	if (pid == 0) {
		from_peer = in;
		to_peer = out;
		fn(addr, port);
	}
	return pid;
}

static const char *both_addr;

static void active_on_both(const char *addr, int port)
{
	active(addr, both_addr, port);
}

/* Both sides forked, in step; the parent waits for them. */
static int run_both(const char *addr, int port, int open_first)
{
	struct ibv_context *ctx = open_first ? open_first_device() : NULL;
	int a_to_p[2], p_to_a[2], status, i, failed = 0;
	long deadline;
	pid_t pids[2];

	if (pipe(a_to_p) || pipe(p_to_a))
		failf("pipe: %s", strerror(errno));
	both_addr = addr;
	pids[0] = fork_side(a_to_p[0], p_to_a[1], passive, addr, port);
	pids[1] = fork_side(p_to_a[0], a_to_p[1], active_on_both, addr, port);
	deadline = now_ms() + 4L * WAIT_MS;
	for (i = 0; i < 2;) {
		pid_t pid = waitpid(-1, &status, WNOHANG);

		if (pid == 0) {
			if (now_ms() > deadline) {
				kill(pids[0], SIGKILL);
				kill(pids[1], SIGKILL);
				failf("the sides still run after %d ms", 4 * WAIT_MS);
			}
			usleep(10000);
			continue;
		}
		if (pid < 0)
			failf("waitpid: %s", strerror(errno));
		i++;
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			failed = 1;
			kill(pid == pids[0] ? pids[1] : pids[0], SIGKILL);
		}
	}
	if (ctx)
		ibv_close_device(ctx);
	if (failed)
		failf("a side failed");
	printf("ok\n");
	return 0;
}

int main(int argc, char **argv)
{
	int open_first = 0, i = 1;

	for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
		if (strcmp(argv[i], "--ext-qp") == 0)
			ext_qp = 1;
		else if (strcmp(argv[i], "--app-init") == 0)
			ext_qp = app_init = 1;
		else if (strcmp(argv[i], "--ack-timeout") == 0 && i + 1 < argc)
			ack_timeout = atoi(argv[++i]) & 0x1f;
		else if (strcmp(argv[i], "--open-first") == 0)
			open_first = 1;
		else if (strcmp(argv[i], "--msgs") == 0 && i + 1 < argc)
			msgs = atoi(argv[++i]);
		else
			break;
	}
	signal(SIGPIPE, SIG_IGN);
	if (msgs > 0 && argc - i == 3 && strcmp(argv[i], "both") == 0)
		return run_both(argv[i + 1], atoi(argv[i + 2]), open_first);
	if (msgs > 0 && argc - i == 3 && strcmp(argv[i], "server") == 0)
		passive(argv[i + 1], atoi(argv[i + 2]));
	if (msgs > 0 && argc - i == 4 && strcmp(argv[i], "client") == 0)
		active(argv[i + 1], argv[i + 2], atoi(argv[i + 3]));
	fprintf(stderr,
		"usage: cm_async_pair [--ext-qp|--app-init] [--ack-timeout T] [--msgs N] [--open-first] both ADDR PORT\n"
		"       cm_async_pair [--ext-qp|--app-init] [--ack-timeout T] [--msgs N] server ADDR PORT\n"
		"       cm_async_pair [--ext-qp|--app-init] [--ack-timeout T] [--msgs N] client BIND PEER PORT\n");
	return 2;
}
