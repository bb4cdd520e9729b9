/*
 * cm_pdata: an RDMA CM peer that shows what crosses the CM, for tests.
 *
 *   cm_pdata server PORT COUNT   serve COUNT connect requests on 0.0.0.0:PORT:
 *                                private data "reject-me" is rejected with
 *                                "go-away", anything else accepted with
 *                                "welcome:<data>"; each accepted connection
 *                                is held until the client disconnects
 *   cm_pdata client ADDR PORT DATA [hold]
 *                                connect with DATA as private data, print
 *                                the outcome, disconnect; with "hold", once
 *                                established print "holding" and wait for
 *                                SIGUSR1 before disconnecting
 *   cm_pdata udserver PORT COUNT, cm_pdata udclient ADDR PORT DATA
 *                                the same in RDMA_PS_UDP (UD QPs): the
 *                                server answers COUNT requests, the client
 *                                prints what ESTABLISHED tells it (the
 *                                server's QPN, the Q_Key, the address
 *                                vector's destination) and exits
 *
 * Prints one line per CM event it sees. Client exit codes: 0 established,
 * 2 rejected, 3 unreachable, 1 anything else.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

/* RDMA_PS_UDP and UD QPs instead of RDMA_PS_TCP and RC. */
static int ud;

static void die(const char *what)
{
	fprintf(stderr, "cm_pdata: %s: %s\n", what, strerror(errno));
	exit(1);
}

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch)
{
	struct rdma_cm_event *ev;

	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	printf("event %s status %d\n", rdma_event_str(ev->event), ev->status);
	fflush(stdout);
	return ev;
}

static void print_data(const char *label, const void *data, size_t len)
{
	printf("%s private_data=%.*s\n", label, (int)len, (const char *)data);
	fflush(stdout);
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = ud ? IBV_QPT_UD : IBV_QPT_RC,
	};
	struct ibv_pd *pd = ibv_alloc_pd(id->verbs);
	struct ibv_cq *cq = pd ? ibv_create_cq(id->verbs, 8, NULL, NULL, 0) : NULL;

	if (!cq)
		die("pd/cq");
	attr.send_cq = attr.recv_cq = cq;
	if (rdma_create_qp(id, pd, &attr))
		die("rdma_create_qp");
}

static int server(int port, int count)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
	struct rdma_cm_id *listener;
	char reply[128];

	if (!ch || rdma_create_id(ch, &listener, NULL, ud ? RDMA_PS_UDP : RDMA_PS_TCP))
		die("create id");
	if (rdma_bind_addr(listener, (struct sockaddr *)&sin) || rdma_listen(listener, 8))
		die("listen");
	printf("listening on %d\n", port);
	fflush(stdout);
	while (count > 0) {
		struct rdma_cm_event *ev = next_event(ch);
		struct rdma_cm_id *id = ev->id;
		struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
						 .rnr_retry_count = 7 };

		const void *data = ud ? ev->param.ud.private_data : ev->param.conn.private_data;
		uint8_t data_len = ud ? ev->param.ud.private_data_len
				      : ev->param.conn.private_data_len;

		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST:
			count--;
			print_data("request", data, data_len);
			if (data_len >= 9 && memcmp(data, "reject-me", 9) == 0) {
				rdma_ack_cm_event(ev);
				if (rdma_reject(id, "go-away", 7))
					die("rdma_reject");
				rdma_destroy_id(id);
				continue;
			}
			snprintf(reply, sizeof(reply), "welcome:%.*s", (int)data_len,
				 (const char *)data);
			rdma_ack_cm_event(ev);
			make_qp(id);
			param.private_data = reply;
			param.private_data_len = (uint8_t)strlen(reply);
			if (rdma_accept(id, &param))
				die("rdma_accept");
			if (ud) {
				/* SIDR: the answer was all; nothing follows. */
				printf("accepted qpn=0x%x\n", id->qp->qp_num);
				fflush(stdout);
				rdma_destroy_qp(id);
				rdma_destroy_id(id);
				break;
			}
			/* ESTABLISHED, then DISCONNECTED when the client leaves. */
			count++;
			break;
		case RDMA_CM_EVENT_ESTABLISHED:
			rdma_ack_cm_event(ev);
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			rdma_ack_cm_event(ev);
			rdma_destroy_qp(id);
			rdma_destroy_id(id);
			count--;
			break;
		default:
			rdma_ack_cm_event(ev);
			break;
		}
	}
	rdma_destroy_id(listener);
	rdma_destroy_event_channel(ch);
	return 0;
}

