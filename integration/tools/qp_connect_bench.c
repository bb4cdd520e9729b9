/*
 * qp_connect_bench: control-path benchmark in plain libibverbs. It times
 * how long it takes to create RC QPs and bring each RESET->INIT->RTR->RTS
 * towards a peer, and how long it takes to destroy them, for PROCS
 * concurrent apps (processes) of QPS QPs each. It runs unchanged natively
 * or through masq (LD_PRELOAD=libmasq.so, device vrdma0, virtual IPs).
 *
 *   qp_connect_bench --server [-d DEV] [-x GIDX] [-p PORT]
 *   qp_connect_bench [-d DEV] [-x GIDX] [-p PORT] [-n QPS] [-P PROCS] SERVER_IPV4
 *   qp_connect_bench --placeholder [-d DEV] [-x GIDX] [-n QPS] [-P PROCS] PEER_IPV4
 *
 * With a server (run it on the peer host first), every QP is connected to
 * a real remote QP: each app sends QPS over TCP, the server (one forked
 * child per app) creates QPS QPs, moves them to INIT, posts one receive
 * on each and answers with their QPNs and PSNs. The app then runs the
 * timed phase, sends its own QPNs, the server moves its QPs to RTR/RTS,
 * and the app checks every connection with a zero-length SEND that must
 * complete on both sides before the timed teardown. With --placeholder
 * there is no server: RTR names remote QPNs that do not exist (the verbs
 * accept that; no packet is sent until a work request is posted) and
 * nothing is checked. With --server-sends-first the server also sends
 * one zero-length SEND on each of its QPs the moment it is in RTS, to a
 * receive the app posted: the first packet of every connection leaves
 * right after its RTR returned (a test of masq's backstop, not timed).
 *
 * Timed (CLOCK_MONOTONIC, per app): connect = for each QP ibv_create_qp,
 * then modify to INIT, RTR, RTS; destroy = ibv_destroy_qp of them all. The
 * TCP exchange, opening the device and the PD/CQ are outside the timed
 * parts. The PROCS apps are separate processes (fork + exec of this
 * program, nothing shared: through masq each has its own masqd session)
 * that open the device and exchange QPNs, then pass four barriers: before
 * and after the timed connect, before and after the timed destroy, so
 * their timed phases start together and the server's work on the peer
 * host (connecting and destroying its side) never overlaps them. The rate
 * is PROCS*QPS / (last app's end - first app's start).
 *
 * Output: one JSON object on stdout (times in seconds). Exit: 0 ok,
 * 2 usage, 1 any failure (the reason on stderr).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x71706362u /* "qpcb" */
#define MAX_QPS 100000
#define MAX_PROCS 256
#define WORKER_ENV "QP_CONNECT_BENCH_WORKER"
/* In the request's QP count: the server sends first (--server-sends-first). */
#define SEND_FIRST 0x80000000u

struct opts {
	const char *dev;
	int gid_index;
	int port;
	int qps;
	int procs;
	int server;
	int placeholder;
	int send_first;
	const char *peer;
};

/* What each app reports to the parent over a pipe (one atomic write). */
struct result {
	int32_t index;
	int32_t ok;
	double t_start, t_connected, t_destroy_start, t_destroyed;
	double create_s, init_s, rtr_s, rts_s;
	double query_s; /* one ibv_query_qp per QP: through masq, the bare round trip */
	int32_t pid;
	char error[200];
};

struct wire_qp {
	uint32_t qpn, psn;
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: qp_connect_bench --server [-d DEV] [-x GIDX] [-p PORT]\n"
		"       qp_connect_bench [-d DEV] [-x GIDX] [-p PORT] [-n QPS] [-P PROCS]\n"
		"                        [--server-sends-first] SERVER_IPV4\n"
		"       qp_connect_bench --placeholder [-d DEV] [-x GIDX] [-n QPS] [-P PROCS] PEER_IPV4\n"
		"\n"
		"Times creating RC QPs plus RESET->INIT->RTR->RTS towards PEER, and destroying\n"
		"them, in PROCS concurrent processes of QPS QPs each; prints one JSON object.\n"
		"  -d DEV         verbs device (default rxe0; vrdma0 through masq)\n"
		"  -x GIDX        local GID index, an IPv4-mapped RoCEv2 GID (default 1)\n"
		"  -p PORT        TCP port of the server (default 18800)\n"
		"  -n QPS         QPs per process (default 1, at most %d)\n"
		"  -P PROCS       concurrent processes (default 1, at most %d)\n"
		"  --server       serve clients (forks one child per client) until killed\n"
		"  --placeholder  no server: RTR towards remote QPNs that do not exist\n"
		"  --server-sends-first  the server SENDs on each QP right after its RTS\n"
		"The remote GID is ::ffff:PEER (PEER is a virtual IP through masq).\n",
		MAX_QPS, MAX_PROCS);
}

