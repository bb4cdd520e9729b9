/* CM ids: the id table, create/destroy/migrate, acks, and the addressing
 * calls (bind, resolve_addr, resolve_route, listen). */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* ------------------------------------------------------------ addressing */

void masq_cm_addr_to_wire(struct masq_cm_addr *w, const struct sockaddr_in *sin)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->addr, &sin->sin_addr.s_addr, sizeof(w->addr));
	w->port = ntohs(sin->sin_port);
}

void masq_cm_addr_from_wire(struct sockaddr_in *sin, const struct masq_cm_addr *w)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	memcpy(&sin->sin_addr.s_addr, w->addr, sizeof(w->addr));
	sin->sin_port = htons(w->port);
}

/* handle -> id; the lock also covers every unacked count and ids_cond
 * signals acks. */
pthread_mutex_t masq_cm_ids_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t masq_cm_ids_cond = PTHREAD_COND_INITIALIZER;
struct cm_id *masq_cm_ids;

struct cm_id *masq_cm_lookup_id(uint32_t handle)
{
	struct cm_id *c;

	for (c = masq_cm_ids; c && c->handle != handle; c = c->next)
		;
	return c;
}

void masq_cm_insert_id(struct cm_id *c)
{
	pthread_mutex_lock(&masq_cm_ids_lock);
	c->next = masq_cm_ids;
	masq_cm_ids = c;
	pthread_mutex_unlock(&masq_cm_ids_lock);
}

static void remove_id(struct cm_id *c)
{
	struct cm_id **pp;

	pthread_mutex_lock(&masq_cm_ids_lock);
	for (pp = &masq_cm_ids; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&masq_cm_ids_lock);
}

void masq_cm_set_restore(struct cm_id *c, uint32_t state)
{
	pthread_mutex_lock(&masq_cm_ids_lock);
	c->restore = state;
	pthread_mutex_unlock(&masq_cm_ids_lock);
}

void masq_cm_attach_device(struct cm_id *c)
{
	struct ibv_context *ctx = masq_cm_device(c->id.route.addr.src_sin.sin_addr.s_addr);

	if (!ctx)
		return;
	/* With the device comes its PD, as librdmacm's ucma_get_device gives
	 * every id one: apps make their own QP or MR on id->pd (pyverbs'
	 * CMID.pd). No PD: no device either, and the caller's error. */
	if (!c->id.pd || c->id.pd->context != ctx) {
		c->id.pd = masq_cm_default_pd(ctx);
		if (!c->id.pd)
			return;
	}
	c->id.verbs = ctx;
	c->id.port_num = 1;
}

/* An id struct on channel (NULL: a private one, the id is then sync). */
struct cm_id *masq_cm_alloc_id(struct rdma_event_channel *channel, void *context,
			       enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct cm_id *c = calloc(1, sizeof(*c));

	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	pthread_mutex_init(&c->qp_lock, NULL);
	c->id.context = context;
	c->id.ps = ps;
	c->id.qp_type = qp_type;
	if (!channel) {
		channel = rdma_create_event_channel();
		if (!channel) {
			pthread_mutex_destroy(&c->qp_lock);
			free(c);
			return NULL;
		}
		c->sync = 1;
	}
	c->id.channel = channel;
	return c;
}

static void free_id(struct cm_id *c)
{
	if (c->sync)
		rdma_destroy_event_channel(c->id.channel);
	free(c->qp_init_attr);
	pthread_mutex_destroy(&c->qp_lock);
	free(c);
}

