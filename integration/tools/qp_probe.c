/*
 * qp_probe: a plain libibverbs program for the tests. It opens DEVICE,
 * creates an RC QP, moves it RESET->INIT->RTR towards ::ffff:DEST (a
 * virtual IP when run through masq) and prints what ibv_query_qp then
 * reports, plus which library implements the data-path entry points.
 *
 *   qp_probe DEVICE GID_INDEX DEST_IPV4
 *
 * Exit: 0 ok, 3 ibv_modify_qp failed (errno printed), 1 other failures.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *lib_of(void *fn)
{
	Dl_info info;

	return fn && dladdr(fn, &info) && info.dli_fname ? info.dli_fname : "?";
}

int main(int argc, char **argv)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_qp_init_attr init = { 0 }, qinit;
	struct ibv_qp_attr attr, q;
	char buf[INET6_ADDRSTRLEN];
	struct in_addr dest;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int i, n, gid_index;

	if (argc != 4 || inet_pton(AF_INET, argv[3], &dest) != 1) {
		fprintf(stderr, "usage: qp_probe DEVICE GID_INDEX DEST_IPV4\n");
		return 1;
	}
	gid_index = atoi(argv[2]);
	list = ibv_get_device_list(&n);
	for (i = 0; list && i < n; i++)
		if (strcmp(ibv_get_device_name(list[i]), argv[1]) == 0)
			ctx = ibv_open_device(list[i]);
	if (!ctx) {
		fprintf(stderr, "qp_probe: cannot open %s\n", argv[1]);
		return 1;
	}
	pd = ibv_alloc_pd(ctx);
	cq = pd ? ibv_create_cq(ctx, 4, NULL, NULL, 0) : NULL;
	init.send_cq = init.recv_cq = cq;
	init.qp_type = IBV_QPT_RC;
	init.cap.max_send_wr = init.cap.max_recv_wr = 1;
	init.cap.max_send_sge = init.cap.max_recv_sge = 1;
	qp = cq ? ibv_create_qp(pd, &init) : NULL;
	if (!qp) {
		perror("qp_probe: create");
		return 1;
	}
	printf("qpn=%u\n", qp->qp_num);
	printf("post_send_lib=%s\npoll_cq_lib=%s\n", lib_of((void *)ctx->ops.post_send),
	       lib_of((void *)ctx->ops.poll_cq));

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	attr.port_num = 1;
	attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(qp, &attr,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
		printf("modify_qp_init: errno=%d (%s)\n", errno, strerror(errno));
		return 3;
	}
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	attr.path_mtu = IBV_MTU_1024;
	attr.dest_qp_num = 0x123;
	attr.rq_psn = 1;
	attr.max_dest_rd_atomic = 1;
	attr.min_rnr_timer = 12;
	attr.ah_attr.is_global = 1;
	attr.ah_attr.port_num = 1;
	attr.ah_attr.grh.hop_limit = 1;
	attr.ah_attr.grh.sgid_index = (uint8_t)gid_index;
	attr.ah_attr.grh.dgid.raw[10] = 0xff;
	attr.ah_attr.grh.dgid.raw[11] = 0xff;
	memcpy(&attr.ah_attr.grh.dgid.raw[12], &dest, 4);
	if (ibv_modify_qp(qp, &attr,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER)) {
		printf("modify_qp_rtr: errno=%d (%s)\n", errno, strerror(errno));
		printf("state_after_failure=%d\n", qp->state);
		return 3;
	}
	memset(&q, 0, sizeof(q));
	if (ibv_query_qp(qp, &q, IBV_QP_STATE | IBV_QP_AV | IBV_QP_DEST_QPN, &qinit)) {
		perror("qp_probe: query_qp");
		return 1;
	}
	inet_ntop(AF_INET6, q.ah_attr.grh.dgid.raw, buf, sizeof(buf));
	printf("state=%d\ndgid=%s\nsgid_index=%u\ndest_qp_num=0x%x\n", q.qp_state, buf,
	       q.ah_attr.grh.sgid_index, q.dest_qp_num);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
