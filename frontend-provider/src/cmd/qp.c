/*
 * QP commands: ibv_qp_attr on the wire, modify/query/destroy through
 * masqd or posted (QP_MOVED), the CM's accept/establish, and the QPs a
 * session remembers to name them again after a restart.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ah.h"
#include "masq_proto.h"
#include "qp.h"

static struct masq_qp_info *find_qp(struct masq_session *s, uint32_t handle)
{
	size_t i;

	for (i = 0; i < s->nqps; i++)
		if (s->qps[i].handle == handle)
			return &s->qps[i];
	return NULL;
}

/* Call under s->lock. NULL only when out of memory. */
static struct masq_qp_info *remember_qp(struct masq_session *s, uint32_t handle)
{
	struct masq_qp_info *q = find_qp(s, handle), *more;
	size_t cap;

	if (q)
		return q;
	if (s->nqps == s->cap_qps) {
		cap = s->cap_qps ? 2 * s->cap_qps : 8;
		more = realloc(s->qps, cap * sizeof(*more));
		if (!more)
			return NULL;
		s->qps = more;
		s->cap_qps = cap;
	}
	q = &s->qps[s->nqps++];
	memset(q, 0, sizeof(*q));
	q->handle = handle;
	return q;
}

static void forget_qp(struct masq_session *s, uint32_t handle)
{
	struct masq_qp_info *q = find_qp(s, handle);

	if (q)
		*q = s->qps[--s->nqps];
}

/* Copy the fields an attribute mask names; the protocol wants the rest 0. */
void masq_qp_attr_to_wire(struct masq_qp_attr *w, const struct ibv_qp_attr *a, int mask)
{
	memset(w, 0, sizeof(*w));
	if (mask & IBV_QP_STATE)
		w->qp_state = (uint8_t)a->qp_state;
	if (mask & IBV_QP_CUR_STATE)
		w->cur_qp_state = (uint8_t)a->cur_qp_state;
	if (mask & IBV_QP_PATH_MTU)
		w->path_mtu = (uint8_t)a->path_mtu;
	if (mask & IBV_QP_PATH_MIG_STATE)
		w->path_mig_state = (uint8_t)a->path_mig_state;
	if (mask & IBV_QP_QKEY)
		w->qkey = a->qkey;
	if (mask & IBV_QP_RQ_PSN)
		w->rq_psn = a->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		w->sq_psn = a->sq_psn;
	if (mask & IBV_QP_DEST_QPN)
		w->dest_qp_num = a->dest_qp_num;
	if (mask & IBV_QP_ACCESS_FLAGS)
		w->qp_access_flags = (uint32_t)a->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		w->pkey_index = a->pkey_index;
	if (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY)
		w->en_sqd_async_notify = a->en_sqd_async_notify ? 1 : 0;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		w->max_rd_atomic = a->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		w->max_dest_rd_atomic = a->max_dest_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		w->min_rnr_timer = a->min_rnr_timer;
	if (mask & IBV_QP_PORT)
		w->port_num = a->port_num;
	if (mask & IBV_QP_TIMEOUT)
		w->timeout = a->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		w->retry_cnt = a->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		w->rnr_retry = a->rnr_retry;
	if (mask & IBV_QP_RATE_LIMIT)
		w->rate_limit = a->rate_limit;
	if (mask & IBV_QP_CAP) {
		w->cap.max_send_wr = a->cap.max_send_wr;
		w->cap.max_recv_wr = a->cap.max_recv_wr;
		w->cap.max_send_sge = a->cap.max_send_sge;
		w->cap.max_recv_sge = a->cap.max_recv_sge;
		w->cap.max_inline_data = a->cap.max_inline_data;
	}
	if (mask & IBV_QP_AV)
		masq_ah_attr_to_wire(&w->ah_attr, &a->ah_attr);
}

void masq_qp_attr_from_wire(struct ibv_qp_attr *attr, const struct masq_qp_attr *w)
{
	attr->qp_state = (enum ibv_qp_state)w->qp_state;
	attr->cur_qp_state = (enum ibv_qp_state)w->cur_qp_state;
	attr->path_mtu = (enum ibv_mtu)w->path_mtu;
	attr->path_mig_state = (enum ibv_mig_state)w->path_mig_state;
	attr->qkey = w->qkey;
	attr->rq_psn = w->rq_psn;
	attr->sq_psn = w->sq_psn;
	attr->dest_qp_num = w->dest_qp_num;
	attr->qp_access_flags = (unsigned int)w->qp_access_flags;
	attr->pkey_index = w->pkey_index;
	attr->sq_draining = w->sq_draining;
	attr->max_rd_atomic = w->max_rd_atomic;
	attr->max_dest_rd_atomic = w->max_dest_rd_atomic;
	attr->min_rnr_timer = w->min_rnr_timer;
	attr->port_num = w->port_num;
	attr->timeout = w->timeout;
	attr->retry_cnt = w->retry_cnt;
	attr->rnr_retry = w->rnr_retry;
	masq_ah_attr_from_wire(&attr->ah_attr, &w->ah_attr);
}

