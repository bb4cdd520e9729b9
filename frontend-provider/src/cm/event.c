/* CM events: rdma_get_cm_event reads masqd's CM_EVENT notices off a
 * channel and turns each into struct rdma_cm_event, acting on it on the way
 * as librdmacm does (route, new ids, the active side's RTS); a sync id's
 * call waits here for its event (masq_cm_complete). */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static int addr_unset(const struct masq_cm_addr *w)
{
	return !w->addr[0] && !w->addr[1] && !w->addr[2] && !w->addr[3] && !w->port;
}

/* ::ffff:a.b.c.d, the GID RoCE v2 gives an IPv4 address. */
static void v4_gid(union ibv_gid *gid, const struct sockaddr_in *sin)
{
	memset(gid, 0, sizeof(*gid));
	gid->raw[10] = gid->raw[11] = 0xff;
	memcpy(&gid->raw[12], &sin->sin_addr.s_addr, 4);
}

static void set_route_addrs(struct cm_id *c, const struct masq_cm_addrs *a)
{
	struct rdma_addr *ra = &c->id.route.addr;

	/* An unset half says nothing new (and must not clobber a bound port). */
	if (!addr_unset(&a->src))
		masq_cm_addr_from_wire(&ra->src_sin, &a->src);
	if (!addr_unset(&a->dst))
		masq_cm_addr_from_wire(&ra->dst_sin, &a->dst);
	if (ra->src_addr.sa_family == AF_INET)
		v4_gid(&ra->addr.ibaddr.sgid, &ra->src_sin);
	if (ra->dst_addr.sa_family == AF_INET)
		v4_gid(&ra->addr.ibaddr.dgid, &ra->dst_sin);
	ra->addr.ibaddr.pkey = htobe16(0xffff);
}

/* One path: RoCE has no SA; apps only look at the GIDs, if at all. */
static void set_route_path(struct cm_id *c)
{
	struct ibv_sa_path_rec *p = &c->path;
	struct rdma_addr *ra = &c->id.route.addr;

	memset(p, 0, sizeof(*p));
	p->sgid = ra->addr.ibaddr.sgid;
	p->dgid = ra->addr.ibaddr.dgid;
	p->pkey = htobe16(0xffff);
	p->hop_limit = 64;
	p->reversible = 1;
	p->numb_path = 1;
	p->mtu_selector = 2; /* exactly */
	p->mtu = IBV_MTU_1024;
	c->id.route.path_rec = p;
	c->id.route.num_paths = 1;
}

static void copy_conn_param(struct cm_event *e, const struct masq_cm_conn_param *p)
{
	struct rdma_conn_param *d = &e->ev.param.conn;
	uint32_t len = p->private_data_len; /* <= MASQ_CM_MAX_PRIVATE_DATA: validated */

	memset(d, 0, sizeof(*d));
	if (len) {
		memcpy(e->private_data, p->private_data, len);
		d->private_data = e->private_data;
		d->private_data_len = (uint8_t)len;
	}
	d->responder_resources = p->responder_resources;
	d->initiator_depth = p->initiator_depth;
	d->flow_control = p->flow_control;
	d->retry_count = p->retry_count;
	d->rnr_retry_count = p->rnr_retry_count;
	d->srq = p->srq;
	d->qp_num = p->qp_num;
}

/* A UD id's event as librdmacm's ucma_copy_ud_event gives it: the peer's
 * private data and, on ESTABLISHED, its QP, Q_Key and address vector
 * (virtual), which masqd carries in the event's rtr_attr. */
static void copy_ud_param(struct cm_event *e, const struct masq_cm_event *n)
{
	struct rdma_ud_param *d = &e->ev.param.ud;
	const struct masq_cm_qp_attr *peer = &n->rtr_attr;
	uint32_t len = n->param.private_data_len; /* validated */

	memset(d, 0, sizeof(*d));
	if (len) {
		memcpy(e->private_data, n->param.private_data, len);
		d->private_data = e->private_data;
		d->private_data_len = (uint8_t)len;
	}
	if (n->event != RDMA_CM_EVENT_ESTABLISHED)
		return;
	d->qp_num = n->param.qp_num;
	if (peer->attr_mask & IBV_QP_QKEY)
		d->qkey = peer->attr.qkey;
	if (peer->attr_mask & IBV_QP_AV)
		masq_ah_attr_from_wire(&d->ah_attr, &peer->attr.ah_attr);
}