static int client(const char *addr, const char *port, const char *data, int hold)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param param = { .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 7, .rnr_retry_count = 7,
					 .private_data = data,
					 .private_data_len = (uint8_t)strlen(data) };
	struct addrinfo *ai;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int rc = 1;

	if (!ch || rdma_create_id(ch, &id, NULL, ud ? RDMA_PS_UDP : RDMA_PS_TCP))
		die("create id");
	if (getaddrinfo(addr, port, NULL, &ai))
		die("getaddrinfo");
	if (rdma_resolve_addr(id, NULL, ai->ai_addr, 2000))
		die("rdma_resolve_addr");
	freeaddrinfo(ai);
	ev = next_event(ch);
	if (ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		return 1;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	ev = next_event(ch);
	if (ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
		return 1;
	rdma_ack_cm_event(ev);
	make_qp(id);
	if (rdma_connect(id, &param))
		die("rdma_connect");
	ev = next_event(ch);
	switch (ud ? ev->event + 100 : ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED + 100: {
		const struct rdma_ud_param *u = &ev->param.ud;
		char dgid[INET_ADDRSTRLEN] = "?";

		print_data("established", u->private_data, u->private_data_len);
		inet_ntop(AF_INET, &u->ah_attr.grh.dgid.raw[12], dgid, sizeof(dgid));
		printf("peer qpn=0x%x qkey=0x%x dgid=%s global=%d\n", u->qp_num, u->qkey, dgid,
		       u->ah_attr.is_global);
		rc = 0;
		break;
	}
	case RDMA_CM_EVENT_UNREACHABLE + 100:
		print_data("unreachable", ev->param.ud.private_data,
			   ev->param.ud.private_data_len);
		rc = 3;
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		print_data("established", ev->param.conn.private_data,
			   ev->param.conn.private_data_len);
		rdma_ack_cm_event(ev);
		if (hold) {
			sigset_t usr1;
			int sig;

			sigemptyset(&usr1);
			sigaddset(&usr1, SIGUSR1);
			printf("holding\n");
			fflush(stdout);
			if (sigwait(&usr1, &sig))
				die("sigwait");
		}
		if (rdma_disconnect(id))
			die("rdma_disconnect");
		ev = next_event(ch);
		rc = ev->event == RDMA_CM_EVENT_DISCONNECTED ? 0 : 1;
		break;
	case RDMA_CM_EVENT_REJECTED:
		print_data("rejected", ev->param.conn.private_data,
			   ev->param.conn.private_data_len);
		rc = 2;
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		rc = 3;
		break;
	default:
		break;
	}
	rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return rc;
}

int main(int argc, char **argv)
{
	sigset_t usr1;

	/* Blocked before any thread starts, so only sigwait takes it. */
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);
	if (argc > 1 && strncmp(argv[1], "ud", 2) == 0) {
		ud = 1;
		argv[1] += 2;
	}
	if (argc == 4 && strcmp(argv[1], "server") == 0)
		return server(atoi(argv[2]), atoi(argv[3]));
	if (argc == 5 && strcmp(argv[1], "client") == 0)
		return client(argv[2], argv[3], argv[4], 0);
	if (argc == 6 && strcmp(argv[1], "client") == 0 && strcmp(argv[5], "hold") == 0)
		return client(argv[2], argv[3], argv[4], 1);
	fprintf(stderr, "usage: cm_pdata [ud]server PORT COUNT | [ud]client ADDR PORT DATA [hold]\n");
	return 1;
}
