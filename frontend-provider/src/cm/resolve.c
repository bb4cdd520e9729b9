/* An id's address: bind, resolve_addr, resolve_route (which wait for their
 * event on a sync id) and listen. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <string.h>

#include "internal.h"

static int is_loopback(const struct sockaddr *sa)
{
	const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

	return sa->sa_family == AF_INET && (ntohl(sin->sin_addr.s_addr) >> 24) == IN_LOOPBACKNET;
}

static int sin_of(const struct sockaddr *sa, struct masq_cm_addr *w)
{
	struct sockaddr_in sin;

	if (sa->sa_family != AF_INET)
		return fail(EAFNOSUPPORT);
	memcpy(&sin, sa, sizeof(sin));
	masq_cm_addr_to_wire(w, &sin);
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct masq_msg_cm_bind_addr_req req;
	struct masq_msg_cm_bind_addr_reply rep;
	struct cm_id *c;

	if (!id || !addr)
		return fail(EINVAL);
	c = cm_of(id);
	masq_msg_cm_bind_addr_req_init(&req);
	req.body.id = c->handle;
	if (sin_of(addr, &req.body.addr))
		return -1;
	if (is_loopback(addr)) {
		/* The kernel's CM binds a loopback address to a device (it
		 * serves loopback connections), and libfabric's verbs
		 * provider probes that bind at fi_getinfo: it succeeds, with
		 * no device (the app's addresses are the vNIC's), and holds
		 * no port; listen and resolve on it are refused. */
		memcpy(&id->route.addr.src_sin, addr, sizeof(id->route.addr.src_sin));
		c->loopback = 1;
		return 0;
	}
	if (CM_CALL(cm_bind_addr, req, rep, NULL))
		return -1;
	masq_cm_addr_from_wire(&id->route.addr.src_sin, &rep.body.src);
	masq_cm_set_restore(c, MASQ_CM_RESTORE_BOUND);
	if (id->route.addr.src_sin.sin_addr.s_addr != htonl(INADDR_ANY)) {
		masq_cm_attach_device(c);
		if (!id->verbs)
			return -1;
	}
	return 0;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr,
		      int timeout_ms)
{
	struct masq_msg_cm_resolve_addr_req req;
	struct masq_msg_cm_resolve_addr_reply rep;
	struct cm_id *c;

	if (!id || !dst_addr)
		return fail(EINVAL);
	c = cm_of(id);
	if (c->loopback || is_loopback(dst_addr) || (src_addr && is_loopback(src_addr)))
		return UNSERVED(EADDRNOTAVAIL,
				"rdma_resolve_addr: loopback is not served by masq");
	masq_msg_cm_resolve_addr_req_init(&req);
	req.body.id = c->handle;
	req.body.timeout_ms = timeout_ms > 0 ? (uint32_t)timeout_ms : 0;
	if (sin_of(dst_addr, &req.body.dst))
		return -1;
	/* A zeroed source (family 0) is taken as none. */
	if (src_addr && src_addr->sa_family != AF_UNSPEC) {
		if (sin_of(src_addr, &req.body.src))
			return -1;
		req.body.has_src = 1;
	}
	if (CM_CALL(cm_resolve_addr, req, rep, NULL))
		return -1;
	masq_cm_set_restore(c, MASQ_CM_RESTORE_BOUND); /* it holds a port now */
	masq_cm_addr_from_wire(&id->route.addr.src_sin, &rep.body.src);
	masq_cm_addr_from_wire(&id->route.addr.dst_sin, &rep.body.dst);
	return masq_cm_complete(c, RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_RESOLVED);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cm_id *c;

	(void)timeout_ms; /* masqd's route is immediate */
	if (!id)
		return fail(EINVAL);
	c = cm_of(id);
	if (CM_ID_CALL(cm_resolve_route, c->handle))
		return -1;
	return masq_cm_complete(c, RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct masq_msg_cm_listen_req req;
	struct masq_msg_cm_listen_reply rep;

	if (!id)
		return fail(EINVAL);
	if (cm_of(id)->loopback)
		return UNSERVED(EADDRNOTAVAIL,
				"rdma_listen: loopback is not served by masq");
	masq_msg_cm_listen_req_init(&req);
	req.body.id = cm_of(id)->handle;
	req.body.backlog = backlog > 0 ? (uint32_t)backlog : 0;
	if (CM_CALL(cm_listen, req, rep, NULL))
		return -1;
	pthread_mutex_lock(&masq_cm_ids_lock);
	cm_of(id)->restore = MASQ_CM_RESTORE_LISTENING;
	cm_of(id)->backlog = req.body.backlog;
	pthread_mutex_unlock(&masq_cm_ids_lock);
	return 0;
}