/* The active side's half of the handshake once the peer accepted (as
 * librdmacm's ucma_process_conn_resp): 0, or -1 with errno. */
static int finish_connect(struct cm_id *c)
{
	if (masq_cm_id_move_qp(c, NULL) != 0) {
		if (errno != ENOTSUP)
			return -1;
		if (masq_cm_modify_qp(&c->id, IBV_QPS_RTR, 0xff) ||
		    masq_cm_modify_qp(&c->id, IBV_QPS_RTS, 0xff) ||
		    CM_ID_CALL(cm_establish, c->handle))
			return -1;
	}
	masq_cm_set_restore(c, MASQ_CM_RESTORE_CONNECTED);
	return 0;
}

static void reject_after_error(struct cm_id *c)
{
	struct masq_msg_cm_reject_req req;
	struct masq_msg_cm_reject_reply rep;

	masq_msg_cm_reject_req_init(&req);
	req.body.id = c->handle;
	(void)CM_CALL(cm_reject, req, rep, NULL);
}

/*
 * A new id for a connection request: masqd's id n on the listener's
 * channel; sync like its listener. NULL (the request dropped) on failure.
 */
static struct cm_id *accept_request(struct cm_id *listener, const struct masq_cm_event *n)
{
	struct cm_id *c = masq_cm_alloc_id(listener->id.channel, listener->id.context,
					   listener->id.ps,
					   listener->id.qp_type);

	if (!c) {
		(void)CM_ID_CALL(cm_destroy_id, n->id);
		return NULL;
	}
	c->handle = n->id;
	c->restore = MASQ_CM_RESTORE_PENDING; /* not in ids yet: no lock needed */
	c->remote_qpn = n->param.qp_num;
	c->responder_resources = n->param.responder_resources;
	c->initiator_depth = n->param.initiator_depth;
	set_route_addrs(c, &n->addrs);
	masq_cm_attach_device(c);
	masq_cm_insert_id(c);
	if (listener->sync && rdma_migrate_id(&c->id, NULL)) {
		masq_log("cannot give the connection request a channel of its own: %s",
		       strerror(errno));
		rdma_destroy_id(&c->id);
		return NULL;
	}
	return c;
}

/* Turn notice n into e, acting on it as librdmacm would. 1: deliver e;
 * 0: nothing for the app (e unused). Call without ids_lock. */
