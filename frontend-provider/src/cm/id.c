/* CM ids: create/destroy/migrate and acks. The id table is table.c's; the
 * addressing calls (bind, resolve_addr, resolve_route, listen) resolve.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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
	if (CM_CALL(cm_create_id, req, rep, NULL)) {
		err = errno;
		free_id(c);
		return fail(err);
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
	err = CM_ID_CALL(cm_destroy_id, c->handle) ? errno : 0;
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
	if (err && err != ECONNRESET && err != ENOTCONN)
		return fail(err);
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
	if (CM_CALL(cm_migrate_id, req, rep, NULL)) {
		err = errno;
		if (sync)
			rdma_destroy_event_channel(channel);
		return fail(err);
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
