/*
 * ud_probe: a plain libibverbs UD program for the tests.
 *
 *   ud_probe DEVICE GID_INDEX ah DEST_IPV4 [HOLD_SECONDS]
 *       create an AH towards ::ffff:DEST; hold it (and the process) for a
 *       while when asked, so that its tracking can be looked at
 *   ud_probe DEVICE GID_INDEX qkey QKEY
 *       move a UD QP to INIT with that Q_Key
 *   ud_probe DEVICE GID_INDEX serve
 *       print "qpn=0x..", wait for one datagram, print where it came from
 *       as ibv_init_ah_from_wc tells it, answer through
 *       ibv_create_ah_from_wc, then wait for the sender's "done" (its QP
 *       stays up until the sender has resolved the answer's GRH: masqd
 *       names no sender whose QP is gone)
 *   ud_probe DEVICE GID_INDEX send DEST_IPV4 QPN [WAIT_SECONDS]
 *       send one datagram to QPN at DEST, wait for the answer, reply
 *       "done" through an address handle made from the answer
 *   ud_probe DEVICE GID_INDEX listen WAIT_SECONDS
 *       post a receive while the QP is in INIT, before its RTR, so that a
 *       datagram is taken from the first moment the QP can receive; print
 *       "qpn=0x..", then whatever arrives within WAIT_SECONDS ("payload=")
 *   ud_probe DEVICE GID_INDEX flood DEST_IPV4 QPN SECONDS
 *       send datagrams to QPN at DEST, one after the other, for SECONDS;
 *       print "sent=N"
 *
 * Prints key=value lines. Exit: 0 ok, 3 the verb under test failed (errno
 * printed), 1 other failures (including a wait for a datagram that ran
 * out: 60 s unless WAIT_SECONDS says otherwise).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define QKEY 0x11111111
#define BUF 256 /* 40 bytes of GRH, then the payload */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static char buf[2][BUF];
static int gid_index;
static int wait_seconds = 60;

static void die(const char *what)
{
	printf("%s_errno=%d\n", what, errno);
	exit(1);
}

static void gid_str(const union ibv_gid *g, char *out, size_t len)
{
	if (!inet_ntop(AF_INET6, g->raw, out, (socklen_t)len))
		snprintf(out, len, "?");
}

static void open_dev(const char *name)
{
	struct ibv_device **list;
	int i, n;

	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), name) == 0)
			ctx = ibv_open_device(list[i]);
	if (!ctx)
		die("open_device");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("alloc_pd");
}

static void ud_qp(void)
{
	struct ibv_qp_init_attr init = { 0 };

	cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
	mr = cq ? ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		die("setup");
	init.send_cq = init.recv_cq = cq;
	init.qp_type = IBV_QPT_UD;
	init.cap.max_send_wr = init.cap.max_recv_wr = 2;
	init.cap.max_send_sge = init.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &init);
	if (!qp)
		die("create_qp");
}

static int to_init(uint32_t qkey)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
				 .qkey = qkey };

	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
}

/* A QP in INIT to RTR, then RTS. */
static void rtr_and_rts(void)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };

	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		die("modify_rtr");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		die("modify_rts");
}

static void to_rts(void)
{
	if (to_init(QKEY))
		die("modify_init");
	rtr_and_rts();
}

static void post_recv(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf[0], .length = BUF, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

	if (ibv_post_recv(qp, &wr, &bad))
		die("post_recv");
}

static void post_send(struct ibv_ah *ah, uint32_t qpn, const char *msg)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf[1], .length = (uint32_t)strlen(msg) + 1,
			       .lkey = mr->lkey };
	struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED, .wr_id = 1 }, *bad;

	snprintf(buf[1], BUF, "%s", msg);
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = QKEY;
	if (ibv_post_send(qp, &wr, &bad))
		die("post_send");
}

/* The completion of wr_id `want` (0 receive, 1 send), within
 * wait_seconds; the other one may come first and is kept. */
static struct ibv_wc wait_wc(uint64_t want)
{
	static struct ibv_wc seen[2];
	static int have[2];
	time_t end = time(NULL) + wait_seconds;
	struct ibv_wc wc;

	while (!have[want]) {
		int n = ibv_poll_cq(cq, 1, &wc);

		if (n < 0)
			die("poll_cq");
		if (n == 1) {
			if (wc.status != IBV_WC_SUCCESS || wc.wr_id > 1) {
				printf("wc_status=%d\n", wc.status);
				exit(1);
			}
			seen[wc.wr_id] = wc;
			have[wc.wr_id] = 1;
			continue;
		}
		if (time(NULL) > end) {
			printf("timeout=1\n");
			exit(1);
		}
		usleep(1000);
	}
	have[want] = 0;
	return seen[want];
}

