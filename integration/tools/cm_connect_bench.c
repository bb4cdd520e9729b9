/*
 * cm_connect_bench: RDMA CM connection-setup benchmark in plain librdmacm
 * and libibverbs. It times how long an app takes to set up an RC
 * connection through the RDMA CM and to tear it down again, one
 * connection after the other. It runs unchanged natively (the kernel's
 * rdma_cm) or through masq (LD_PRELOAD=libmasq.so, virtual IPs).
 *
 *   cm_connect_bench --server -p PORT [-a BINDADDR]
 *   cm_connect_bench -p PORT [-n N] [-w WARMUP] [-t TIMEOUT_MS] ADDR
 *
 * Server: listens on BINDADDR:PORT (default 0.0.0.0); for every connect
 * request it creates an RC QP (on one PD and one small CQ per device,
 * made at the first request) and accepts; when a connection is
 * disconnected it destroys the QP and the id. It serves any number of
 * connections and runs until killed. Errors on a connection are logged
 * to stderr and the server goes on.
 *
 * Client: WARMUP untimed connections first (default 1: the first one
 * opens the device and makes the PD and CQ, which the others share), then
 * N timed ones, strictly one after the other, on one event channel:
 *
 *   connect  = rdma_create_id + rdma_resolve_addr + ADDR_RESOLVED
 *              + rdma_resolve_route + ROUTE_RESOLVED + rdma_create_qp
 *              + rdma_connect + ESTABLISHED
 *   teardown = rdma_disconnect + DISCONNECTED + rdma_destroy_qp
 *              + rdma_destroy_id
 *
 * timed with CLOCK_MONOTONIC. Nothing is sent over the connections.
 *
 * Output (client): one JSON object on stdout, times in seconds (totals)
 * or microseconds (per connection). Exit: 0 ok, 2 usage, 1 any failure:
 * a CM event other than the expected one (its name and status are
 * printed), a failed call, or no event within TIMEOUT_MS (default 30000).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define MAX_CONNS 100000
#define MAX_DEVS 8
#define RESOLVE_MS 5000

struct opts {
	int server;
	int port;
	int conns;
	int warmup;
	int timeout_ms;
	const char *bind_addr;
	const char *addr;
};

/* One PD and CQ per device (verbs context), shared by every QP on it. */
struct dev {
	struct ibv_context *verbs;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
};

static struct dev devs[MAX_DEVS];
static int ndevs;
static volatile sig_atomic_t stop;

static void usage(void)
{
	fprintf(stderr, "usage: cm_connect_bench --server -p PORT [-a BINDADDR]\n"
			"       cm_connect_bench -p PORT [-n N] [-w WARMUP] [-t TIMEOUT_MS] ADDR\n");
	exit(2);
}

