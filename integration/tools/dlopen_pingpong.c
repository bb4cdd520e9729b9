/*
 * dlopen_pingpong: an RC ping-pong client that loads verbs the way NCCL's
 * IB transport does: dlopen("libibverbs.so"), falling back to
 * "libibverbs.so.1", and every function taken with dlvsym(handle, name,
 * "IBVERBS_1.1") on that handle. Not linked against libibverbs.
 *
 * Prints each device it lists and that device's GIDs, then runs ITERS
 * ping-pongs of SIZE bytes with an `ibv_rc_pingpong -g GIDX -s SIZE -n
 * ITERS` server at SERVER:PORT (the same exchange of "LID:QPN:PSN:GID" over
 * TCP). Usage: dlopen_pingpong DEVICE GIDX SERVER PORT SIZE ITERS
 * Exit: 0 done, 1 usage, 2 loading, 3 verbs error, 4 exchange error.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static struct {
	struct ibv_device **(*get_device_list)(int *);
	void (*free_device_list)(struct ibv_device **);
	const char *(*get_device_name)(struct ibv_device *);
	struct ibv_context *(*open_device)(struct ibv_device *);
	int (*close_device)(struct ibv_context *);
	int (*query_port)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
	int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	int (*dealloc_pd)(struct ibv_pd *);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
	int (*dereg_mr)(struct ibv_mr *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *,
				    int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
	int (*destroy_qp)(struct ibv_qp *);
} v;

static int load(void)
{
	void *h = dlopen("libibverbs.so", RTLD_NOW);

	if (!h)
		h = dlopen("libibverbs.so.1", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return -1;
	}
#define SYM(field, name)                                                          \
	do {                                                                      \
		*(void **)&v.field = dlvsym(h, name, "IBVERBS_1.1");              \
		if (!v.field) {                                                   \
			fprintf(stderr, "dlvsym %s: %s\n", name, dlerror());      \
			return -1;                                                \
		}                                                                 \
	} while (0)
	SYM(get_device_list, "ibv_get_device_list");
	SYM(free_device_list, "ibv_free_device_list");
	SYM(get_device_name, "ibv_get_device_name");
	SYM(open_device, "ibv_open_device");
	SYM(close_device, "ibv_close_device");
	SYM(query_port, "ibv_query_port");
	SYM(query_gid, "ibv_query_gid");
	SYM(alloc_pd, "ibv_alloc_pd");
	SYM(dealloc_pd, "ibv_dealloc_pd");
	SYM(reg_mr, "ibv_reg_mr");
	SYM(dereg_mr, "ibv_dereg_mr");
	SYM(create_cq, "ibv_create_cq");
	SYM(destroy_cq, "ibv_destroy_cq");
	SYM(create_qp, "ibv_create_qp");
	SYM(modify_qp, "ibv_modify_qp");
	SYM(destroy_qp, "ibv_destroy_qp");
#undef SYM
	return 0;
}

static void print_gid(const char *what, const union ibv_gid *gid)
{
	char s[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, gid->raw, s, sizeof(s));
	printf("%s %s\n", what, s);
}

/* ibv_rc_pingpong's wire form: the GID's 16 bytes as 32 hex digits. */
static void gid_to_wire(const union ibv_gid *gid, char out[33])
{
	for (int i = 0; i < 16; i++)
		sprintf(out + 2 * i, "%02x", gid->raw[i]);
}

static int wire_to_gid(const char *in, union ibv_gid *gid)
{
	for (int i = 0; i < 16; i++) {
		unsigned int b;

		if (sscanf(in + 2 * i, "%2x", &b) != 1)
			return -1;
		gid->raw[i] = (uint8_t)b;
	}
	return 0;
}

struct dest {
	unsigned int lid, qpn, psn;
	union ibv_gid gid;
};

static int exchange(const char *server, const char *port, const struct dest *mine,
		    struct dest *peer)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
	char msg[sizeof "0000:000000:000000:00000000000000000000000000000000"], wgid[33];
	int fd = -1, rc;

	rc = getaddrinfo(server, port, &hints, &res);
	if (rc) {
		fprintf(stderr, "getaddrinfo %s: %s\n", server, gai_strerror(rc));
		return -1;
	}
	for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
		fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
		if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
			close(fd);
			fd = -1;
		}
	}
	freeaddrinfo(res);
	if (fd < 0) {
		fprintf(stderr, "cannot connect to %s:%s\n", server, port);
		return -1;
	}
	gid_to_wire(&mine->gid, wgid);
	snprintf(msg, sizeof(msg), "%04x:%06x:%06x:%s", mine->lid, mine->qpn, mine->psn, wgid);
	rc = -1;
	if (write(fd, msg, sizeof(msg)) != (ssize_t)sizeof(msg) ||
	    recv(fd, msg, sizeof(msg), MSG_WAITALL) != (ssize_t)sizeof(msg) ||
	    write(fd, "done", sizeof("done")) != (ssize_t)sizeof("done")) {
		fprintf(stderr, "exchange with %s:%s failed\n", server, port);
	} else if (sscanf(msg, "%x:%x:%x:%32s", &peer->lid, &peer->qpn, &peer->psn, wgid) != 4 ||
		   wire_to_gid(wgid, &peer->gid) != 0) {
		fprintf(stderr, "bad reply \"%.*s\"\n", (int)sizeof(msg), msg);
	} else {
		rc = 0;
	}
	close(fd);
	return rc;
}

