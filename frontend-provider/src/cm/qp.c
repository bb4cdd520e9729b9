/* The CM ids' QPs: their attributes from masqd's events, the steps of
 * their states, and rdma_create_qp / rdma_destroy_qp with their CQs. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

/* The event's attributes for INIT, RTR and RTS, kept for
 * rdma_init_qp_attr; an event that carries none leaves the kept ones. */
void masq_cm_keep_qp_attrs(struct cm_id *c, const struct masq_cm_event *n)
{
	if (!n->init_attr.attr_mask)
		return;
	pthread_mutex_lock(&masq_cm_ids_lock);
	c->qp_attrs[0] = n->init_attr;
	c->qp_attrs[1] = n->rtr_attr;
	c->qp_attrs[2] = n->rts_attr;
	pthread_mutex_unlock(&masq_cm_ids_lock);
}

/* The attributes masqd has for moving id's QP to state: from the last
 * event when it carried them, else by CM_INIT_QP_ATTR. */
int rdma_init_qp_attr(struct rdma_cm_id *id, struct ibv_qp_attr *qp_attr, int *qp_attr_mask)
{
	struct masq_msg_cm_init_qp_attr_req req;
	struct masq_msg_cm_init_qp_attr_reply rep;
	const struct masq_qp_attr *w = &rep.body.attr;
	enum ibv_qp_state state;
	uint8_t timeout_set, timeout, tos_set, tos;
	struct cm_id *c;
	int mask;

	if (!id || !qp_attr || !qp_attr_mask)
		return fail(EINVAL);
	c = cm_of(id);
	state = qp_attr->qp_state;
	rep.body.attr_mask = 0;
	pthread_mutex_lock(&masq_cm_ids_lock);
	if (state >= IBV_QPS_INIT && state <= IBV_QPS_RTS)
		rep.body = c->qp_attrs[state - IBV_QPS_INIT];
	timeout_set = c->ack_timeout_set;
	timeout = c->ack_timeout;
	tos_set = c->tos_set;
	tos = c->tos;
	pthread_mutex_unlock(&masq_cm_ids_lock);
	if (!rep.body.attr_mask) {
		masq_msg_cm_init_qp_attr_req_init(&req);
		req.body.id = c->handle;
		req.body.qp_state = (uint32_t)state;
		if (CM_CALL(cm_init_qp_attr, req, rep, NULL))
			return -1;
	}
	mask = (int)rep.body.attr_mask;
	memset(qp_attr, 0, sizeof(*qp_attr));
	masq_qp_attr_from_wire(qp_attr, w);
	if (!(mask & IBV_QP_STATE))
		qp_attr->qp_state = state;
	if (mask & IBV_QP_CAP) {
		qp_attr->cap.max_send_wr = w->cap.max_send_wr;
		qp_attr->cap.max_recv_wr = w->cap.max_recv_wr;
		qp_attr->cap.max_send_sge = w->cap.max_send_sge;
		qp_attr->cap.max_recv_sge = w->cap.max_recv_sge;
		qp_attr->cap.max_inline_data = w->cap.max_inline_data;
	}
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		qp_attr->en_sqd_async_notify = w->en_sqd_async_notify;
	if (mask & IBV_QP_RATE_LIMIT)
		qp_attr->rate_limit = w->rate_limit;
	/* The app's options, as the kernel's CM applies them (cma.c's
	 * rdma_init_qp_attr and route): masqd's QoS may still change the
	 * traffic class, as an operator's policy does any app's. */
	if (state == IBV_QPS_RTS && timeout_set) {
		qp_attr->timeout = timeout;
		mask |= IBV_QP_TIMEOUT;
	}
	if (state == IBV_QPS_RTR && tos_set && (mask & IBV_QP_AV) && qp_attr->ah_attr.is_global)
		qp_attr->ah_attr.grh.traffic_class = tos;
	*qp_attr_mask = mask;
	return 0;
}

/*
 * Move id's QP to state with masqd's attributes; a depth other than 0xff
 * replaces the RTR responder resources or the RTS initiator depth (as
 * librdmacm does with the values the app accepted). 0, or -1 with errno.
 */