static void die(const char *what)
{
	fprintf(stderr, "cm_connect_bench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static void die_at(const char *conn, const char *what)
{
	fprintf(stderr, "cm_connect_bench: %s: %s: %s\n", conn, what, strerror(errno));
	exit(1);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int parse_addr(const char *text, int port, struct sockaddr_in *sin)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	return inet_pton(AF_INET, text, &sin->sin_addr) == 1 ? 0 : -1;
}

/* The PD and CQ of id's device, made the first time it is seen. */
static struct dev *dev_of(struct rdma_cm_id *id, int cqe)
{
	int i;

	for (i = 0; i < ndevs; i++)
		if (devs[i].verbs == id->verbs)
			return &devs[i];
	if (!id->verbs) {
		errno = ENODEV;
		return NULL;
	}
	if (ndevs == MAX_DEVS) {
		errno = ENOSPC;
		return NULL;
	}
	devs[ndevs].verbs = id->verbs;
	devs[ndevs].pd = ibv_alloc_pd(id->verbs);
	if (!devs[ndevs].pd)
		return NULL;
	devs[ndevs].cq = ibv_create_cq(id->verbs, cqe, NULL, NULL, 0);
	if (!devs[ndevs].cq) {
		ibv_dealloc_pd(devs[ndevs].pd);
		return NULL;
	}
	return &devs[ndevs++];
}

static int make_qp(struct rdma_cm_id *id, int cqe)
{
	struct dev *d = dev_of(id, cqe);
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};

	if (!d)
		return -1;
	attr.send_cq = attr.recv_cq = d->cq;
	return rdma_create_qp(id, d->pd, &attr);
}

static const struct rdma_conn_param conn_param = {
	.responder_resources = 1, .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7,
};

/* ------------------------------------------------------------------ server */

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

/* Destroys a connection's QP (if any) and id; the event is acked first,
 * since rdma_destroy_id waits for every event of the id to be acked. */
static void drop(struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = ev->id;

	rdma_ack_cm_event(ev);
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

static int server(const struct opts *o)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sigaction sa = { .sa_handler = on_signal };
	struct rdma_cm_id *listener;
	struct sockaddr_in sin;
	unsigned long accepted = 0, disconnected = 0, errors = 0;

	if (parse_addr(o->bind_addr, o->port, &sin)) {
		fprintf(stderr, "cm_connect_bench: bad bind address %s\n", o->bind_addr);
		return 2;
	}
	if (!ch)
		die("rdma_create_event_channel");
	if (rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (rdma_bind_addr(listener, (struct sockaddr *)&sin))
		die("rdma_bind_addr");
	if (rdma_listen(listener, 64))
		die("rdma_listen");
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("listening on %s:%d\n", o->bind_addr, o->port);
	fflush(stdout);
	while (!stop) {
		struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
		struct rdma_cm_event *ev;
		struct rdma_cm_id *id;
		int r = poll(&pfd, 1, 1000);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("poll");
		if (r == 0)
			continue;
		if (rdma_get_cm_event(ch, &ev)) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			die("rdma_get_cm_event");
		}
		id = ev->id;
		if (id == listener) {
			fprintf(stderr, "cm_connect_bench: listener: event %s status %d\n",
				rdma_event_str(ev->event), ev->status);
			return 1;
		}
		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			/* The request event's id is the new connection's. */
			if (make_qp(id, 256)) {
				fprintf(stderr, "cm_connect_bench: create QP: %s\n", strerror(errno));
				rdma_reject(id, NULL, 0);
				errors++;
				drop(ev);
				break;
			}
			if (rdma_accept(id, (struct rdma_conn_param *)&conn_param)) {
				fprintf(stderr, "cm_connect_bench: rdma_accept: %s\n", strerror(errno));
				errors++;
				drop(ev);
				break;
			}
			accepted++;
			rdma_ack_cm_event(ev);
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
		case RDMA_CM_EVENT_TIMEWAIT_EXIT:
			rdma_ack_cm_event(ev);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			disconnected++;
			drop(ev);
			break;
		default:
			/* CONNECT_ERROR, UNREACHABLE, ...: that connection is gone. */
			fprintf(stderr, "cm_connect_bench: connection: event %s status %d\n",
				rdma_event_str(ev->event), ev->status);
			errors++;
			drop(ev);
			break;
		}
	}
	fprintf(stderr, "cm_connect_bench: server stopped: %lu accepted, %lu disconnected, %lu errors\n",
		accepted, disconnected, errors);
	return 0;
}

/* ------------------------------------------------------------------ client */

struct conn_times {
	double create_id, resolve_addr, resolve_route, create_qp, connect;
	double disconnect, destroy;
};

/* The next event, which must be `want` on id; anything else ends the run. */
static void expect(struct rdma_event_channel *ch, struct rdma_cm_id *id, enum rdma_cm_event_type want,
		   int timeout_ms, const char *conn)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int r;

	for (;;) {
		r = poll(&pfd, 1, timeout_ms);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			die("poll");
		if (r == 0) {
			fprintf(stderr, "cm_connect_bench: %s: no event within %d ms (waiting for %s)\n",
				conn, timeout_ms, rdma_event_str(want));
			exit(1);
		}
		if (rdma_get_cm_event(ch, &ev)) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			die("rdma_get_cm_event");
		}
		/* Late TIMEWAIT_EXIT of an id: not what we wait for, harmless. */
		if (ev->event == RDMA_CM_EVENT_TIMEWAIT_EXIT) {
			rdma_ack_cm_event(ev);
			continue;
		}
		break;
	}
	if (ev->event != want || ev->id != id || ev->status != 0) {
		fprintf(stderr, "cm_connect_bench: %s: expected %s, got %s status %d%s%s%s\n",
			conn, rdma_event_str(want), rdma_event_str(ev->event), ev->status,
			ev->status < 0 ? " (" : "", ev->status < 0 ? strerror(-ev->status) : "",
			ev->status < 0 ? ")" : "");
		exit(1);
	}
	rdma_ack_cm_event(ev);
}