static int parse_int(const char *s, int lo, int hi, const char *what)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *s == '\0' || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr, "qp_connect_bench: %s must be an integer in %d..%d, not '%s'\n", what,
			lo, hi, s);
		exit(2);
	}
	return (int)v;
}

static void parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "server", no_argument, NULL, 's' },
		{ "placeholder", no_argument, NULL, 'h' },
		{ "server-sends-first", no_argument, NULL, 'f' },
		{ "help", no_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .dev = "rxe0", .gid_index = 1, .port = 18800, .qps = 1, .procs = 1 };
	while ((c = getopt_long(argc, argv, "d:x:p:n:P:", longs, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->dev = optarg;
			break;
		case 'x':
			o->gid_index = parse_int(optarg, 0, 255, "-x");
			break;
		case 'p':
			o->port = parse_int(optarg, 1, 65535, "-p");
			break;
		case 'n':
			o->qps = parse_int(optarg, 1, MAX_QPS, "-n");
			break;
		case 'P':
			o->procs = parse_int(optarg, 1, MAX_PROCS, "-P");
			break;
		case 's':
			o->server = 1;
			break;
		case 'h':
			o->placeholder = 1;
			break;
		case 'f':
			o->send_first = 1;
			break;
		case 'H':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
	}
	if (o->server + o->placeholder + o->send_first > 1) {
		fprintf(stderr, "qp_connect_bench: --server, --placeholder and --server-sends-first "
				"exclude each other\n");
		exit(2);
	}
	if (o->server ? optind != argc : optind != argc - 1) {
		usage(stderr);
		exit(2);
	}
	o->peer = o->server ? NULL : argv[optind];
}

/* ------------------------------------------------------------------ verbs */

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	enum ibv_mtu mtu;
};

static int open_dev(const struct opts *o, int cqe, struct dev *d, char *err, size_t errlen)
{
	struct ibv_device **list;
	struct ibv_port_attr port;
	int i, n;

	memset(d, 0, sizeof(*d));
	list = ibv_get_device_list(&n);
	if (!list) {
		snprintf(err, errlen, "ibv_get_device_list: %s", strerror(errno));
		return -1;
	}
	for (i = 0; i < n && !d->ctx; i++)
		if (strcmp(ibv_get_device_name(list[i]), o->dev) == 0)
			d->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!d->ctx) {
		snprintf(err, errlen, "cannot open device %s (%d devices listed)", o->dev, n);
		return -1;
	}
	if (ibv_query_port(d->ctx, 1, &port)) {
		snprintf(err, errlen, "ibv_query_port: %s", strerror(errno));
		return -1;
	}
	d->mtu = port.active_mtu;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		snprintf(err, errlen, "ibv_alloc_pd: %s", strerror(errno));
		return -1;
	}
	d->cq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);
	if (!d->cq) {
		snprintf(err, errlen, "ibv_create_cq(%d): %s", cqe, strerror(errno));
		return -1;
	}
	return 0;
}

static void close_dev(struct dev *d)
{
	if (d->cq)
		ibv_destroy_cq(d->cq);
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
}

static struct ibv_qp *create_qp(struct dev *d)
{
	struct ibv_qp_init_attr init = { 0 };

	init.send_cq = init.recv_cq = d->cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = init.cap.max_recv_sge = 1;
	return ibv_create_qp(d->pd, &init);
}

/* ibv_modify_qp returns its error instead of setting errno: callers print
 * strerror(errno). */
static int errno_of(int rc)
{
	if (rc)
		errno = rc;
	return rc;
}

static int to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { 0 };

	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	return errno_of(ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS));
}

