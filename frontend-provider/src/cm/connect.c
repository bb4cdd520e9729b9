/* Connecting CM ids: connect, accept, reject, disconnect, establish and
 * get_request, RC and UD (SIDR) alike. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

static uint8_t min_u8(uint8_t a, uint8_t b)
{
	return a < b ? a : b;
}

/* The wire's connection parameters: the depths chosen, the QP, at most
 * max_pdata bytes of private data. 0, or -1 with errno.
 *
 * masqd checks the private data's bound and the QP number again, as it
 * checks all that this library (in the app) sends. The checks here, and
 * rdma_connect's and rdma_accept's of the QP (librdmacm's own, as its
 * ucma_valid_param makes them), give the app librdmacm's EINVAL without a
 * round trip or a refused request counted against its endpoint; the bound
 * also keeps the copy within the request's buffer. */
static int conn_param_to_wire(struct masq_cm_conn_param *w, struct rdma_cm_id *id,
			      const struct rdma_conn_param *p, uint8_t resp_res,
			      uint8_t init_depth, size_t max_pdata)
{
	memset(w, 0, sizeof(*w));
	w->responder_resources = resp_res;
	w->initiator_depth = init_depth;
	if (p) {
		if (p->private_data_len > max_pdata ||
		    (p->private_data_len && !p->private_data))
			return fail(EINVAL);
		w->flow_control = p->flow_control ? 1 : 0;
		w->retry_count = min_u8(p->retry_count, 7);
		w->rnr_retry_count = min_u8(p->rnr_retry_count, 7);
		w->srq = p->srq ? 1 : 0;
		w->qp_num = p->qp_num & 0xffffff;
		w->private_data_len = p->private_data_len;
		if (p->private_data_len)
			memcpy(w->private_data, p->private_data, p->private_data_len);
	} else {
		w->retry_count = 7;
		w->rnr_retry_count = 7;
	}
	if (id->qp) {
		w->qp_num = id->qp->qp_num & 0xffffff;
		w->srq = id->qp->srq ? 1 : 0;
	}
	return 0;
}

/* A UD id's connect: masqd asks the listener for its QP (SIDR); the
 * answer comes as ESTABLISHED or UNREACHABLE. No QP is needed for it. */
static int connect_ud(struct cm_id *c, const struct rdma_conn_param *conn_param)
{
	struct masq_msg_cm_connect_req req;
	struct masq_msg_cm_connect_reply rep;

	masq_msg_cm_connect_req_init(&req);
	req.body.id = c->handle;
	if (conn_param_to_wire(&req.body.param, &c->id, conn_param, 0, 0,
			       MASQ_CM_SIDR_REQ_PRIVATE_DATA))
		return -1;
	if (CM_CALL(cm_connect, req, rep, NULL))
		return -1;
	pthread_mutex_lock(&masq_cm_ids_lock);
	c->restore = MASQ_CM_RESTORE_PENDING;
	c->active = 1;
	pthread_mutex_unlock(&masq_cm_ids_lock);
	return masq_cm_complete(c, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_ESTABLISHED);
}

/* A UD id's accept (librdmacm's rdma_accept for UD): the SIDR answer with
 * the QP; the app's rdma_create_qp already took it to RTS. Nothing more
 * comes for the id. */
