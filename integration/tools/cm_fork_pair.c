/*
 * cm_fork_pair: RDMA CM client/server pairs forked from one parent, one
 * round after another on the same port, each child with its own event
 * channel and the asynchronous event flow.
 *
 *   cm_fork_pair MODE BIND PEER PORT ROUNDS
 *
 *   MODE both    each round forks a server (listening on BIND:PORT) and a
 *                client (from BIND to PEER:PORT); one endpoint holds both
 *        server  each round forks only the server side
 *        client  each round forks only the client side; a client that
 *                finds nobody listening yet (REJECTED, status 8) tries
 *                again for up to 60 s, as the peer's next server may not
 *                be up yet
 *
 * A round is: CONNECT_REQUEST / accept / ESTABLISHED on the server,
 * ADDR_RESOLVED / ROUTE_RESOLVED / connect / ESTABLISHED on the client, one
 * SEND each way through rdma_create_qp's QP, the client's rdma_disconnect,
 * DISCONNECTED on both (the server answering with its own rdma_disconnect,
 * as rping does), everything destroyed. The parent waits for its
 * children and starts the next round at once, on the same port. Before the
 * first round it creates an event channel and an id of its own and keeps
 * them to the end, as an app that set up the CM before forking its workers
 * (it opens no device: the children's QPs are their own).
 *
 * Prints "round N ok" per round and "ok: ROUNDS rounds" at the end; on a
 * failure, a line naming the round, the side, the step and the CM event or
 * errno, and exits 1.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
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

#define EVENT_WAIT_MS 30000
#define COMPLETION_WAIT_MS 30000
#define ROUND_WAIT_MS 120000
#define CLIENT_RETRY_MS 60000
#define MSG_SIZE 64

static int round_no;
static const char *side = "parent";

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void failf(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "cm_fork_pair: round %d %s: ", round_no, side);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

#define CHECK(call)                                                        \
	do {                                                               \
		if (call)                                                  \
			failf("%s: %s (errno %d)", #call, strerror(errno), errno); \
	} while (0)

static long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/* The next event on ch, within EVENT_WAIT_MS. */
static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, const char *waiting_for)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int n;

	do
		n = poll(&p, 1, EVENT_WAIT_MS);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		failf("poll for %s: %s", waiting_for, strerror(errno));
	if (n == 0)
		failf("no CM event within %d ms waiting for %s", EVENT_WAIT_MS, waiting_for);
	if (rdma_get_cm_event(ch, &ev))
		failf("rdma_get_cm_event waiting for %s: %s (errno %d)", waiting_for,
		      strerror(errno), errno);
	return ev;
}

/* The next event, which must be want (acked here). */
static void expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = next_event(ch, rdma_event_str(want));

	if (ev->event != want || ev->status)
		failf("waiting for %s, got %s status %d", rdma_event_str(want),
		      rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
}

/* What a connection needs besides its id. */
struct conn {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	int done[3]; /* completions seen, by wr_id */
	char send_buf[MSG_SIZE], recv_buf[MSG_SIZE];
};

static void conn_setup(struct rdma_cm_id *id, struct conn *c)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	if (!id->verbs)
		failf("the id has no device");
	c->pd = ibv_alloc_pd(id->verbs);
	if (!c->pd)
		failf("ibv_alloc_pd: %s", strerror(errno));
	c->cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
	if (!c->cq)
		failf("ibv_create_cq: %s", strerror(errno));
	c->mr = ibv_reg_mr(c->pd, c, sizeof(*c), IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		failf("ibv_reg_mr: %s", strerror(errno));
	attr.send_cq = attr.recv_cq = c->cq;
	CHECK(rdma_create_qp(id, c->pd, &attr));
}

static void post_recv(struct rdma_cm_id *id, struct conn *c)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->recv_buf, .length = MSG_SIZE,
			       .lkey = c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;
	int err = ibv_post_recv(id->qp, &wr, &bad);

	if (err)
		failf("ibv_post_recv: %s", strerror(err));
}

static void post_send(struct rdma_cm_id *id, struct conn *c, const char *text)
{
	struct ibv_sge sge = { .addr = (uintptr_t)c->send_buf, .length = MSG_SIZE,
			       .lkey = c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	int err;

	snprintf(c->send_buf, MSG_SIZE, "%s", text);
	err = ibv_post_send(id->qp, &wr, &bad);
	if (err)
		failf("ibv_post_send: %s", strerror(err));
}

/* Wait for the completion of work request wr_id (1 recv, 2 send); the
 * other one may come first. flushed: a flush (the QP went to ERROR
 * first) counts as done too. */
static void wait_completion(struct conn *c, uint64_t wr_id, int flushed)
{
	long deadline = now_ms() + COMPLETION_WAIT_MS;
	struct ibv_wc wc;
	int n;

	while (!c->done[wr_id]) {
		n = ibv_poll_cq(c->cq, 1, &wc);
		if (n < 0)
			failf("ibv_poll_cq: %d", n);
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS &&
			    !(flushed && wc.status == IBV_WC_WR_FLUSH_ERR))
				failf("%s completion: %s", wr_id == 1 ? "recv" : "send",
				      ibv_wc_status_str(wc.status));
			if (wc.wr_id == 1 || wc.wr_id == 2)
				c->done[wc.wr_id] = 1;
			continue;
		}
		if (now_ms() > deadline)
			failf("no %s completion within %d ms", wr_id == 1 ? "recv" : "send",
			      COMPLETION_WAIT_MS);
		usleep(100);
	}
}