static int to_rtr(struct ibv_qp *qp, const struct dev *d, int gid_index, struct in_addr peer,
		  struct wire_qp remote)
{
	struct ibv_qp_attr a = { 0 };

	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->mtu;
	a.dest_qp_num = remote.qpn;
	a.rq_psn = remote.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
	a.ah_attr.grh.dgid.raw[10] = 0xff;
	a.ah_attr.grh.dgid.raw[11] = 0xff;
	memcpy(&a.ah_attr.grh.dgid.raw[12], &peer, 4);
	return errno_of(ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				     IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				     IBV_QP_MIN_RNR_TIMER));
}

static int to_rts(struct ibv_qp *qp, uint32_t psn)
{
	struct ibv_qp_attr a = { 0 };

	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	return errno_of(ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC));
}

/* One receive, or one zero-length signaled SEND, with wr_id i: what checks
 * a connection. 0, or the errno (also in errno). */
static int post_recv_one(struct ibv_qp *qp, int i)
{
	struct ibv_recv_wr wr = { .wr_id = (uint64_t)i }, *bad;

	return errno_of(ibv_post_recv(qp, &wr, &bad));
}

static int post_zero_send(struct ibv_qp *qp, int i)
{
	struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	return errno_of(ibv_post_send(qp, &wr, &bad));
}

/* Wait for n successful completions on cq (status errors fail at once). */
static int poll_n(struct ibv_cq *cq, int n, double timeout_s, char *err, size_t errlen)
{
	struct ibv_wc wc[32];
	double deadline = now() + timeout_s;
	int got = 0, k, i;

	while (got < n) {
		k = ibv_poll_cq(cq, 32, wc);
		if (k < 0) {
			snprintf(err, errlen, "ibv_poll_cq failed");
			return -1;
		}
		for (i = 0; i < k; i++)
			if (wc[i].status != IBV_WC_SUCCESS) {
				snprintf(err, errlen, "completion on QP %u: %s", wc[i].qp_num,
					 ibv_wc_status_str(wc[i].status));
				return -1;
			}
		got += k;
		if (k == 0 && now() > deadline) {
			snprintf(err, errlen, "%d of %d completions after %.0f s", got, n,
				 timeout_s);
			return -1;
		}
		if (k == 0)
			usleep(100);
	}
	return 0;
}

/* -------------------------------------------------------------------- TCP */

static int full_io(int fd, void *buf, size_t len, int writing)
{
	char *p = buf;

	while (len) {
		ssize_t r = writing ? write(fd, p, len) : read(fd, p, len);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = ECONNRESET;
			return -1;
		}
		p += r;
		len -= (size_t)r;
	}
	return 0;
}

static int send_u32s(int fd, const uint32_t *v, size_t n)
{
	uint32_t *b = malloc(n * 4);
	size_t i;
	int r;

	if (!b)
		return -1;
	for (i = 0; i < n; i++)
		b[i] = htonl(v[i]);
	r = full_io(fd, b, n * 4, 1);
	free(b);
	return r;
}

static int recv_u32s(int fd, uint32_t *v, size_t n)
{
	size_t i;

	if (full_io(fd, v, n * 4, 0))
		return -1;
	for (i = 0; i < n; i++)
		v[i] = ntohl(v[i]);
	return 0;
}

/* --------------------------------------------------------------- server */

