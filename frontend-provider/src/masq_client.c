/*
 * Talking to masqd: SOCK_SEQPACKET, one message per datagram, the uverbs fd
 * as SCM_RIGHTS with OPEN_DEVICE. Layouts and validation come from
 * include/masq_proto.h, generated from the protocol's single definition.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "masq_client.h"
#include "masq_proto.h"

const char *masq_socket_path(void)
{
	const char *p = getenv("MASQ_SOCKET");

	return p && *p ? p : MASQ_DEFAULT_SOCKET;
}

static int connect_masqd(void)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	const char *path = masq_socket_path();
	int fd;

	if (strlen(path) >= sizeof(addr.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(addr.sun_path, path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static int send_msg(int sock, const void *buf, size_t len, int pass_fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;
	ssize_t n;

	if (pass_fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno;
	return (size_t)n == len ? 0 : EPROTO;
}

/*
 * Send a request and wait for the datagram answering it, skipping any
 * asynchronous notices that arrive first. Returns the reply's length in
 * buf (to be checked by the typed masq_msg_*_decode), or -errno.
 */
static ssize_t roundtrip(int sock, uint32_t *next_id, void *req, size_t req_len, int pass_fd,
			 uint8_t buf[MASQ_MAX_MESSAGE])
{
	struct masq_hdr hdr;
	uint32_t id = ++*next_id;
	ssize_t n;
	int err;

	masq_hdr_set_request_id(req, id);
	err = send_msg(sock, req, req_len, pass_fd);
	if (err)
		return -err;
	for (;;) {
		do
			n = recv(sock, buf, MASQ_MAX_MESSAGE, 0);
		while (n < 0 && errno == EINTR);
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		err = masq_hdr_decode(buf, (size_t)n, &hdr);
		if (err)
			return err;
		if (masq_opcode_is_notice(hdr.opcode))
			continue; /* no notice needs the frontend's action yet */
		if (hdr.request_id != id)
			return -EPROTO;
		return n;
	}
}

/* Call under s->lock; returns the reply length or -errno. */
static ssize_t session_call(struct masq_session *s, void *req, size_t len, int pass_fd,
			    uint8_t buf[MASQ_MAX_MESSAGE])
{
	if (s->fd < 0)
		return -ENOTCONN;
	return roundtrip(s->fd, &s->next_request, req, len, pass_fd, buf);
}

static int hello(int sock, uint32_t *next_id, struct masq_msg_hello_reply *rep)
{
	extern char *program_invocation_short_name;
	struct masq_msg_hello_req req;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	masq_msg_hello_req_init(&req);
	req.body.features = 0;
	masq_copy_name(req.body.app_name, sizeof(req.body.app_name),
		       program_invocation_short_name);
	n = roundtrip(sock, next_id, &req, sizeof(req), -1, buf);
	if (n < 0)
		return (int)-n;
	err = masq_msg_hello_reply_decode(buf, (size_t)n, rep);
	return -err;
}

static void fill_device(struct masq_device *out, const struct masq_hello_reply *r)
{
	memset(out, 0, sizeof(*out));
	masq_copy_name(out->vdev_name, sizeof(out->vdev_name), r->vdev_name);
	masq_copy_name(out->phys_dev_name, sizeof(out->phys_dev_name), r->phys_dev_name);
	out->node_guid = r->node_guid;
	out->sys_image_guid = r->sys_image_guid;
	out->phys_port = r->phys_port;
	out->gid_count = r->gid_count;
}

int masq_describe_device(struct masq_device *out)
{
	struct masq_msg_hello_reply rep;
	uint32_t id = 0;
	int sock, err;

	sock = connect_masqd();
	if (sock < 0)
		return -1;
	err = hello(sock, &id, &rep);
	close(sock);
	if (err) {
		errno = err;
		return -1;
	}
	fill_device(out, &rep.body);
	return 0;
}

int masq_session_open(struct masq_session *s, int cmd_fd)
{
	struct masq_msg_open_device_req req;
	struct masq_msg_open_device_reply rep;
	struct masq_msg_hello_reply hrep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->lock, NULL);
	s->fd = connect_masqd();
	if (s->fd < 0)
		return errno;
	err = hello(s->fd, &s->next_request, &hrep);
	if (!err) {
		s->session_id = hrep.body.session_id;
		s->port = hrep.body.phys_port;
		masq_msg_open_device_req_init(&req);
		n = roundtrip(s->fd, &s->next_request, &req, sizeof(req), cmd_fd, buf);
		err = n < 0 ? (int)-n : -masq_msg_open_device_reply_decode(buf, (size_t)n, &rep);
	}
	if (err) {
		close(s->fd);
		s->fd = -1;
	}
	return err;
}

void masq_session_close(struct masq_session *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	pthread_mutex_destroy(&s->lock);
}