static void conn_teardown(struct rdma_cm_id *id, struct conn *c)
{
	rdma_destroy_qp(id);
	CHECK(ibv_dereg_mr(c->mr));
	CHECK(ibv_destroy_cq(c->cq));
	CHECK(ibv_dealloc_pd(c->pd));
}

static void sockaddr_of(struct sockaddr_in *sin, const char *addr, int port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, addr, &sin->sin_addr) != 1)
		failf("not an IPv4 address: %s", addr);
}

/* ready: written once the listener is up (-1: nobody waits). */
static void server(const char *bind_addr, int port, int ready)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listener, *id;
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .rnr_retry_count = 7 };
	struct rdma_cm_event *ev;
	struct sockaddr_in sin;
	struct conn c;
	char expect[MSG_SIZE];

	side = "server";
	memset(&c, 0, sizeof(c));
	sockaddr_of(&sin, bind_addr, port);
	ch = rdma_create_event_channel();
	if (!ch)
		failf("rdma_create_event_channel: %s", strerror(errno));
	CHECK(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP));
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&sin));
	CHECK(rdma_listen(listener, 1));
	if (ready >= 0) {
		if (write(ready, "L", 1) != 1)
			failf("telling the client: %s", strerror(errno));
		close(ready);
	}
	ev = next_event(ch, "RDMA_CM_EVENT_CONNECT_REQUEST");
	if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST || ev->status)
		failf("waiting for RDMA_CM_EVENT_CONNECT_REQUEST, got %s status %d",
		      rdma_event_str(ev->event), ev->status);
	id = ev->id;
	rdma_ack_cm_event(ev);
	/* One connection a round: the listener goes at once, so that the next
	 * round's client, which may start while this round tears down, finds
	 * nobody listening (REJECTED 8, which it retries) rather than a
	 * listener that will never accept it. */
	CHECK(rdma_destroy_id(listener));
	conn_setup(id, &c);
	post_recv(id, &c);
	CHECK(rdma_accept(id, &param));
	expect_event(ch, RDMA_CM_EVENT_ESTABLISHED);
	wait_completion(&c, 1, 0);
	snprintf(expect, sizeof(expect), "ping %d", round_no);
	if (strcmp(c.recv_buf, expect) != 0)
		failf("received \"%.*s\", expected \"%s\"", MSG_SIZE, c.recv_buf, expect);
	post_send(id, &c, "pong");
	/* The client disconnects once it has the pong, maybe before its ACK
	 * left: then the send is flushed when this side's QP goes to ERROR. */
	expect_event(ch, RDMA_CM_EVENT_DISCONNECTED);
	CHECK(rdma_disconnect(id));
	wait_completion(&c, 2, 1);
	conn_teardown(id, &c);
	CHECK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
	exit(0);
}

/* One connection attempt: 0 done, 2 nobody listens (REJECTED, status 8). */
static int client_once(const char *bind_addr, const char *peer, int port)
{
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_event_channel *ch;
	struct sockaddr_in src, dst;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct conn c;
	char text[MSG_SIZE];

	memset(&c, 0, sizeof(c));
	sockaddr_of(&src, bind_addr, 0);
	sockaddr_of(&dst, peer, port);
	ch = rdma_create_event_channel();
	if (!ch)
		failf("rdma_create_event_channel: %s", strerror(errno));
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP));
	CHECK(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000));
	expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(rdma_resolve_route(id, 2000));
	expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
	conn_setup(id, &c);
	post_recv(id, &c);
	CHECK(rdma_connect(id, &param));
	ev = next_event(ch, "RDMA_CM_EVENT_ESTABLISHED");
	if (ev->event == RDMA_CM_EVENT_REJECTED && ev->status == 8) {
		rdma_ack_cm_event(ev);
		conn_teardown(id, &c);
		CHECK(rdma_destroy_id(id));
		rdma_destroy_event_channel(ch);
		return 2;
	}
	if (ev->event != RDMA_CM_EVENT_ESTABLISHED || ev->status)
		failf("waiting for RDMA_CM_EVENT_ESTABLISHED, got %s status %d",
		      rdma_event_str(ev->event), ev->status);
	rdma_ack_cm_event(ev);
	snprintf(text, sizeof(text), "ping %d", round_no);
	post_send(id, &c, text);
	wait_completion(&c, 2, 0);
	wait_completion(&c, 1, 0);
	if (strcmp(c.recv_buf, "pong") != 0)
		failf("received \"%.*s\", expected \"pong\"", MSG_SIZE, c.recv_buf);
	CHECK(rdma_disconnect(id));
	expect_event(ch, RDMA_CM_EVENT_DISCONNECTED);
	conn_teardown(id, &c);
	CHECK(rdma_destroy_id(id));
	rdma_destroy_event_channel(ch);
	return 0;
}