/* One client: see the protocol in the header comment. Returns 0 on success. */
static int serve_one(const struct opts *o, int fd, struct in_addr peer)
{
	uint32_t hdr[2], status;
	struct wire_qp *mine = NULL, *theirs = NULL;
	struct ibv_qp **qps = NULL;
	struct dev d;
	char err[200] = "";
	int n, i, made = 0, rc = -1, send_first;

	if (recv_u32s(fd, hdr, 2) || hdr[0] != MAGIC || (hdr[1] & ~SEND_FIRST) < 1 ||
	    (hdr[1] & ~SEND_FIRST) > MAX_QPS) {
		fprintf(stderr, "qp_connect_bench server: bad request from %s\n", inet_ntoa(peer));
		return -1;
	}
	send_first = !!(hdr[1] & SEND_FIRST);
	n = (int)(hdr[1] & ~SEND_FIRST);
	if (open_dev(o, 2 * n + 1, &d, err, sizeof(err)))
		goto out;
	mine = calloc((size_t)n, sizeof(*mine));
	theirs = calloc((size_t)n, sizeof(*theirs));
	qps = calloc((size_t)n, sizeof(*qps));
	if (!mine || !theirs || !qps) {
		snprintf(err, sizeof(err), "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++, made++) {
		qps[i] = create_qp(&d);
		if (!qps[i] || to_init(qps[i]) || post_recv_one(qps[i], i)) {
			snprintf(err, sizeof(err), "QP %d of %d: create/INIT/post_recv: %s", i + 1,
				 n, strerror(errno));
			if (qps[i])
				made++;
			goto out;
		}
		mine[i].qpn = qps[i]->qp_num;
		mine[i].psn = (uint32_t)lrand48() & 0xffffff;
	}
	if (send_u32s(fd, (uint32_t *)mine, 2 * (size_t)n) ||
	    recv_u32s(fd, (uint32_t *)theirs, 2 * (size_t)n)) {
		snprintf(err, sizeof(err), "exchange: %s", strerror(errno));
		goto out;
	}
	status = 0;
	for (i = 0; i < n; i++) {
		if (to_rtr(qps[i], &d, o->gid_index, peer, theirs[i]) ||
		    to_rts(qps[i], mine[i].psn) || (send_first && post_zero_send(qps[i], i))) {
			status = (uint32_t)errno;
			snprintf(err, sizeof(err), "QP %d of %d: RTR/RTS/SEND towards %s: %s", i + 1,
				 n, inet_ntoa(peer), strerror(errno));
			break;
		}
	}
	if (send_u32s(fd, &status, 1) || status)
		goto out;
	/* The client sends one zero-length SEND on each QP (and receives ours). */
	if (poll_n(d.cq, send_first ? 2 * n : n, 120, err, sizeof(err)))
		goto out;
	status = 0;
	if (send_u32s(fd, &status, 1) || recv_u32s(fd, &status, 1))
		goto out; /* the client tears down its side first */
	rc = 0;
out:
	if (err[0])
		fprintf(stderr, "qp_connect_bench server: client %s: %s\n", inet_ntoa(peer), err);
	for (i = 0; qps && i < made; i++)
		if (qps[i])
			ibv_destroy_qp(qps[i]);
	close_dev(&d);
	free(mine);
	free(theirs);
	free(qps);
	return rc;
}

static int run_server(const struct opts *o)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o->port) };
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0);

	signal(SIGCHLD, SIG_IGN); /* children reap themselves */
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, MAX_PROCS)) {
		fprintf(stderr, "qp_connect_bench server: port %d: %s\n", o->port, strerror(errno));
		return 1;
	}
	fprintf(stderr, "qp_connect_bench server: listening on %d, device %s\n", o->port, o->dev);
	for (;;) {
		struct sockaddr_in peer;
		socklen_t len = sizeof(peer);
		int fd = accept(ls, (struct sockaddr *)&peer, &len);
		pid_t pid;

		if (fd < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "qp_connect_bench server: accept: %s\n", strerror(errno));
			return 1;
		}
		pid = fork();
		if (pid == 0) {
			close(ls);
			srand48(getpid() ^ (long)(now() * 1e6));
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			_exit(serve_one(o, fd, peer.sin_addr) ? 1 : 0);
		}
		if (pid < 0)
			fprintf(stderr, "qp_connect_bench server: fork: %s\n", strerror(errno));
		close(fd);
	}
}

/* ---------------------------------------------------------------- worker */

/* Barriers every app passes, in order: before the timed connect, after it
 * (the server then connects its side), before the timed destroy, after it
 * (the server then destroys its side). Work on the peer host never
 * overlaps a timed phase of any app. */
#define BARRIERS 4

struct worker_fds {
	int index, ready, go[BARRIERS], result;
	int passed;
};

/* Tell the parent this app reached barrier w->passed, and wait until all
 * have: the parent closes that barrier's pipe, EOF for everyone at once. */
static int barrier(struct worker_fds *w, char *err, size_t errlen)
{
	char c;
	ssize_t r;

	if (write(w->ready, "r", 1) != 1) {
		snprintf(err, errlen, "barrier %d: %s", w->passed, strerror(errno));
		return -1;
	}
	do
		r = read(w->go[w->passed], &c, 1);
	while (r < 0 && errno == EINTR);
	if (r != 0) {
		snprintf(err, errlen, "barrier %d: parent went away", w->passed);
		return -1;
	}
	w->passed++;
	return 0;
}