int masq_cm_modify_qp(struct rdma_cm_id *id, enum ibv_qp_state state, uint8_t depth)
{
	struct cm_id *c = cm_of(id);
	struct ibv_qp_attr attr;
	int mask, err = 0;

	pthread_mutex_lock(&c->qp_lock);
	if (!id->qp)
		goto out;
	attr.qp_state = state;
	if (rdma_init_qp_attr(id, &attr, &mask)) {
		err = errno;
		goto out;
	}
	if (depth != 0xff && state == IBV_QPS_RTR && (mask & IBV_QP_MAX_DEST_RD_ATOMIC))
		attr.max_dest_rd_atomic = depth;
	if (depth != 0xff && state == IBV_QPS_RTS && (mask & IBV_QP_MAX_QP_RD_ATOMIC))
		attr.max_rd_atomic = depth;
	err = ibv_modify_qp(id->qp, &attr, mask);
out:
	pthread_mutex_unlock(&c->qp_lock);
	return err ? fail(err) : 0;
}

int masq_cm_qp_to_error(struct rdma_cm_id *id)
{
	struct cm_id *c = cm_of(id);
	struct ibv_qp_attr attr;
	int err = 0;

	pthread_mutex_lock(&c->qp_lock);
	if (id->qp) {
		memset(&attr, 0, sizeof(attr));
		attr.qp_state = IBV_QPS_ERR;
		err = ibv_modify_qp(id->qp, &attr, IBV_QP_STATE);
	}
	pthread_mutex_unlock(&c->qp_lock);
	return err ? fail(err) : 0;
}

/*
 * CM_ACCEPT_QP (accept: the parameters) or CM_ESTABLISH_QP on the verbs
 * session of the id's QP: masqd moves the QP to RTR and RTS with the id's
 * attributes, then accepts or establishes, in one round trip where the
 * kernel's CM takes three steps. ENOTSUP when that cannot be asked (no
 * RTR attributes came with the id's event, the app set an ACK timeout or
 * a TOS, or the QP is not on a masq context): the caller then takes the
 * steps one by one. 0, or -1 with errno.
 */
int masq_cm_id_move_qp(struct cm_id *c, const struct masq_cm_conn_param *accept)
{
	struct masq_cm_qp_attr rtr;
	struct masq_session *s;
	int err = ENOTSUP;

	pthread_mutex_lock(&masq_cm_ids_lock);
	rtr = c->qp_attrs[IBV_QPS_RTR - IBV_QPS_INIT];
	/* The app's ACK timeout or TOS go in through rdma_init_qp_attr: the
	 * steps one by one. */
	if (c->ack_timeout_set || c->tos_set)
		rtr.attr_mask = 0;
	pthread_mutex_unlock(&masq_cm_ids_lock);
	pthread_mutex_lock(&c->qp_lock);
	s = c->id.qp ? masq_session_of(c->id.qp->context) : NULL;
	if (s && rtr.attr_mask) {
		err = masq_cm_move_qp(s, c->id.qp, c->handle, accept, &rtr);
		if (!err)
			c->id.qp->state = IBV_QPS_RTS;
	}
	pthread_mutex_unlock(&c->qp_lock);
	return err ? fail(err) : 0;
}

/* ------------------------------------------------------------ QPs */

static void destroy_cqs(struct rdma_cm_id *id)
{
	if (id->recv_cq) {
		masq_cm_vb.destroy_cq(id->recv_cq);
		if (id->send_cq && id->send_cq != id->recv_cq)
			masq_cm_vb.destroy_cq(id->send_cq);
	} else if (id->send_cq) {
		masq_cm_vb.destroy_cq(id->send_cq);
	}
	id->recv_cq = id->send_cq = NULL;
	if (id->recv_cq_channel) {
		masq_cm_vb.destroy_comp_channel(id->recv_cq_channel);
		if (id->send_cq_channel && id->send_cq_channel != id->recv_cq_channel)
			masq_cm_vb.destroy_comp_channel(id->send_cq_channel);
	} else if (id->send_cq_channel) {
		masq_cm_vb.destroy_comp_channel(id->send_cq_channel);
	}
	id->recv_cq_channel = id->send_cq_channel = NULL;
}

/* A CQ with its own completion channel: rdma_get_send_comp and
 * rdma_get_recv_comp (rdma_verbs.h) wait on that channel. */