/* Call under s->lock: the QP's state as the kernel has it now in *state.
 * 0 or an errno. */
static int current_state(struct masq_session *s, uint32_t handle, int *state)
{
	struct masq_msg_query_qp_req req;
	struct masq_msg_query_qp_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	masq_msg_query_qp_req_init(&req);
	req.body.qp_handle = handle;
	req.body.attr_mask = IBV_QP_STATE;
	n = masq_session_call(s, &req, sizeof(req), -1, buf, 1);
	if (n < 0)
		return (int)-n;
	err = masq_msg_query_qp_reply_decode(buf, (size_t)n, &rep);
	if (err)
		return -err;
	*state = rep.body.qp_state;
	return 0;
}

int masq_modify_qp(struct masq_session *s, struct ibv_qp *qp, const struct ibv_qp_attr *attr,
		   int attr_mask)
{
	struct masq_msg_modify_qp_req req;
	struct masq_msg_modify_qp_reply rep;
	struct masq_qp_info *q;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int state = -1, err;

	masq_msg_modify_qp_req_init(&req);
	req.body.qp_handle = qp->handle;
	req.body.qp_num = qp->qp_num;
	req.body.qp_type = (uint32_t)qp->qp_type;
	req.body.attr_mask = (uint32_t)attr_mask;
	masq_qp_attr_to_wire(&req.body.attr, attr, attr_mask);
	/* Values outside the protocol's ranges are the app's error. */
	if (masq_modify_qp_req_validate(&req.body)) {
		const struct masq_qp_attr *w = &req.body.attr;

		masq_log("ibv_modify_qp(QP %#x, mask %#x): an attribute is outside its range "
			 "(state %u mtu %u timeout %u retry %u rnr_retry %u min_rnr %u sl %u "
			 "flow_label %#x is_global %u)",
			 qp->qp_num, (unsigned int)attr_mask, w->qp_state, w->path_mtu, w->timeout,
			 w->retry_cnt, w->rnr_retry, w->min_rnr_timer, w->ah_attr.sl,
			 w->ah_attr.flow_label, w->ah_attr.is_global);
		return EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	/* Remembered before it is sent: if masqd dies while running it, the
	 * next masqd is told about the QP whatever the kernel ended with. */
	q = remember_qp(s, qp->handle);
	if (q) {
		q->qpn = qp->qp_num;
		q->qp_type = (uint32_t)qp->qp_type;
		if (attr_mask & IBV_QP_AV) {
			q->has_route = 1;
			q->sgid_index = req.body.attr.ah_attr.sgid_index;
			memcpy(q->dgid, req.body.attr.ah_attr.dgid, sizeof(q->dgid));
		}
	}
	n = masq_session_call(s, &req, sizeof(req), -1, buf, 0);
	if (n == -ECONNRESET) {
		/* masqd went away after the request left. The QP is in the
		 * kernel's state either way: ask the next masqd, and send the
		 * request again only if it did not take effect. */
		err = current_state(s, qp->handle, &state);
		if (!err && (attr_mask & IBV_QP_STATE) && state == (int)attr->qp_state) {
			pthread_mutex_unlock(&s->lock);
			return 0;
		}
		n = err ? -err : masq_session_call(s, &req, sizeof(req), -1, buf, 0);
	}
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		return (int)-n;
	return -masq_msg_modify_qp_reply_decode(buf, (size_t)n, &rep);
}

int masq_cm_move_qp(struct masq_session *s, struct ibv_qp *qp, uint32_t id,
		    const struct masq_cm_conn_param *accept, const struct masq_cm_qp_attr *rtr)
{
	union {
		struct masq_msg_cm_accept_qp_req accept;
		struct masq_msg_cm_establish_qp_req establish;
	} req;
	union {
		struct masq_msg_cm_accept_qp_reply accept;
		struct masq_msg_cm_establish_qp_reply establish;
	} rep;
	struct masq_qp_info *q;
	uint8_t buf[MASQ_MAX_MESSAGE];
	size_t len;
	ssize_t n;

	if (accept) {
		masq_msg_cm_accept_qp_req_init(&req.accept);
		req.accept.body.id = id;
		req.accept.body.qp_handle = qp->handle;
		req.accept.body.param = *accept;
		len = sizeof(req.accept);
	} else {
		masq_msg_cm_establish_qp_req_init(&req.establish);
		req.establish.body.id = id;
		req.establish.body.qp_handle = qp->handle;
		req.establish.body.qp_num = qp->qp_num;
		len = sizeof(req.establish);
	}
	pthread_mutex_lock(&s->lock);
	/* Remembered before it is sent, as masq_modify_qp does. */
	q = remember_qp(s, qp->handle);
	if (q) {
		q->qpn = qp->qp_num;
		q->qp_type = (uint32_t)qp->qp_type;
		if (rtr->attr_mask & IBV_QP_AV) {
			q->has_route = 1;
			q->sgid_index = rtr->attr.ah_attr.sgid_index;
			memcpy(q->dgid, rtr->attr.ah_attr.dgid, sizeof(q->dgid));
		}
	}
	n = masq_session_call(s, &req, len, -1, buf, 0);
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		return (int)-n;
	if (accept)
		return -masq_msg_cm_accept_qp_reply_decode(buf, (size_t)n, &rep.accept);
	return -masq_msg_cm_establish_qp_reply_decode(buf, (size_t)n, &rep.establish);
}

int masq_query_qp(struct masq_session *s, struct ibv_qp *qp, struct ibv_qp_attr *attr,
		  int attr_mask)
{
	struct masq_msg_query_qp_req req;
	struct masq_msg_query_qp_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	masq_msg_query_qp_req_init(&req);
	req.body.qp_handle = qp->handle;
	req.body.attr_mask = (uint32_t)attr_mask;
	pthread_mutex_lock(&s->lock);
	n = masq_session_call(s, &req, sizeof(req), -1, buf, 1);
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		return (int)-n;
	err = masq_msg_query_qp_reply_decode(buf, (size_t)n, &rep);
	if (err)
		return -err;
	masq_qp_attr_from_wire(attr, &rep.body);
	memset(&attr->alt_ah_attr, 0, sizeof(attr->alt_ah_attr));
	return 0;
}

int masq_modify_is_local(const struct masq_session *s, const struct ibv_qp_attr *attr,
			 int attr_mask)
{
	/* What masqd translates, admits or refuses: addresses (AV, the
	 * alternate path and its migration, the destination QPN), another
	 * port, privileged Q_Keys, masks it does not know, and RTR. */
	const int masqd_bits = IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
			       IBV_QP_DEST_QPN;
	const int known = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
			  IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
			  IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC;

	if (!s->posted || (attr_mask & masqd_bits) || (attr_mask & ~known))
		return 0;
	if ((attr_mask & IBV_QP_PORT) && attr->port_num != s->port)
		return 0;
	if ((attr_mask & IBV_QP_QKEY) && (attr->qkey & 0x80000000u))
		return 0;
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RTR)
		return 0;
	return 1;
}