/* One app: exchange, connect (timed), check, destroy (timed). */
static void run_worker(const struct opts *o, struct worker_fds *w)
{
	struct result res = { .index = w->index, .pid = getpid() };
	struct wire_qp *mine = NULL, *theirs = NULL;
	struct ibv_qp **qps = NULL;
	struct in_addr peer;
	struct dev d = { 0 };
	uint32_t status;
	int n = o->qps, i, made = 0, fd = -1, one = 1;
	double t;

	srand48(getpid() ^ (long)(now() * 1e6));
	inet_pton(AF_INET, o->peer, &peer);
	mine = calloc((size_t)n, sizeof(*mine));
	theirs = calloc((size_t)n, sizeof(*theirs));
	qps = calloc((size_t)n, sizeof(*qps));
	if (!mine || !theirs || !qps) {
		snprintf(res.error, sizeof(res.error), "out of memory");
		goto out;
	}
	if (open_dev(o, 2 * n + 1, &d, res.error, sizeof(res.error)))
		goto out;
	if (o->placeholder) {
		for (i = 0; i < n; i++)
			theirs[i] = (struct wire_qp){ .qpn = 0x100000u + (uint32_t)i, .psn = 0 };
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o->port),
					 .sin_addr = peer };
		uint32_t hdr[2] = { MAGIC, (uint32_t)n | (o->send_first ? SEND_FIRST : 0) };

		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a))) {
			snprintf(res.error, sizeof(res.error), "connect to %s:%d: %s", o->peer,
				 o->port, strerror(errno));
			goto out;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (send_u32s(fd, hdr, 2) || recv_u32s(fd, (uint32_t *)theirs, 2 * (size_t)n)) {
			snprintf(res.error, sizeof(res.error),
				 "server %s:%d closed the exchange (see its stderr): %s", o->peer,
				 o->port, strerror(errno));
			goto out;
		}
	}
	if (barrier(w, res.error, sizeof(res.error)))
		goto out;

	res.t_start = now();
	for (i = 0; i < n; i++) {
		t = now();
		qps[i] = create_qp(&d);
		if (!qps[i]) {
			snprintf(res.error, sizeof(res.error), "ibv_create_qp %d of %d: %s", i + 1,
				 n, strerror(errno));
			goto out;
		}
		made++;
		mine[i].qpn = qps[i]->qp_num;
		mine[i].psn = (uint32_t)lrand48() & 0xffffff;
		res.create_s += now() - t;
		t = now();
		if (to_init(qps[i])) {
			snprintf(res.error, sizeof(res.error), "QP %d of %d to INIT: %s", i + 1, n,
				 strerror(errno));
			goto out;
		}
		res.init_s += now() - t;
		t = now();
		if (to_rtr(qps[i], &d, o->gid_index, peer, theirs[i])) {
			snprintf(res.error, sizeof(res.error), "QP %d of %d to RTR: %s", i + 1, n,
				 strerror(errno));
			goto out;
		}
		res.rtr_s += now() - t;
		t = now();
		if (to_rts(qps[i], mine[i].psn)) {
			snprintf(res.error, sizeof(res.error), "QP %d of %d to RTS: %s", i + 1, n,
				 strerror(errno));
			goto out;
		}
		res.rts_s += now() - t;
	}
	res.t_connected = now();
	if (barrier(w, res.error, sizeof(res.error)))
		goto out;

	if (!o->placeholder) {
		/* Untimed: the server connects its side, then one SEND per QP. */
		for (i = 0; o->send_first && i < n; i++) {
			if (post_recv_one(qps[i], i)) {
				snprintf(res.error, sizeof(res.error), "ibv_post_recv on QP %d: %s",
					 i + 1, strerror(errno));
				goto out;
			}
		}
		if (send_u32s(fd, (uint32_t *)mine, 2 * (size_t)n) || recv_u32s(fd, &status, 1)) {
			snprintf(res.error, sizeof(res.error), "exchange: %s", strerror(errno));
			goto out;
		}
		if (status) {
			snprintf(res.error, sizeof(res.error),
				 "the server could not connect its QPs: %s", strerror((int)status));
			goto out;
		}
		for (i = 0; i < n; i++) {
			if (post_zero_send(qps[i], i)) {
				snprintf(res.error, sizeof(res.error), "ibv_post_send on QP %d: %s",
					 i + 1, strerror(errno));
				goto out;
			}
		}
		if (poll_n(d.cq, o->send_first ? 2 * n : n, 120, res.error, sizeof(res.error)) ||
		    recv_u32s(fd, &status, 1)) {
			if (!res.error[0])
				snprintf(res.error, sizeof(res.error),
					 "the server did not see every SEND (see its stderr)");
			goto out;
		}
	}
	/* Untimed as a phase: one ibv_query_qp per QP, the verb whose only
	 * work through masq is a request and its reply (the control path's
	 * floor: what no step that must ask masqd can go below). */
	{
		double t = now();

		for (i = 0; i < n; i++) {
			struct ibv_qp_init_attr init;
			struct ibv_qp_attr attr;

			if (ibv_query_qp(qps[i], &attr, IBV_QP_STATE, &init)) {
				snprintf(res.error, sizeof(res.error), "ibv_query_qp %d of %d: %s",
					 i + 1, n, strerror(errno));
				goto out;
			}
		}
		res.query_s = now() - t;
	}
	if (barrier(w, res.error, sizeof(res.error)))
		goto out;
	res.t_destroy_start = now();
	for (i = 0; i < n; i++) {
		if (ibv_destroy_qp(qps[i])) {
			snprintf(res.error, sizeof(res.error), "ibv_destroy_qp %d of %d: %s", i + 1,
				 n, strerror(errno));
			made = 0; /* do not retry the rest */
			goto out;
		}
		qps[i] = NULL;
	}
	res.t_destroyed = now();
	made = 0;
	if (barrier(w, res.error, sizeof(res.error)))
		goto out;
	res.ok = 1;
	if (fd >= 0) {
		status = 0;
		send_u32s(fd, &status, 1);
	}
