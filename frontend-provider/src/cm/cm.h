/*
 * libmasq's RDMA CM (src/cm): librdmacm's API carried to masqd.
 * The API itself is <rdma/rdma_cma.h>; this header holds what the
 * implementation shares with its tests. Errors, in the whole folder: -1
 * (or NULL) with errno set, as librdmacm's (see internal.h).
 */
#ifndef MASQ_CM_H
#define MASQ_CM_H

#include <infiniband/verbs.h>
#include <netinet/in.h>

#include "masq_proto.h"

/* The wire's IPv4 socket address <-> struct sockaddr_in. */
void masq_cm_addr_to_wire(struct masq_cm_addr *w, const struct sockaddr_in *sin);
void masq_cm_addr_from_wire(struct sockaddr_in *sin, const struct masq_cm_addr *w);

/*
 * Add ctx and pd, holding IPv4 address vip, as the CM's next device (the
 * first is device 0, whose ctx->cmd_fd the CM connection hands masqd),
 * instead of opening libmasq's devices (tests: no RDMA device there); the
 * depth limits are what ibv_query_device would say.
 */
void masq_cm_add_device(struct ibv_context *ctx, struct ibv_pd *pd, uint8_t max_rd_atom,
			uint8_t max_init_rd_atom, in_addr_t vip);

#endif
