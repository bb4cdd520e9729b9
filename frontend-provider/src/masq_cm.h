/*
 * libmasq's RDMA CM (src/cm/): librdmacm's API carried to masqd.
 * The API itself is <rdma/rdma_cma.h>; this header holds what the
 * implementation shares with its tests.
 */
#ifndef MASQ_CM_H
#define MASQ_CM_H

#include <infiniband/verbs.h>
#include <netinet/in.h>

#include "masq_client.h"
#include "masq_proto.h"

/* The wire's IPv4 socket address <-> struct sockaddr_in. */
void masq_cm_addr_to_wire(struct masq_cm_addr *w, const struct sockaddr_in *sin);
void masq_cm_addr_from_wire(struct sockaddr_in *sin, const struct masq_cm_addr *w);

/*
 * Use ctx and pd as the process's CM device instead of opening the first
 * device (tests: no RDMA device there); the depth limits are what
 * ibv_query_device would have said.
 */
void masq_cm_set_device(struct ibv_context *ctx, struct ibv_pd *pd, uint8_t max_rd_atom,
			uint8_t max_init_rd_atom);

/* The verbs session of ctx (libmasq.c), where the CM moves a QP with
 * masqd (CM_ACCEPT_QP, CM_ESTABLISH_QP); NULL when ctx is not masq's. */
struct masq_session *masq_session_of(struct ibv_context *ctx);

#endif