/* Where the datagram in buf[0] came from, as the app sees it. */
static struct ibv_ah *answer_ah(struct ibv_wc *wc)
{
	struct ibv_ah_attr a;
	struct ibv_ah *ah;
	char g[INET6_ADDRSTRLEN];

	if (ibv_init_ah_from_wc(ctx, 1, wc, (struct ibv_grh *)buf[0], &a)) {
		printf("init_ah_from_wc_errno=%d\n", errno);
		exit(3);
	}
	gid_str(&a.grh.dgid, g, sizeof(g));
	printf("from=%s sgid_index=%u src_qp=0x%x payload=%s\n", g, a.grh.sgid_index, wc->src_qp,
	       buf[0] + 40);
	ah = ibv_create_ah_from_wc(pd, wc, (struct ibv_grh *)buf[0], 1);
	if (!ah) {
		printf("create_ah_from_wc_errno=%d\n", errno);
		exit(3);
	}
	return ah;
}

static struct ibv_ah *ah_to(const char *dest)
{
	struct ibv_ah_attr a = { .is_global = 1, .port_num = 1 };
	struct in_addr ip;
	struct ibv_ah *ah;

	if (inet_pton(AF_INET, dest, &ip) != 1) {
		fprintf(stderr, "ud_probe: bad address %s\n", dest);
		exit(1);
	}
	a.grh.dgid.raw[10] = a.grh.dgid.raw[11] = 0xff;
	memcpy(&a.grh.dgid.raw[12], &ip, 4);
	a.grh.sgid_index = (uint8_t)gid_index;
	a.grh.hop_limit = 64;
	ah = ibv_create_ah(pd, &a);
	if (!ah) {
		printf("create_ah_errno=%d\n", errno);
		exit(3);
	}
	printf("create_ah=ok\n");
	return ah;
}

int main(int argc, char **argv)
{
	struct ibv_wc wc;
	struct ibv_ah *ah;

	if (argc < 4) {
		fprintf(stderr, "usage: see the comment at the top of ud_probe.c\n");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	gid_index = atoi(argv[2]);
	open_dev(argv[1]);
	if (strcmp(argv[3], "ah") == 0 && argc >= 5) {
		ah = ah_to(argv[4]);
		if (argc >= 6)
			sleep((unsigned int)atoi(argv[5]));
		return ibv_destroy_ah(ah) ? 1 : 0;
	}
	if (strcmp(argv[3], "qkey") == 0 && argc == 5) {
		ud_qp();
		if (to_init((uint32_t)strtoul(argv[4], NULL, 0))) {
			printf("modify_init_errno=%d\n", errno);
			return 3;
		}
		printf("modify_init=ok\n");
		return 0;
	}
	if (strcmp(argv[3], "serve") == 0) {
		ud_qp();
		to_rts();
		post_recv();
		printf("qpn=0x%x\n", qp->qp_num);
		wc = wait_wc(0);
		ah = answer_ah(&wc);
		post_recv();
		post_send(ah, wc.src_qp, "pong");
		wait_wc(1);
		wait_wc(0);
		printf("closing=%s\n", buf[0] + 40);
		return 0;
	}
	if (strcmp(argv[3], "listen") == 0 && argc == 5) {
		wait_seconds = atoi(argv[4]);
		ud_qp();
		if (to_init(QKEY))
			die("modify_init");
		post_recv();
		rtr_and_rts();
		printf("qpn=0x%x\n", qp->qp_num);
		wc = wait_wc(0);
		printf("src_qp=0x%x payload=%s\n", wc.src_qp, buf[0] + 40);
		return 0;
	}
	if (strcmp(argv[3], "flood") == 0 && argc == 7) {
		uint32_t qpn = (uint32_t)strtoul(argv[5], NULL, 0);
		unsigned long sent = 0;
		time_t end = time(NULL) + atoi(argv[6]);

		ud_qp();
		to_rts();
		ah = ah_to(argv[4]);
		while (time(NULL) < end) {
			post_send(ah, qpn, "flood");
			wait_wc(1);
			sent++;
		}
		printf("sent=%lu\n", sent);
		return 0;
	}
	if (strcmp(argv[3], "send") == 0 && (argc == 6 || argc == 7)) {
		if (argc == 7)
			wait_seconds = atoi(argv[6]);
		ud_qp();
		to_rts();
		post_recv();
		ah = ah_to(argv[4]);
		post_send(ah, (uint32_t)strtoul(argv[5], NULL, 0), "ping");
		wait_wc(1);
		wc = wait_wc(0);
		ah = answer_ah(&wc);
		post_send(ah, wc.src_qp, "done");
		wait_wc(1);
		return 0;
	}
	fprintf(stderr, "ud_probe: unknown mode %s\n", argv[3]);
	return 1;
}