int main(int argc, char **argv)
{
	struct ibv_device **list, *dev = NULL;
	struct ibv_context *ctx;
	struct ibv_port_attr port;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct dest mine = { 0 }, peer;
	int n, gidx, size, iters, scnt = 0, rcnt = 0, pending;
	char *buf;

	if (argc != 7) {
		fprintf(stderr, "usage: %s DEVICE GIDX SERVER PORT SIZE ITERS\n", argv[0]);
		return 1;
	}
	gidx = atoi(argv[2]);
	size = atoi(argv[5]);
	iters = atoi(argv[6]);
	if (load())
		return 2;
	list = v.get_device_list(&n);
	if (!list) {
		perror("ibv_get_device_list");
		return 3;
	}
	for (int i = 0; i < n; i++) {
		printf("device %s\n", v.get_device_name(list[i]));
		if (strcmp(v.get_device_name(list[i]), argv[1]) == 0)
			dev = list[i];
	}
	if (!dev) {
		fprintf(stderr, "no device %s\n", argv[1]);
		return 3;
	}
	ctx = v.open_device(dev);
	if (!ctx || v.query_port(ctx, 1, &port)) {
		perror("open/query_port");
		return 3;
	}
	for (int i = 0; i < port.gid_tbl_len; i++) {
		union ibv_gid gid;
		char what[32];

		snprintf(what, sizeof(what), "gid %d", i);
		if (v.query_gid(ctx, 1, i, &gid) == 0)
			print_gid(what, &gid);
	}
	if (v.query_gid(ctx, 1, gidx, &mine.gid)) {
		perror("ibv_query_gid");
		return 3;
	}
	buf = calloc(1, (size_t)size);
	pd = v.alloc_pd(ctx);
	mr = pd && buf ? v.reg_mr(pd, buf, (size_t)size, IBV_ACCESS_LOCAL_WRITE) : NULL;
	cq = v.create_cq(ctx, 2, NULL, NULL, 0);
	if (!mr || !cq) {
		perror("pd/mr/cq");
		return 3;
	}
	struct ibv_qp_init_attr init = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
	};
	qp = v.create_qp(pd, &init);
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	if (!qp || v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					   IBV_QP_ACCESS_FLAGS)) {
		perror("create_qp/INIT");
		return 3;
	}
	mine.lid = port.lid;
	mine.qpn = qp->qp_num;
	mine.psn = (unsigned int)getpid() & 0xffffff;
	if (exchange(argv[3], argv[4], &mine, &peer))
		return 4;
	print_gid("peer", &peer.gid);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer.qpn;
	a.rq_psn = peer.psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = peer.gid;
	a.ah_attr.grh.sgid_index = (uint8_t)gidx;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.dlid = (uint16_t)peer.lid;
	a.ah_attr.port_num = 1;
	if (v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					IBV_QP_MIN_RNR_TIMER)) {
		perror("RTR");
		return 3;
	}
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = mine.psn;
	a.max_rd_atomic = 1;
	if (v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
					IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
		perror("RTS");
		return 3;
	}
	/* ibv_rc_pingpong's loop: the client sends first; the next send goes
	 * once the last send completed and the peer's answer arrived. */
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = (uint32_t)size, .lkey = mr->lkey };
	struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad_rwr;
	struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   *bad_swr;
	if (ibv_post_recv(qp, &rwr, &bad_rwr) || ibv_post_send(qp, &swr, &bad_swr)) {
		perror("post");
		return 3;
	}
	pending = 3;
	while (scnt < iters || rcnt < iters) {
		struct ibv_wc wc;
		int got = ibv_poll_cq(cq, 1, &wc);

		if (got < 0) {
			fprintf(stderr, "poll_cq failed\n");
			return 3;
		}
		if (got == 0)
			continue;
		if (wc.status != IBV_WC_SUCCESS) {
			fprintf(stderr, "completion %s status %d after %d sent, %d received\n",
				wc.wr_id == 1 ? "recv" : "send", wc.status, scnt, rcnt);
			return 3;
		}
		if (wc.wr_id == 2) {
			scnt++;
			pending &= ~2;
		} else {
			rcnt++;
			pending &= ~1;
			if (rcnt < iters && ibv_post_recv(qp, &rwr, &bad_rwr)) {
				perror("post_recv");
				return 3;
			}
		}
		if (!pending && scnt < iters) {
			if (ibv_post_send(qp, &swr, &bad_swr)) {
				perror("post_send");
				return 3;
			}
			pending = 3;
		}
	}
	printf("%d iters of %d bytes done\n", iters, size);
	v.destroy_qp(qp);
	v.destroy_cq(cq);
	v.dereg_mr(mr);
	v.dealloc_pd(pd);
	v.close_device(ctx);
	v.free_device_list(list);
	free(buf);
	return 0;
}