static int accept_ud(struct cm_id *c, const struct rdma_conn_param *conn_param)
{
	struct masq_msg_cm_accept_req req;
	struct masq_msg_cm_accept_reply rep;

	masq_msg_cm_accept_req_init(&req);
	req.body.id = c->handle;
	if (conn_param_to_wire(&req.body.param, &c->id, conn_param, 0, 0,
			       MASQ_CM_SIDR_REP_PRIVATE_DATA))
		return -1;
	if (CM_CALL(cm_accept, req, rep, NULL))
		return -1;
	masq_cm_set_restore(c, MASQ_CM_RESTORE_BOUND);
	if (c->sync && c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	return 0;
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct masq_msg_cm_connect_req req;
	struct masq_msg_cm_connect_reply rep;
	uint8_t max_rd, max_init, resp_res, init_depth;
	struct cm_id *c;

	if (!id)
		return fail(EINVAL);
	c = cm_of(id);
	if (is_ud(c))
		return connect_ud(c, conn_param);
	if (!id->qp && !conn_param)
		return fail(EINVAL);
	masq_cm_device_limits(id->verbs, &max_rd, &max_init);
	resp_res = max_rd;
	init_depth = max_init;
	if (conn_param && conn_param->responder_resources != RDMA_MAX_RESP_RES) {
		if (conn_param->responder_resources > max_rd)
			return fail(EINVAL);
		resp_res = conn_param->responder_resources;
	}
	if (conn_param && conn_param->initiator_depth != RDMA_MAX_INIT_DEPTH) {
		if (conn_param->initiator_depth > max_init)
			return fail(EINVAL);
		init_depth = conn_param->initiator_depth;
	}
	masq_msg_cm_connect_req_init(&req);
	req.body.id = c->handle;
	if (conn_param_to_wire(&req.body.param, id, conn_param, resp_res, init_depth,
			       MASQ_CM_REQ_PRIVATE_DATA))
		return -1;
	c->connect_error = 0;
	if (CM_CALL(cm_connect, req, rep, NULL))
		return -1;
	pthread_mutex_lock(&masq_cm_ids_lock);
	c->restore = MASQ_CM_RESTORE_PENDING;
	c->active = 1;
	pthread_mutex_unlock(&masq_cm_ids_lock);
	return masq_cm_complete(c, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_CONNECT_RESPONSE);
}

int rdma_establish(struct rdma_cm_id *id)
{
	if (!id || id->qp)
		return fail(EINVAL);
	if (CM_ID_CALL(cm_establish, cm_of(id)->handle))
		return -1;
	masq_cm_set_restore(cm_of(id), MASQ_CM_RESTORE_CONNECTED);
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *conn_param)
{
	struct masq_msg_cm_accept_req req;
	struct masq_msg_cm_accept_reply rep;
	uint8_t max_rd, max_init, resp_res, init_depth;
	struct cm_id *c;
	int err;

	if (!id)
		return fail(EINVAL);
	c = cm_of(id);
	if (is_ud(c))
		return accept_ud(c, conn_param);
	if (!id->qp && !conn_param)
		return fail(EINVAL);
	masq_cm_device_limits(id->verbs, &max_rd, &max_init);
	/* The request's depths, within the device's, unless the app chose. */
	if (!conn_param || conn_param->initiator_depth == RDMA_MAX_INIT_DEPTH)
		init_depth = min_u8(c->initiator_depth, max_init);
	else
		init_depth = conn_param->initiator_depth;
	if (!conn_param || conn_param->responder_resources == RDMA_MAX_RESP_RES)
		resp_res = min_u8(c->responder_resources, max_rd);
	else
		resp_res = conn_param->responder_resources;
	masq_msg_cm_accept_req_init(&req);
	req.body.id = c->handle;
	if (conn_param_to_wire(&req.body.param, id, conn_param, resp_res, init_depth,
			       MASQ_CM_MAX_PRIVATE_DATA))
		return -1;
	err = masq_cm_id_move_qp(c, &req.body.param) ? errno : 0;
	if (err == ENOTSUP) {
		if (masq_cm_modify_qp(id, IBV_QPS_RTR, resp_res) ||
		    masq_cm_modify_qp(id, IBV_QPS_RTS, init_depth))
			return -1;
		err = CM_CALL(cm_accept, req, rep, NULL) ? errno : 0;
	}
	if (err) {
		(void)masq_cm_qp_to_error(id);
		return fail(err);
	}
	return masq_cm_complete(c, RDMA_CM_EVENT_ESTABLISHED, RDMA_CM_EVENT_ESTABLISHED);
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct masq_msg_cm_reject_req req;
	struct masq_msg_cm_reject_reply rep;

	if (!id || private_data_len > MASQ_CM_REJ_PRIVATE_DATA ||
	    (private_data_len && !private_data))
		return fail(EINVAL);
	masq_msg_cm_reject_req_init(&req);
	req.body.id = cm_of(id)->handle;
	req.body.private_data_len = private_data_len;
	if (private_data_len)
		memcpy(req.body.private_data, private_data, private_data_len);
	return CM_CALL(cm_reject, req, rep, NULL);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct cm_id *c;

	if (!id)
		return fail(EINVAL);
	c = cm_of(id);
	if (masq_cm_qp_to_error(id))
		return -1;
	if (CM_ID_CALL(cm_disconnect, c->handle))
		return -1;
	return masq_cm_complete(c, RDMA_CM_EVENT_DISCONNECTED, RDMA_CM_EVENT_DISCONNECTED);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct rdma_cm_event *event;
	struct cm_id *l;
	int err;

	if (!listen || !id)
		return fail(EINVAL);
	l = cm_of(listen);
	if (!l->sync)
		return fail(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	if (rdma_get_cm_event(listen->channel, &event))
		return -1;
	if (event->event == RDMA_CM_EVENT_REJECTED)
		err = ECONNREFUSED;
	else if (event->status)
		err = event->status < 0 ? -event->status : event->status;
	else if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		err = EINVAL;
	else
		err = 0;
	if (!err && l->qp_init_attr) {
		struct ibv_qp_init_attr attr = *l->qp_init_attr;

		if (rdma_create_qp(event->id, listen->pd, &attr))
			err = errno;
	}
	if (err) {
		listen->event = event;
		return fail(err);
	}
	*id = event->id;
	(*id)->event = event;
	return 0;
}