out:
	/* A failed app still counts at the barriers it will not reach, so the
	 * others are not left waiting. */
	for (; w->passed < BARRIERS; w->passed++)
		if (write(w->ready, "x", 1) != 1)
			break;
	for (i = 0; i < made; i++)
		if (qps[i])
			ibv_destroy_qp(qps[i]);
	close_dev(&d);
	if (write(w->result, &res, sizeof(res)) != (ssize_t)sizeof(res))
		exit(1);
	exit(res.ok ? 0 : 1);
}

/* ---------------------------------------------------------------- parent */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void print_json(const struct opts *o, struct result *r, int procs)
{
	double c0 = r[0].t_start, c1 = r[0].t_connected, d0 = r[0].t_destroy_start,
	       d1 = r[0].t_destroyed, sum = 0, *conn = calloc((size_t)procs, sizeof(double));
	int i;

	for (i = 0; i < procs; i++) {
		c0 = r[i].t_start < c0 ? r[i].t_start : c0;
		c1 = r[i].t_connected > c1 ? r[i].t_connected : c1;
		d0 = r[i].t_destroy_start < d0 ? r[i].t_destroy_start : d0;
		d1 = r[i].t_destroyed > d1 ? r[i].t_destroyed : d1;
		if (conn)
			conn[i] = r[i].t_connected - r[i].t_start;
		sum += r[i].t_connected - r[i].t_start;
	}
	if (conn)
		qsort(conn, (size_t)procs, sizeof(double), cmp_double);
	printf("{\"tool\": \"qp_connect_bench\", \"device\": \"%s\", \"gid_index\": %d, "
	       "\"peer\": \"%s\", \"placeholder\": %s, \"procs\": %d, \"qps_per_proc\": %d,\n",
	       o->dev, o->gid_index, o->peer, o->placeholder ? "true" : "false", procs, o->qps);
	printf(" \"connect_wall_s\": %.9f, \"destroy_wall_s\": %.9f, "
	       "\"connect_rate_qps_per_s\": %.3f, \"destroy_rate_qps_per_s\": %.3f, "
	       "\"connect_s_mean_per_proc\": %.9f, \"connect_s_median_per_proc\": %.9f,\n",
	       c1 - c0, d1 - d0, (double)procs * o->qps / (c1 - c0),
	       (double)procs * o->qps / (d1 - d0), sum / procs,
	       conn ? (procs % 2 ? conn[procs / 2] : (conn[procs / 2 - 1] + conn[procs / 2]) / 2)
		    : sum / procs);
	printf(" \"procs_detail\": [");
	for (i = 0; i < procs; i++)
		printf("%s\n  {\"index\": %d, \"pid\": %d, \"connect_s\": %.9f, \"destroy_s\": %.9f, "
		       "\"create_s\": %.9f, \"init_s\": %.9f, \"rtr_s\": %.9f, \"rts_s\": %.9f, "
		       "\"query_s\": %.9f, \"start_offset_s\": %.9f}",
		       i ? "," : "", r[i].index, r[i].pid, r[i].t_connected - r[i].t_start,
		       r[i].t_destroyed - r[i].t_destroy_start, r[i].create_s, r[i].init_s,
		       r[i].rtr_s, r[i].rts_s, r[i].query_s, r[i].t_start - c0);
	printf("]}\n");
	free(conn);
}