static void connect_one(struct rdma_event_channel *ch, const struct sockaddr_in *dst, const struct opts *o,
			const char *conn, struct conn_times *t)
{
	struct rdma_cm_id *id;
	double t0, t1, t2, t3, t4, t5, t6, t7;

	t0 = now();
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die_at(conn, "rdma_create_id");
	t1 = now();
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, RESOLVE_MS))
		die_at(conn, "rdma_resolve_addr");
	expect(ch, id, RDMA_CM_EVENT_ADDR_RESOLVED, o->timeout_ms, conn);
	t2 = now();
	if (rdma_resolve_route(id, RESOLVE_MS))
		die_at(conn, "rdma_resolve_route");
	expect(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED, o->timeout_ms, conn);
	t3 = now();
	if (make_qp(id, 4))
		die_at(conn, "rdma_create_qp");
	t4 = now();
	if (rdma_connect(id, (struct rdma_conn_param *)&conn_param))
		die_at(conn, "rdma_connect");
	expect(ch, id, RDMA_CM_EVENT_ESTABLISHED, o->timeout_ms, conn);
	t5 = now();
	if (rdma_disconnect(id))
		die_at(conn, "rdma_disconnect");
	expect(ch, id, RDMA_CM_EVENT_DISCONNECTED, o->timeout_ms, conn);
	t6 = now();
	rdma_destroy_qp(id);
	if (rdma_destroy_id(id))
		die_at(conn, "rdma_destroy_id");
	t7 = now();
	t->create_id = t1 - t0;
	t->resolve_addr = t2 - t1;
	t->resolve_route = t3 - t2;
	t->create_qp = t4 - t3;
	t->connect = t5 - t4;
	t->disconnect = t6 - t5;
	t->destroy = t7 - t6;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Sorts v; the q-quantile (nearest rank). */
static double quantile(double *v, int n, double q)
{
	int i;

	qsort(v, n, sizeof(*v), cmp_double);
	i = (int)(q * (n - 1) + 0.5);
	return v[i];
}

static void print_list(const char *name, const double *v, int n)
{
	int i;

	printf("\"%s\":[", name);
	for (i = 0; i < n; i++)
		printf("%s%.1f", i ? "," : "", v[i] * 1e6);
	printf("]");
}