void masq_qp_moved(struct masq_session *s, struct ibv_qp *qp, const struct ibv_qp_attr *attr,
		   int attr_mask)
{
	struct masq_msg_qp_moved_req req;
	struct masq_qp_info *q;

	pthread_mutex_lock(&s->lock);
	/* Named again after a restart, like a QP masqd moved. */
	q = remember_qp(s, qp->handle);
	if (q) {
		q->qpn = qp->qp_num;
		q->qp_type = (uint32_t)qp->qp_type;
	}
	if (attr_mask & IBV_QP_STATE) {
		masq_msg_qp_moved_req_init(&req);
		req.body.qp_handle = qp->handle;
		req.body.qp_num = qp->qp_num;
		req.body.qp_type = (uint32_t)qp->qp_type;
		req.body.attr_mask = (uint32_t)attr_mask;
		req.body.qp_state = (uint8_t)attr->qp_state;
		if (!masq_qp_moved_req_validate(&req.body))
			masq_session_post(s, &req, sizeof(req));
	}
	pthread_mutex_unlock(&s->lock);
}

void masq_destroy_qp(struct masq_session *s, uint32_t qp_handle, uint32_t qp_num)
{
	struct masq_msg_destroy_qp_req req;
	struct masq_msg_qp_destroyed_req posted;
	uint8_t buf[MASQ_MAX_MESSAGE];

	pthread_mutex_lock(&s->lock);
	forget_qp(s, qp_handle);
	/* The QP is already gone: nothing to wait for. While masqd is away
	 * there is nothing to tell: the next one never hears of the QP, as it
	 * is no longer remembered. */
	if (s->posted) {
		masq_msg_qp_destroyed_req_init(&posted);
		posted.body.qp_handle = qp_handle;
		posted.body.qp_num = qp_num;
		masq_session_post(s, &posted, sizeof(posted));
	} else if (s->fd >= 0 && !s->broken) {
		masq_msg_destroy_qp_req_init(&req);
		req.body.qp_handle = qp_handle;
		req.body.qp_num = qp_num;
		(void)masq_session_call(s, &req, sizeof(req), -1, buf, 1);
	}
	pthread_mutex_unlock(&s->lock);
}