int masq_cm_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		      enum rdma_port_space ps, enum ibv_qp_type qp_type)
{
	struct masq_msg_cm_create_id_req req;
	struct masq_msg_cm_create_id_reply rep;
	struct cm_id *c;
	int err;

	if (!id)
		return fail(EINVAL);
	c = masq_cm_alloc_id(channel, context, ps, qp_type);
	if (!c)
		return -1;
	masq_msg_cm_create_id_req_init(&req);
	req.body.channel = channel_handle(c->id.channel);
	req.body.port_space = (uint32_t)ps;
	err = CM_CALL(cm_create_id, req, rep, NULL);
	if (err) {
		free_id(c);
		return fail(-err);
	}
	c->handle = rep.body.id;
	masq_cm_insert_id(c);
	*id = &c->id;
	return 0;
}

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_UDP)
		/* RDMA_PS_IPOIB and RDMA_PS_IB: IB fabrics only */
		return UNSERVED(ENOSYS, "rdma_create_id: port space %#x is not served by masq",
				(unsigned int)ps);
	return masq_cm_create_id(channel, id, context, ps,
				 ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC);
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	struct cm_event *e;

	if (!event)
		return fail(EINVAL);
	e = container_of(event, struct cm_event, ev);
	pthread_mutex_lock(&masq_cm_ids_lock);
	e->owner->unacked--;
	pthread_cond_broadcast(&masq_cm_ids_cond);
	pthread_mutex_unlock(&masq_cm_ids_lock);
	free(e);
	return 0;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct cm_id *c;
	int err;

	if (!id)
		return fail(EINVAL);
	c = cm_of(id);
	/* Released here whatever masqd says: if it refuses (say, it restarted
	 * and never heard of the id), nothing better can be done with it. */
	err = CM_ID_CALL(cm_destroy_id, c->handle);
	remove_id(c); /* its events still queued are dropped from here on */
	if (id->event) {
		rdma_ack_cm_event(id->event);
		id->event = NULL;
	}
	/* As librdmacm: an event the app holds must not outlive its id. */
	pthread_mutex_lock(&masq_cm_ids_lock);
	while (c->unacked)
		pthread_cond_wait(&masq_cm_ids_cond, &masq_cm_ids_lock);
	pthread_mutex_unlock(&masq_cm_ids_lock);
	free_id(c);
	if (err && err != -ECONNRESET && err != -ENOTCONN)
		return fail(-err);
	return 0;
}

int rdma_migrate_id(struct rdma_cm_id *id, struct rdma_event_channel *channel)
{
	struct masq_msg_cm_migrate_id_req req;
	struct masq_msg_cm_migrate_id_reply rep;
	struct cm_id *c;
	int sync, err;

	if (!id)
		return fail(EINVAL);
	c = cm_of(id);
	if (c->sync && !channel)
		return fail(EINVAL);
	sync = !channel;
	if (sync) {
		channel = rdma_create_event_channel();
		if (!channel)
			return -1;
	}
	masq_msg_cm_migrate_id_req_init(&req);
	req.body.id = c->handle;
	req.body.channel = channel_handle(channel);
	err = CM_CALL(cm_migrate_id, req, rep, NULL);
	if (err) {
		if (sync)
			rdma_destroy_event_channel(channel);
		return fail(-err);
	}
	if (c->sync) {
		if (id->event) {
			rdma_ack_cm_event(id->event);
			id->event = NULL;
		}
		rdma_destroy_event_channel(id->channel);
	}
	c->sync = sync;
	id->channel = channel;
	return 0;
}

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
	int err;

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
	err = CM_CALL(cm_bind_addr, req, rep, NULL);
	if (err)
		return fail(-err);
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
	int err;

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
	err = CM_CALL(cm_resolve_addr, req, rep, NULL);
	if (err)
		return fail(-err);
	masq_cm_set_restore(c, MASQ_CM_RESTORE_BOUND); /* it holds a port now */
	masq_cm_addr_from_wire(&id->route.addr.src_sin, &rep.body.src);
	masq_cm_addr_from_wire(&id->route.addr.dst_sin, &rep.body.dst);
	return masq_cm_complete(c, RDMA_CM_EVENT_ADDR_RESOLVED, RDMA_CM_EVENT_ADDR_RESOLVED);
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct cm_id *c;
	int err;

	(void)timeout_ms; /* masqd's route is immediate */
	if (!id)
		return fail(EINVAL);
	c = cm_of(id);
	err = CM_ID_CALL(cm_resolve_route, c->handle);
	if (err)
		return fail(-err);
	return masq_cm_complete(c, RDMA_CM_EVENT_ROUTE_RESOLVED, RDMA_CM_EVENT_ROUTE_RESOLVED);
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct masq_msg_cm_listen_req req;
	struct masq_msg_cm_listen_reply rep;
	int err;

	if (!id)
		return fail(EINVAL);
	if (cm_of(id)->loopback)
		return UNSERVED(EADDRNOTAVAIL,
				"rdma_listen: loopback is not served by masq");
	masq_msg_cm_listen_req_init(&req);
	req.body.id = cm_of(id)->handle;
	req.body.backlog = backlog > 0 ? (uint32_t)backlog : 0;
	err = CM_CALL(cm_listen, req, rep, NULL);
	if (err)
		return fail(-err);
	pthread_mutex_lock(&masq_cm_ids_lock);
	cm_of(id)->restore = MASQ_CM_RESTORE_LISTENING;
	cm_of(id)->backlog = req.body.backlog;
	pthread_mutex_unlock(&masq_cm_ids_lock);
	return 0;
}