static int run_parent(const struct opts *o, char **argv)
{
	int ready[2], go[BARRIERS][2], resp[2], i, k, b, failed = 0;
	struct result *res = calloc((size_t)o->procs, sizeof(*res));
	char env[96], c;
	pid_t *pids = calloc((size_t)o->procs, sizeof(*pids));

	if (!res || !pids || pipe(ready) || pipe(resp)) {
		perror("qp_connect_bench");
		return 1;
	}
	for (b = 0; b < BARRIERS; b++)
		if (pipe(go[b])) {
			perror("qp_connect_bench: pipe");
			return 1;
		}
	for (i = 0; i < o->procs; i++) {
		pids[i] = fork();
		if (pids[i] < 0) {
			perror("qp_connect_bench: fork");
			return 1;
		}
		if (pids[i] == 0) {
			/* A fresh process image: each app is independent (its own
			 * libibverbs and, through masq, its own masqd session). */
			close(ready[0]);
			close(resp[0]);
			for (b = 0; b < BARRIERS; b++)
				close(go[b][1]);
			snprintf(env, sizeof(env), "%d,%d,%d,%d,%d,%d,%d", i, ready[1], resp[1],
				 go[0][0], go[1][0], go[2][0], go[3][0]);
			setenv(WORKER_ENV, env, 1);
			execv("/proc/self/exe", argv);
			perror("qp_connect_bench: exec /proc/self/exe");
			_exit(1);
		}
	}
	close(ready[1]);
	close(resp[1]);
	for (b = 0; b < BARRIERS; b++) {
		close(go[b][0]);
		/* Every app has reached barrier b (or failed): release them all. */
		for (k = 0; k < o->procs && read(ready[0], &c, 1) == 1; k++)
			;
		close(go[b][1]);
	}
	for (i = 0; i < o->procs; i++) {
		struct result r;

		if (full_io(resp[0], &r, sizeof(r), 0))
			break;
		if (r.index >= 0 && r.index < o->procs)
			res[r.index] = r;
	}
	for (i = 0; i < o->procs; i++) {
		int st;

		waitpid(pids[i], &st, 0);
		if (!res[i].ok) {
			fprintf(stderr, "qp_connect_bench: app %d: %s\n", i,
				res[i].error[0] ? res[i].error :
				(WIFSIGNALED(st) ? "killed by a signal" : "exited without a result"));
			failed++;
		}
	}
	if (failed) {
		fprintf(stderr, "qp_connect_bench: %d of %d apps failed\n", failed, o->procs);
		return 1;
	}
	print_json(o, res, o->procs);
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	const char *w = getenv(WORKER_ENV);
	struct in_addr tmp;

	parse_opts(argc, argv, &o);
	if (!o.server && inet_pton(AF_INET, o.peer, &tmp) != 1) {
		fprintf(stderr, "qp_connect_bench: '%s' is not an IPv4 address\n", o.peer);
		return 2;
	}
	if (w) {
		struct worker_fds f;

		memset(&f, 0, sizeof(f));
		if (sscanf(w, "%d,%d,%d,%d,%d,%d,%d", &f.index, &f.ready, &f.result, &f.go[0],
			   &f.go[1], &f.go[2], &f.go[3]) != 7) {
			fprintf(stderr, "qp_connect_bench: bad %s\n", WORKER_ENV);
			return 1;
		}
		unsetenv(WORKER_ENV);
		run_worker(&o, &f); /* does not return */
	}
	return o.server ? run_server(&o) : run_parent(&o, argv);
}