/* ready: read before connecting (-1: retry while nobody listens). */
static void client(const char *bind_addr, const char *peer, int port, int ready)
{
	long deadline = now_ms() + CLIENT_RETRY_MS;
	char b;

	side = "client";
	if (ready >= 0) {
		if (read(ready, &b, 1) != 1)
			failf("the server never listened");
		close(ready);
		if (client_once(bind_addr, peer, port))
			failf("waiting for RDMA_CM_EVENT_ESTABLISHED, got "
			      "RDMA_CM_EVENT_REJECTED status 8 (nobody listens)");
		exit(0);
	}
	while (client_once(bind_addr, peer, port)) {
		if (now_ms() > deadline)
			failf("nobody listened on %s:%d within %d ms", peer, port,
			      CLIENT_RETRY_MS);
		usleep(20000);
	}
	exit(0);
}

static pid_t spawn(void (*fn)(void))
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	if (pid < 0)
		failf("fork: %s", strerror(errno));
	if (pid == 0)
		fn();
	return pid;
}

static const char *a_bind, *a_peer;
static int a_port, pipe_fds[2] = { -1, -1 };

static void run_server(void)
{
	if (pipe_fds[0] >= 0)
		close(pipe_fds[0]);
	server(a_bind, a_port, pipe_fds[1]);
}

static void run_client(void)
{
	if (pipe_fds[1] >= 0)
		close(pipe_fds[1]);
	client(a_bind, a_peer, a_port, pipe_fds[0]);
}

/* Wait for the round's children; kill them all if one fails or hangs. */
static void wait_children(pid_t *pids, int n)
{
	long deadline = now_ms() + ROUND_WAIT_MS;
	int left = n, status, i;
	pid_t pid;

	while (left) {
		pid = waitpid(-1, &status, WNOHANG);
		if (pid < 0)
			failf("waitpid: %s", strerror(errno));
		if (pid == 0) {
			if (now_ms() > deadline) {
				for (i = 0; i < n; i++)
					if (pids[i] > 0)
						kill(pids[i], SIGKILL);
				failf("children still running after %d ms", ROUND_WAIT_MS);
			}
			usleep(2000);
			continue;
		}
		for (i = 0; i < n; i++)
			if (pids[i] == pid)
				pids[i] = 0;
		left--;
		if (!WIFEXITED(status) || WEXITSTATUS(status)) {
			for (i = 0; i < n; i++)
				if (pids[i] > 0)
					kill(pids[i], SIGKILL);
			if (WIFSIGNALED(status))
				failf("child %d killed by signal %d", (int)pid, WTERMSIG(status));
			failf("child %d failed (exit %d)", (int)pid, WEXITSTATUS(status));
		}
	}
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *parent_ch;
	struct rdma_cm_id *parent_id;
	int rounds, both, srv, cli;
	pid_t pids[2];

	if (argc != 6 || (strcmp(argv[1], "both") && strcmp(argv[1], "server") &&
			  strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: cm_fork_pair both|server|client BIND PEER PORT ROUNDS\n");
		return 2;
	}
	a_bind = argv[2];
	a_peer = argv[3];
	a_port = atoi(argv[4]);
	rounds = atoi(argv[5]);
	both = strcmp(argv[1], "both") == 0;
	srv = both || strcmp(argv[1], "server") == 0;
	cli = both || strcmp(argv[1], "client") == 0;
	parent_ch = rdma_create_event_channel();
	if (!parent_ch)
		failf("rdma_create_event_channel: %s", strerror(errno));
	CHECK(rdma_create_id(parent_ch, &parent_id, NULL, RDMA_PS_TCP));
	for (round_no = 1; round_no <= rounds; round_no++) {
		int n = 0;

		if (both && pipe(pipe_fds))
			failf("pipe: %s", strerror(errno));
		if (srv)
			pids[n++] = spawn(run_server);
		if (cli)
			pids[n++] = spawn(run_client);
		if (both) {
			close(pipe_fds[0]);
			close(pipe_fds[1]);
			pipe_fds[0] = pipe_fds[1] = -1;
		}
		wait_children(pids, n);
		printf("round %d ok\n", round_no);
		fflush(stdout);
	}
	CHECK(rdma_destroy_id(parent_id));
	rdma_destroy_event_channel(parent_ch);
	printf("ok: %d rounds\n", rounds);
	return 0;
}
