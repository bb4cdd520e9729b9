/*
 * What libmasq.c (the provider) gives the rest of libmasq: a context's
 * verbs session and the IPv4 addresses of its virtual GID table.
 */
#ifndef MASQ_LIBMASQ_H
#define MASQ_LIBMASQ_H

#include <infiniband/verbs.h>
#include <netinet/in.h>

#include "transport/transport.h"

/* The verbs session of ctx, where the CM moves a QP with masqd
 * (CM_ACCEPT_QP, CM_ESTABLISH_QP); NULL when ctx is not masq's. */
struct masq_session *masq_session_of(struct ibv_context *ctx);

/* The IPv4 addresses of ctx's virtual GID table, at most max: how many;
 * 0 when ctx is not masq's. */
unsigned int masq_ctx_ipv4s(struct ibv_context *ctx, in_addr_t *out, unsigned int max);

#endif