static int create_cq(struct rdma_cm_id *id, uint32_t size, struct ibv_cq **cq,
		     struct ibv_comp_channel **ch)
{
	*ch = masq_cm_vb.create_comp_channel(id->verbs);
	if (!*ch)
		return -1;
	*cq = masq_cm_vb.create_cq(id->verbs, (int)size, id, *ch, 0);
	return *cq ? 0 : -1;
}

/* A UD id's QP goes on from INIT to RTS at once, as librdmacm's
 * ucma_init_ud_qp takes it: it needs no peer. 0, or -1 with errno. */
static int ud_qp_ready(struct ibv_qp *qp)
{
	struct ibv_qp_attr attr;
	int err;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	err = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
	if (!err) {
		attr.qp_state = IBV_QPS_RTS;
		attr.sq_psn = 0;
		err = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	return err ? fail(err) : 0;
}

int rdma_create_qp_ex(struct rdma_cm_id *id, struct ibv_qp_init_attr_ex *attr)
{
	struct ibv_qp_attr qp_attr;
	struct ibv_qp *qp;
	int mask, err;

	if (!id || !attr || id->qp || !id->verbs)
		return fail(EINVAL);
	if (masq_cm_have_verbs())
		return -1;
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd) {
		attr->comp_mask |= IBV_QP_INIT_ATTR_PD;
		attr->pd = id->pd ? id->pd : masq_cm_default_pd(id->verbs);
		if (!attr->pd)
			return -1;
	}
	if (attr->pd->context != id->verbs)
		return fail(EINVAL);
	if ((id->recv_cq && attr->recv_cq && id->recv_cq != attr->recv_cq) ||
	    (id->send_cq && attr->send_cq && id->send_cq != attr->send_cq))
		return fail(EINVAL);
	if (!attr->recv_cq && !id->recv_cq && attr->cap.max_recv_wr &&
	    create_cq(id, attr->cap.max_recv_wr, &id->recv_cq, &id->recv_cq_channel))
		goto err_cqs;
	if (!attr->send_cq && !id->send_cq && attr->cap.max_send_wr &&
	    create_cq(id, attr->cap.max_send_wr, &id->send_cq, &id->send_cq_channel))
		goto err_cqs;
	if (!attr->send_cq)
		attr->send_cq = id->send_cq;
	if (!attr->recv_cq)
		attr->recv_cq = id->recv_cq;
	if (id->srq && !attr->srq)
		attr->srq = id->srq;
	qp = masq_cm_create_qp_ex(id->verbs, attr);
	if (!qp)
		goto err_cqs;
	/* RESET -> INIT with masqd's attributes (librdmacm's ucma_init_conn_qp). */
	id->qp = qp;
	qp_attr.qp_state = IBV_QPS_INIT;
	if (rdma_init_qp_attr(id, &qp_attr, &mask))
		goto err_qp;
	err = ibv_modify_qp(qp, &qp_attr, mask);
	if (err) {
		errno = err;
		goto err_qp;
	}
	if (is_ud(cm_of(id)) && ud_qp_ready(qp))
		goto err_qp;
	id->pd = qp->pd;
	return 0;

err_qp:
	err = errno;
	id->qp = NULL;
	ibv_destroy_qp(qp);
	errno = err;
err_cqs:
	err = errno;
	destroy_cqs(id);
	return fail(err);
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr)
{
	struct ibv_qp_init_attr_ex attr;
	int ret;

	if (!id || !qp_init_attr)
		return fail(EINVAL);
	memset(&attr, 0, sizeof(attr));
	memcpy(&attr, qp_init_attr, sizeof(*qp_init_attr));
	attr.comp_mask = IBV_QP_INIT_ATTR_PD;
	attr.pd = pd ? pd : id->pd;
	ret = rdma_create_qp_ex(id, &attr);
	/* The caps the provider granted, and the CQs used, go back. */
	memcpy(qp_init_attr, &attr, sizeof(*qp_init_attr));
	return ret;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct cm_id *c;

	if (!id)
		return;
	c = cm_of(id);
	pthread_mutex_lock(&c->qp_lock);
	if (id->qp)
		ibv_destroy_qp(id->qp);
	id->qp = NULL;
	pthread_mutex_unlock(&c->qp_lock);
	if (!masq_cm_have_verbs())
		destroy_cqs(id);
}