int masq_query_gid_table(struct masq_session *s, struct masq_gid *gids, unsigned int *n_out)
{
	struct masq_msg_query_gid_table_req req;
	struct masq_msg_query_gid_table_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	unsigned int i;
	ssize_t n;
	int err;

	masq_msg_query_gid_table_req_init(&req);
	req.body.port = s->port;
	pthread_mutex_lock(&s->lock);
	n = session_call(s, &req, sizeof(req), -1, buf);
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		return (int)-n;
	err = masq_msg_query_gid_table_reply_decode(buf, (size_t)n, &rep);
	if (err)
		return -err;
	for (i = 0; i < rep.body.count && i < MASQ_MAX_GIDS; i++) {
		gids[i].index = rep.body.entries[i].index;
		gids[i].type = rep.body.entries[i].gid_type;
		memcpy(gids[i].gid, rep.body.entries[i].gid, sizeof(gids[i].gid));
	}
	*n_out = i;
	return 0;
}

/* Copy the fields an attribute mask names; the protocol wants the rest 0. */
static void attr_to_wire(struct masq_qp_attr *w, const struct ibv_qp_attr *a, int mask)
{
	const struct ibv_ah_attr *ah = &a->ah_attr;

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
	if (mask & IBV_QP_AV) {
		memcpy(w->ah_attr.dgid, ah->grh.dgid.raw, sizeof(w->ah_attr.dgid));
		w->ah_attr.flow_label = ah->grh.flow_label;
		w->ah_attr.sgid_index = ah->grh.sgid_index;
		w->ah_attr.hop_limit = ah->grh.hop_limit;
		w->ah_attr.traffic_class = ah->grh.traffic_class;
		w->ah_attr.is_global = ah->is_global ? 1 : 0;
		w->ah_attr.dlid = ah->dlid;
		w->ah_attr.sl = ah->sl;
		w->ah_attr.src_path_bits = ah->src_path_bits;
		w->ah_attr.static_rate = ah->static_rate;
		w->ah_attr.port_num = ah->port_num;
	}
}

int masq_modify_qp(struct masq_session *s, struct ibv_qp *qp, const struct ibv_qp_attr *attr,
		   int attr_mask)
{
	struct masq_msg_modify_qp_req req;
	struct masq_msg_modify_qp_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;

	masq_msg_modify_qp_req_init(&req);
	req.body.qp_handle = qp->handle;
	req.body.qp_num = qp->qp_num;
	req.body.qp_type = (uint32_t)qp->qp_type;
	req.body.attr_mask = (uint32_t)attr_mask;
	attr_to_wire(&req.body.attr, attr, attr_mask);
	/* Values outside the protocol's ranges are the app's error. */
	if (masq_modify_qp_req_validate(&req.body))
		return EINVAL;
	pthread_mutex_lock(&s->lock);
	n = session_call(s, &req, sizeof(req), -1, buf);
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		return (int)-n;
	return -masq_msg_modify_qp_reply_decode(buf, (size_t)n, &rep);
}

int masq_query_qp(struct masq_session *s, struct ibv_qp *qp, struct ibv_qp_attr *attr,
		  int attr_mask)
{
	struct masq_msg_query_qp_req req;
	struct masq_msg_query_qp_reply rep;
	const struct masq_qp_attr *w = &rep.body;
	struct ibv_ah_attr *ah = &attr->ah_attr;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	masq_msg_query_qp_req_init(&req);
	req.body.qp_handle = qp->handle;
	req.body.attr_mask = (uint32_t)attr_mask;
	pthread_mutex_lock(&s->lock);
	n = session_call(s, &req, sizeof(req), -1, buf);
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		return (int)-n;
	err = masq_msg_query_qp_reply_decode(buf, (size_t)n, &rep);
	if (err)
		return -err;
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
	memset(ah, 0, sizeof(*ah));
	memcpy(ah->grh.dgid.raw, w->ah_attr.dgid, sizeof(ah->grh.dgid.raw));
	ah->grh.flow_label = w->ah_attr.flow_label;
	ah->grh.sgid_index = w->ah_attr.sgid_index;
	ah->grh.hop_limit = w->ah_attr.hop_limit;
	ah->grh.traffic_class = w->ah_attr.traffic_class;
	ah->is_global = w->ah_attr.is_global;
	ah->dlid = w->ah_attr.dlid;
	ah->sl = w->ah_attr.sl;
	ah->src_path_bits = w->ah_attr.src_path_bits;
	ah->static_rate = w->ah_attr.static_rate;
	ah->port_num = w->ah_attr.port_num;
	memset(&attr->alt_ah_attr, 0, sizeof(attr->alt_ah_attr));
	return 0;
}

void masq_destroy_qp(struct masq_session *s, uint32_t qp_handle, uint32_t qp_num)
{
	struct masq_msg_destroy_qp_req req;
	uint8_t buf[MASQ_MAX_MESSAGE];

	masq_msg_destroy_qp_req_init(&req);
	req.body.qp_handle = qp_handle;
	req.body.qp_num = qp_num;
	pthread_mutex_lock(&s->lock);
	/* The QP is already gone; the reply only keeps requests in step. */
	(void)session_call(s, &req, sizeof(req), -1, buf);
	pthread_mutex_unlock(&s->lock);
}