int masq_cm_process_event(const struct masq_cm_event *n, struct cm_event *e)
{
	struct cm_id *c, *owner;

	pthread_mutex_lock(&masq_cm_ids_lock);
	owner = masq_cm_lookup_id(n->event == RDMA_CM_EVENT_CONNECT_REQUEST ? n->listen_id : n->id);
	if (owner)
		owner->unacked++; /* keeps owner alive while we work on it */
	pthread_mutex_unlock(&masq_cm_ids_lock);
	if (!owner) {
		masq_log("dropping CM event %u for unknown id %u", n->event,
		       n->event == RDMA_CM_EVENT_CONNECT_REQUEST ? n->listen_id : n->id);
		return 0;
	}
	e->owner = owner;
	e->ev.event = (enum rdma_cm_event_type)n->event;
	e->ev.status = n->status;
	e->ev.id = &owner->id;
	c = owner;

	switch (n->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		c = accept_request(owner, n);
		if (!c)
			goto drop;
		masq_cm_keep_qp_attrs(c, n);
		e->ev.id = &c->id;
		e->ev.listen_id = &owner->id;
		if (is_ud(c))
			copy_ud_param(e, n);
		else
			copy_conn_param(e, &n->param);
		return 1;
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		set_route_addrs(c, &n->addrs);
		if (!e->ev.status) {
			masq_cm_attach_device(c);
			if (!c->id.verbs) {
				e->ev.event = RDMA_CM_EVENT_ADDR_ERROR;
				e->ev.status = -errno;
			}
		}
		return 1;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		masq_cm_keep_qp_attrs(c, n);
		set_route_addrs(c, &n->addrs);
		if (!e->ev.status)
			set_route_path(c);
		return 1;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		masq_cm_keep_qp_attrs(c, n);
		set_route_addrs(c, &n->addrs);
		copy_conn_param(e, &n->param);
		pthread_mutex_lock(&masq_cm_ids_lock);
		c->remote_qpn = n->param.qp_num;
		pthread_mutex_unlock(&masq_cm_ids_lock);
		if (!c->id.qp)
			return 1; /* the app modifies its QP and calls rdma_establish */
		if (finish_connect(c) == 0) {
			e->ev.event = RDMA_CM_EVENT_ESTABLISHED;
			return 1;
		}
		e->ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
		e->ev.status = -errno;
		c->connect_error = 1;
		reject_after_error(c);
		(void)masq_cm_qp_to_error(&c->id);
		return 1;
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_DISCONNECTED:
		masq_cm_set_restore(c, MASQ_CM_RESTORE_BOUND); /* holds its port until destroyed */
		if (c->connect_error)
			goto drop; /* the app already has its CONNECT_ERROR */
		set_route_addrs(c, &n->addrs);
		copy_conn_param(e, &n->param);
		(void)masq_cm_qp_to_error(&c->id);
		return 1;
	default:
		/* A UD id keeps no connection to restore: bound, holding its port. */
		if (n->event == RDMA_CM_EVENT_ESTABLISHED && !is_ud(c))
			masq_cm_set_restore(c, MASQ_CM_RESTORE_CONNECTED); /* the passive side's */
		else if (n->event == RDMA_CM_EVENT_ESTABLISHED ||
			 n->event == RDMA_CM_EVENT_CONNECT_ERROR ||
			 n->event == RDMA_CM_EVENT_UNREACHABLE)
			masq_cm_set_restore(c, MASQ_CM_RESTORE_BOUND);
		set_route_addrs(c, &n->addrs);
		if (is_ud(c))
			copy_ud_param(e, n);
		else
			copy_conn_param(e, &n->param);
		return 1;
	}
drop:
	pthread_mutex_lock(&masq_cm_ids_lock);
	owner->unacked--;
	pthread_cond_broadcast(&masq_cm_ids_cond);
	pthread_mutex_unlock(&masq_cm_ids_lock);
	return 0;
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct masq_msg_cm_event_notice m;
	uint8_t buf[MASQ_MAX_MESSAGE];
	struct cm_event *e;
	uint64_t serial;
	ssize_t n;
	int err, fd;

	if (!channel || !event)
		return fail(EINVAL);
	/* channel may be freed while recv blocks: only these are used after. */
	serial = container_of(channel, struct cm_channel, ch)->serial;
	fd = channel->fd;
	for (;;) {
		unsigned int gen = masq_cm_generation();

		/* Blocks unless the app made the fd non-blocking: then EAGAIN. */
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return -1;
		if (n == 0) {
			if (!masq_cm_channel_live(serial)) {
				for (;;)
					pause(); /* destroyed under us: no event ever comes */
			}
			/* masqd went away: once a new one has the channel and
			 * its ids again, fd is its new event socket. Blocks
			 * until masqd is back, as the kernel's would. */
			while ((err = masq_cm_recover(gen)) != 0 && errno == EAGAIN)
				masq_cm_nap_ms(100);
			if (err || masq_cm_channel_generation(serial, 0) != masq_cm_generation())
				return fail(ECONNRESET);
			continue;
		}
		err = masq_msg_cm_event_notice_decode(buf, (size_t)n, &m);
		if (err) {
			masq_log("dropping a malformed CM event notice: %s", strerror(-err));
			continue;
		}
		e = calloc(1, sizeof(*e));
		if (!e)
			return fail(ENOMEM);
		if (masq_cm_process_event(&m.body, e)) {
			*event = &e->ev;
			return 0;
		}
		free(e);
	}
}

/* A sync id's call waits for its outcome, kept in id->event until the
 * next call or rdma_destroy_id (as librdmacm's ucma_complete). */
int masq_cm_complete(struct cm_id *c, enum rdma_cm_event_type want, enum rdma_cm_event_type or)
{
	struct rdma_cm_event *ev;

	if (!c->sync)
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	if (rdma_get_cm_event(c->id.channel, &c->id.event))
		return -1;
	ev = c->id.event;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return fail(ECONNREFUSED);
	if (ev->status)
		return fail(ev->status < 0 ? -ev->status : ev->status);
	if (ev->event == want || ev->event == or)
		return 0;
	return fail(ev->event == RDMA_CM_EVENT_DISCONNECTED ? ECONNRESET : EPROTO);
}