static int client(const struct opts *o)
{
	struct rdma_event_channel *ch;
	struct sockaddr_in dst;
	struct conn_times *t;
	double *conn_s, *tear_s, *warm_s, sum_conn = 0, sum_tear = 0, wall0, wall;
	double c_med, c_p90, t_med, t_p90;
	struct conn_times mean = { 0 };
	char label[64];
	int i;

	if (parse_addr(o->addr, o->port, &dst)) {
		fprintf(stderr, "cm_connect_bench: bad address %s (IPv4 expected)\n", o->addr);
		return 2;
	}
	t = calloc(o->conns + o->warmup, sizeof(*t));
	conn_s = calloc(o->conns, sizeof(*conn_s));
	tear_s = calloc(o->conns, sizeof(*tear_s));
	warm_s = calloc(o->warmup + 1, sizeof(*warm_s));
	if (!t || !conn_s || !tear_s || !warm_s)
		die("calloc");
	ch = rdma_create_event_channel();
	if (!ch)
		die("rdma_create_event_channel");
	for (i = 0; i < o->warmup; i++) {
		struct conn_times *w = &t[o->conns + i];

		snprintf(label, sizeof(label), "warm-up connection %d", i + 1);
		connect_one(ch, &dst, o, label, w);
		warm_s[i] = w->create_id + w->resolve_addr + w->resolve_route + w->create_qp + w->connect;
	}
	wall0 = now();
	for (i = 0; i < o->conns; i++) {
		snprintf(label, sizeof(label), "connection %d of %d", i + 1, o->conns);
		connect_one(ch, &dst, o, label, &t[i]);
		conn_s[i] = t[i].create_id + t[i].resolve_addr + t[i].resolve_route + t[i].create_qp + t[i].connect;
		tear_s[i] = t[i].disconnect + t[i].destroy;
		sum_conn += conn_s[i];
		sum_tear += tear_s[i];
		mean.create_id += t[i].create_id / o->conns;
		mean.resolve_addr += t[i].resolve_addr / o->conns;
		mean.resolve_route += t[i].resolve_route / o->conns;
		mean.create_qp += t[i].create_qp / o->conns;
		mean.connect += t[i].connect / o->conns;
		mean.disconnect += t[i].disconnect / o->conns;
		mean.destroy += t[i].destroy / o->conns;
	}
	wall = now() - wall0;
	printf("{\"connections\":%d,\"warmup\":%d,\"connect_wall_s\":%.6f,\"teardown_wall_s\":%.6f,"
	       "\"total_wall_s\":%.6f,\"connect_rate_per_s\":%.1f,",
	       o->conns, o->warmup, sum_conn, sum_tear, wall, o->conns / sum_conn);
	print_list("connect_us", conn_s, o->conns);
	printf(",");
	print_list("teardown_us", tear_s, o->conns);
	printf(",");
	print_list("warmup_connect_us", warm_s, o->warmup);
	/* quantile() sorts: every call before the lists' order matters no more. */
	c_med = quantile(conn_s, o->conns, 0.5);
	c_p90 = quantile(conn_s, o->conns, 0.9);
	t_med = quantile(tear_s, o->conns, 0.5);
	t_p90 = quantile(tear_s, o->conns, 0.9);
	printf(",\"connect_us_median\":%.1f,\"connect_us_p90\":%.1f,\"connect_us_min\":%.1f,\"connect_us_max\":%.1f,",
	       c_med * 1e6, c_p90 * 1e6, conn_s[0] * 1e6, conn_s[o->conns - 1] * 1e6);
	printf("\"teardown_us_median\":%.1f,\"teardown_us_p90\":%.1f,", t_med * 1e6, t_p90 * 1e6);
	printf("\"phases_us_mean\":{\"create_id\":%.1f,\"resolve_addr\":%.1f,\"resolve_route\":%.1f,"
	       "\"create_qp\":%.1f,\"connect\":%.1f,\"disconnect\":%.1f,\"destroy\":%.1f}}\n",
	       mean.create_id * 1e6, mean.resolve_addr * 1e6, mean.resolve_route * 1e6, mean.create_qp * 1e6,
	       mean.connect * 1e6, mean.disconnect * 1e6, mean.destroy * 1e6);
	rdma_destroy_event_channel(ch);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option long_opts[] = {
		{ "server", no_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .port = 0, .conns = 100, .warmup = 1, .timeout_ms = 30000, .bind_addr = "0.0.0.0" };
	int c;

	while ((c = getopt_long(argc, argv, "sp:a:n:w:t:h", long_opts, NULL)) != -1) {
		switch (c) {
		case 's':
			o.server = 1;
			break;
		case 'p':
			o.port = atoi(optarg);
			break;
		case 'a':
			o.bind_addr = optarg;
			break;
		case 'n':
			o.conns = atoi(optarg);
			break;
		case 'w':
			o.warmup = atoi(optarg);
			break;
		case 't':
			o.timeout_ms = atoi(optarg);
			break;
		default:
			usage();
		}
	}
	if (o.port <= 0 || o.port > 65535 || o.conns < 1 || o.conns > MAX_CONNS || o.warmup < 0 ||
	    o.timeout_ms < 1)
		usage();
	if (o.server) {
		if (optind != argc)
			usage();
		return server(&o);
	}
	if (optind != argc - 1)
		usage();
	o.addr = argv[optind];
	return client(&o);
}
