/*
 * libmasq's RDMA CM (src/cm/) against a fake masqd thread: the
 * requests it sends, the events it makes of the notices (addresses, route,
 * private data, new ids for connection requests, sync ids waiting for
 * their event), errno on refusals; then rdma_getaddrinfo and the address
 * and QP attribute conversions. No RDMA device: the CM's devices are dummy
 * contexts (device 0 holds 10.0.0.5, device 1, a second rail, 10.1.0.5),
 * and no QP is created.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "cm/cm.h"
#include "cmd/qp.h"
#include "masq_proto.h"
#include "transport/transport.h"
#include "check.h"
#include "fake_masqd.h"

static void run(const char *name, void (*fn)(void))
{
	run_with(name, NULL, fn);
}

/* ------------------------------------------------------------ fake masqd */

#define MAX_CHANNELS 16
#define MAX_IDS 64

static struct {
	int chan_fd[MAX_CHANNELS + 1]; /* masqd's end of each channel socket */
	uint32_t id_chan[MAX_IDS];     /* id -> its channel */
	int id_ud[MAX_IDS];	       /* id -> RDMA_PS_UDP */
	uint32_t next_id;
	struct masq_cm_addrs addrs[MAX_IDS];
	int ops[64];		       /* requests seen, by opcode */
	uint32_t last_id[64];	       /* the id of the last request of each opcode */
	uint32_t migrated_to;
	uint32_t last_channel;
	struct masq_cm_conn_param connect_param, accept_param;
	struct masq_cm_reject_req reject;
	int junk_first; /* before the next event: garbage and an unknown id's event */
	struct masq_cm_addr request_to; /* where the next listen's request is to, if set */
	dev_t device0;	  /* what device 0's descriptor is (/dev/null) */
	int unopened;	  /* CM requests refused: before OPEN_DEVICE, as masqd does */
	int wrong_device; /* OPEN_DEVICEs without device 0's descriptor */
	int hang_up;	  /* the next request: hang up, as a masqd that went away */
} srv;

static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_context fake_ctx, fake_ctx1;
static struct ibv_pd fake_pd = { .context = &fake_ctx }, fake_pd1 = { .context = &fake_ctx1 };

static struct masq_cm_addr wire_addr(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port)
{
	struct masq_cm_addr w = { .addr = { a, b, c, d }, .port = port };

	return w;
}

static void send_fd(int sock, const void *msg, size_t len, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *c;

	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(c), &fd, sizeof(int));
	}
	(void)!sendmsg(sock, &mh, MSG_NOSIGNAL);
}

static void push(uint32_t id, uint32_t listen_id, uint32_t event, int32_t status,
		 const struct masq_cm_conn_param *param)
{
	struct masq_msg_cm_event_notice m;
	int fd = srv.chan_fd[srv.id_chan[listen_id ? listen_id : id]];

	if (srv.junk_first) {
		static const char junk[] = "not a masq message";

		srv.junk_first = 0;
		(void)!send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
		masq_msg_cm_event_notice_init(&m);
		m.body.id = 999;
		m.body.event = RDMA_CM_EVENT_ESTABLISHED;
		(void)!send(fd, &m, sizeof(m), MSG_NOSIGNAL);
	}
	masq_msg_cm_event_notice_init(&m);
	m.body.id = id;
	m.body.listen_id = listen_id;
	m.body.event = event;
	m.body.status = status;
	m.body.addrs = srv.addrs[id];
	if (param)
		m.body.param = *param;
	if (event == RDMA_CM_EVENT_CONNECT_REQUEST) {
		/* As masqd: the new id's QP attributes ride with the request
		 * (PSNs unlike CM_INIT_QP_ATTR's reply, to tell them apart). */
		m.body.init_attr.attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
					     IBV_QP_ACCESS_FLAGS;
		m.body.init_attr.attr.qp_state = IBV_QPS_INIT;
		m.body.init_attr.attr.port_num = 1;
		m.body.rtr_attr.attr_mask = IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		m.body.rtr_attr.attr.qp_state = IBV_QPS_RTR;
		m.body.rtr_attr.attr.dest_qp_num = param ? param->qp_num : 0;
		m.body.rtr_attr.attr.rq_psn = 0x5678;
		m.body.rts_attr.attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
		m.body.rts_attr.attr.qp_state = IBV_QPS_RTS;
		m.body.rts_attr.attr.sq_psn = 0x9abc;
	}
	(void)!send(fd, &m, sizeof(m), MSG_NOSIGNAL);
}

/* As masqd answers a UD id's connect: the listener's QP 0x33, the UDP
 * port space's Q_Key and the virtual address vector, in rtr_attr. */
static void push_ud_answer(uint32_t id)
{
	struct masq_msg_cm_event_notice m;
	struct masq_qp_attr *a = &m.body.rtr_attr.attr;

	masq_msg_cm_event_notice_init(&m);
	m.body.id = id;
	m.body.event = RDMA_CM_EVENT_ESTABLISHED;
	m.body.addrs = srv.addrs[id];
	m.body.param.qp_num = 0x33;
	m.body.param.private_data_len = 3;
	memcpy(m.body.param.private_data, "ud!", 3);
	m.body.rtr_attr.attr_mask = IBV_QP_AV | IBV_QP_QKEY | IBV_QP_DEST_QPN;
	a->qkey = MASQ_CM_UDP_QKEY;
	a->dest_qp_num = 0x33;
	a->ah_attr.dgid[10] = a->ah_attr.dgid[11] = 0xff;
	a->ah_attr.dgid[12] = 10;
	a->ah_attr.dgid[15] = 6;
	a->ah_attr.sgid_index = 1;
	a->ah_attr.hop_limit = 64;
	a->ah_attr.is_global = 1;
	a->ah_attr.port_num = 1;
	(void)!send(srv.chan_fd[srv.id_chan[id]], &m, sizeof(m), MSG_NOSIGNAL);
}

static struct masq_cm_conn_param conn_param(uint32_t qpn, const char *pdata)
{
	struct masq_cm_conn_param p = { .responder_resources = 1,
					.initiator_depth = 1,
					.retry_count = 7,
					.rnr_retry_count = 7,
					.qp_num = qpn };

	p.private_data_len = (uint32_t)strlen(pdata);
	memcpy(p.private_data, pdata, p.private_data_len);
	return p;
}

/* Reply with just a header: status 0 or -errno. */
static void reply_hdr(int c, uint16_t op, uint32_t req_id, int32_t status)
{
	struct masq_hdr h;

	masq_hdr_init(&h, op | MASQ_REPLY, sizeof(h));
	h.request_id = req_id;
	h.status = status;
	send_fd(c, &h, sizeof(h), -1);
}

#define REPLY(c, kind, req_id, fill)                       \
	do {                                               \
		struct masq_msg_##kind##_reply r_;         \
		masq_msg_##kind##_reply_init(&r_);         \
		r_.hdr.request_id = (req_id);              \
		fill;                                      \
		send_fd((c), &r_, sizeof(r_), -1);         \
	} while (0)

/* The body of the request in buf as a T (its framing checked by the caller). */
#define BODY(T) (*(const T *)(buf + sizeof(struct masq_hdr)))

/* Whether fd is device 0's descriptor (-1: none came). */
static int is_device0(int fd)
{
	struct stat st;

	return fd >= 0 && fstat(fd, &st) == 0 && S_ISCHR(st.st_mode) && st.st_rdev == srv.device0;
}

/* Serve one request of a connection; fd is the descriptor it carried (-1:
 * none), *opened whether the connection opened its device. */
static void serve(int c, const uint8_t *buf, size_t n, int fd, int *opened)
{
	struct masq_hdr h;
	uint32_t id = 0;

	if (masq_hdr_decode(buf, n, &h)) {
		fprintf(stderr, "fake masqd: bad request\n");
		return;
	}
	pthread_mutex_lock(&srv_lock);
	if (h.opcode < 64)
		srv.ops[h.opcode]++;
	if (h.opcode >= MASQ_OP_CM_CREATE_CHANNEL && !*opened) {
		srv.unopened++;
		reply_hdr(c, h.opcode, h.request_id, -EPROTO);
		pthread_mutex_unlock(&srv_lock);
		return;
	}
	if (n >= sizeof(h) + 4 && h.opcode != MASQ_OP_HELLO && h.opcode != MASQ_OP_CM_CREATE_CHANNEL &&
	    h.opcode != MASQ_OP_CM_DESTROY_CHANNEL && h.opcode != MASQ_OP_CM_CREATE_ID) {
		memcpy(&id, buf + sizeof(h), 4);
		if (id >= MAX_IDS)
			id = 0;
		srv.last_id[h.opcode] = id;
	}
	switch (h.opcode) {
	case MASQ_OP_HELLO:
		REPLY(c, hello, h.request_id, (r_.body.session_id = 1));
		break;
	case MASQ_OP_OPEN_DEVICE:
		if (!is_device0(fd)) {
			srv.wrong_device++;
			reply_hdr(c, h.opcode, h.request_id, -ENODEV);
			break;
		}
		*opened = 1;
		reply_hdr(c, h.opcode, h.request_id, 0);
		break;
	case MASQ_OP_CM_CREATE_CHANNEL: {
		struct masq_msg_cm_create_channel_reply r;
		int sv[2], ch;

		for (ch = 1; ch <= MAX_CHANNELS && srv.chan_fd[ch] >= 0; ch++)
			;
		if (ch > MAX_CHANNELS ||
		    socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
			reply_hdr(c, h.opcode, h.request_id, -EMFILE);
			break;
		}
		srv.chan_fd[ch] = sv[0];
		srv.last_channel = (uint32_t)ch;
		masq_msg_cm_create_channel_reply_init(&r);
		r.hdr.request_id = h.request_id;
		r.body.channel = (uint32_t)ch;
		send_fd(c, &r, sizeof(r), sv[1]);
		close(sv[1]);
		break;
	}
	case MASQ_OP_CM_DESTROY_CHANNEL: {
		uint32_t ch = BODY(struct masq_cm_channel).channel;

		if (ch >= 1 && ch <= MAX_CHANNELS && srv.chan_fd[ch] >= 0) {
			close(srv.chan_fd[ch]);
			srv.chan_fd[ch] = -1;
		}
		reply_hdr(c, h.opcode, h.request_id, 0);
		break;
	}
	case MASQ_OP_CM_CREATE_ID: {
		struct masq_msg_cm_create_id_req q;

		if (masq_msg_cm_create_id_req_decode(buf, n, &q) || srv.next_id >= MAX_IDS) {
			reply_hdr(c, h.opcode, h.request_id, -EINVAL);
			break;
		}
		id = srv.next_id++;
		srv.id_chan[id] = q.body.channel;
		srv.id_ud[id] = q.body.port_space == MASQ_CM_PS_UDP;
		memset(&srv.addrs[id], 0, sizeof(srv.addrs[id]));
		REPLY(c, cm_create_id, h.request_id, (r_.body.id = id));
		break;
	}
	case MASQ_OP_CM_MIGRATE_ID:
		srv.id_chan[id] = BODY(struct masq_cm_migrate_req).channel;
		srv.migrated_to = srv.id_chan[id];
		reply_hdr(c, h.opcode, h.request_id, 0);
		break;
	case MASQ_OP_CM_BIND_ADDR:
		srv.addrs[id].src = BODY(struct masq_cm_bind_req).addr;
		if (!srv.addrs[id].src.port)
			srv.addrs[id].src.port = 40000;
		REPLY(c, cm_bind_addr, h.request_id, (r_.body = srv.addrs[id]));
		break;
	case MASQ_OP_CM_RESOLVE_ADDR: {
		const struct masq_cm_resolve_addr_req *q = &BODY(struct masq_cm_resolve_addr_req);
		int unreachable = q->dst.addr[3] == 99;

		srv.addrs[id].src = q->has_src ? q->src : wire_addr(10, 0, 0, 5, 40001);
		srv.addrs[id].dst = q->dst;
		REPLY(c, cm_resolve_addr, h.request_id, (r_.body = srv.addrs[id]));
		push(id, 0, unreachable ? RDMA_CM_EVENT_ADDR_ERROR : RDMA_CM_EVENT_ADDR_RESOLVED,
		     unreachable ? -EHOSTUNREACH : 0, NULL);
		break;
	}
	case MASQ_OP_CM_RESOLVE_ROUTE:
		reply_hdr(c, h.opcode, h.request_id, 0);
		push(id, 0, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL);
		break;
	case MASQ_OP_CM_LISTEN: {
		/* A client shows up at once. */
		struct masq_cm_conn_param p = conn_param(0x12, "ping");
		uint32_t child = srv.next_id++;

		reply_hdr(c, h.opcode, h.request_id, 0);
		srv.id_chan[child] = srv.id_chan[id];
		srv.id_ud[child] = srv.id_ud[id];
		if (srv.id_ud[child])
			p.qp_num = 0; /* a SIDR REQ names no QP */
		srv.addrs[child].src = srv.request_to.port ? srv.request_to
							   : wire_addr(10, 0, 0, 6, 7174);
		memset(&srv.request_to, 0, sizeof(srv.request_to));
		srv.addrs[child].dst = wire_addr(10, 0, 0, 5, 40001);
		push(child, id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, &p);
		break;
	}
	case MASQ_OP_CM_CONNECT: {
		struct masq_cm_conn_param p = conn_param(0x12, "pong");

		srv.connect_param = BODY(struct masq_cm_connect_req).param;
		reply_hdr(c, h.opcode, h.request_id, 0);
		if (srv.id_ud[id])
			push_ud_answer(id);
		else
			push(id, 0, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, &p);
		break;
	}
	case MASQ_OP_CM_ACCEPT:
		srv.accept_param = BODY(struct masq_cm_connect_req).param;
		reply_hdr(c, h.opcode, h.request_id, 0);
		if (!srv.id_ud[id]) /* a UD accept is the SIDR REP: nothing comes back */
			push(id, 0, RDMA_CM_EVENT_ESTABLISHED, 0, NULL);
		break;
	case MASQ_OP_CM_REJECT:
		srv.reject = BODY(struct masq_cm_reject_req);
		reply_hdr(c, h.opcode, h.request_id, 0);
		break;
	case MASQ_OP_CM_DISCONNECT:
		reply_hdr(c, h.opcode, h.request_id, 0);
		push(id, 0, RDMA_CM_EVENT_DISCONNECTED, 0, NULL);
		break;
	case MASQ_OP_CM_INIT_QP_ATTR:
		/* As golden/cm_init_qp_attr_reply.hex. */
		REPLY(c, cm_init_qp_attr, h.request_id, ({
			      struct masq_qp_attr *a = &r_.body.attr;

			      r_.body.attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
						  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
						  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
			      a->qp_state = IBV_QPS_RTR;
			      a->path_mtu = IBV_MTU_1024;
			      a->dest_qp_num = 0x12;
			      a->rq_psn = 0x1234;
			      a->max_dest_rd_atomic = 1;
			      a->min_rnr_timer = 12;
			      a->ah_attr.dgid[10] = a->ah_attr.dgid[11] = 0xff;
			      a->ah_attr.dgid[12] = 10;
			      a->ah_attr.dgid[15] = 6;
			      a->ah_attr.sgid_index = 1;
			      a->ah_attr.hop_limit = 64;
			      a->ah_attr.is_global = 1;
			      a->ah_attr.port_num = 1;
		      }));
		break;
	case MASQ_OP_CM_DESTROY_ID:
	case MASQ_OP_CM_ESTABLISH:
		reply_hdr(c, h.opcode, h.request_id, 0);
		break;
	default:
		reply_hdr(c, h.opcode, h.request_id, -EOPNOTSUPP);
	}
	pthread_mutex_unlock(&srv_lock);
}

static int connections; /* accepted so far: one per process (srv_lock) */

/* Receive one request: its length, the descriptor it carried in *fd. */
static ssize_t recv_request(int c, uint8_t buf[MASQ_MAX_MESSAGE], int *fd)
{
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = MASQ_MAX_MESSAGE };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	struct cmsghdr *cm;
	ssize_t n = recvmsg(c, &mh, MSG_CMSG_CLOEXEC);

	*fd = -1;
	for (cm = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS)
			memcpy(fd, CMSG_DATA(cm), sizeof(*fd));
	return n;
}

static void *serve_conn(void *arg)
{
	int c = (int)(intptr_t)arg, fd, opened = 0, hang_up;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;

	while ((n = recv_request(c, buf, &fd)) > 0) {
		pthread_mutex_lock(&srv_lock);
		hang_up = srv.hang_up;
		srv.hang_up = 0;
		pthread_mutex_unlock(&srv_lock);
		if (!hang_up)
			serve(c, buf, (size_t)n, fd, &opened);
		if (fd >= 0)
			close(fd);
		if (hang_up)
			break;
	}
	close(c);
	return NULL;
}

static void *server_main(void *arg)
{
	int lfd = *(int *)arg, c;
	pthread_t th;

	while ((c = accept(lfd, NULL, NULL)) >= 0) {
		pthread_mutex_lock(&srv_lock);
		connections++;
		pthread_mutex_unlock(&srv_lock);
		if (pthread_create(&th, NULL, serve_conn, (void *)(intptr_t)c)) {
			close(c);
			continue;
		}
		pthread_detach(th);
	}
	return NULL;
}

static int connections_seen(void)
{
	int v;

	pthread_mutex_lock(&srv_lock);
	v = connections;
	pthread_mutex_unlock(&srv_lock);
	return v;
}

static int ops(int op)
{
	int v;

	pthread_mutex_lock(&srv_lock);
	v = srv.ops[op];
	pthread_mutex_unlock(&srv_lock);
	return v;
}

static uint32_t last_id(int op)
{
	uint32_t v;

	pthread_mutex_lock(&srv_lock);
	v = srv.last_id[op];
	pthread_mutex_unlock(&srv_lock);
	return v;
}

static struct sockaddr_in sin4(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port)
{
	struct sockaddr_in s = { .sin_family = AF_INET, .sin_port = htons(port) };
	uint8_t ip[4] = { a, b, c, d };

	memcpy(&s.sin_addr.s_addr, ip, 4);
	return s;
}

static int is_sin(const struct sockaddr_in *s, uint8_t a, uint8_t b, uint8_t c, uint8_t d,
		  uint16_t port)
{
	struct sockaddr_in w = sin4(a, b, c, d, port);

	return s->sin_family == AF_INET && s->sin_addr.s_addr == w.sin_addr.s_addr &&
	       s->sin_port == w.sin_port;
}

/* ------------------------------------------------------------ tests */

static void test_active_side(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL, *ipoib = NULL;
	struct sockaddr_in dst = sin4(10, 0, 0, 6, 7174);
	struct rdma_conn_param param = { .private_data = "hi", .private_data_len = 2,
					 .responder_resources = 1, .initiator_depth = 1,
					 .retry_count = 9, .rnr_retry_count = 7, .qp_num = 0x11 };
	struct rdma_cm_event *ev = NULL;
	char big[57] = { 0 };
	int ctx_tag;

	CHECK(ch != NULL);
	if (!ch)
		return;
	CHECK(ch->fd >= 0);
	CHECK_EQ(rdma_create_id(ch, &id, &ctx_tag, RDMA_PS_TCP), 0);
	/* An IB-only port space: not served. */
	errno = 0;
	CHECK_EQ(rdma_create_id(ch, &ipoib, NULL, RDMA_PS_IPOIB), -1);
	CHECK_EQ(errno, ENOSYS);
	if (!id)
		return;
	CHECK(id->channel == ch && id->context == &ctx_tag && id->ps == RDMA_PS_TCP);
	CHECK(id->qp_type == IBV_QPT_RC && id->verbs == NULL);

	pthread_mutex_lock(&srv_lock);
	srv.junk_first = 1; /* dropped on the way to the ADDR_RESOLVED */
	pthread_mutex_unlock(&srv_lock);
	CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), 0);
	CHECK(is_sin(&id->route.addr.src_sin, 10, 0, 0, 5, 40001));
	CHECK(is_sin(&id->route.addr.dst_sin, 10, 0, 0, 6, 7174));
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(ev->id == id && ev->listen_id == NULL);
	CHECK_EQ(ev->status, 0);
	CHECK(id->verbs == &fake_ctx && id->pd == &fake_pd);
	CHECK_EQ(id->port_num, 1);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);

	CHECK_EQ(rdma_resolve_route(id, 2000), 0);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ROUTE_RESOLVED);
	CHECK_EQ(id->route.num_paths, 1);
	CHECK(id->route.path_rec != NULL);
	if (id->route.path_rec) {
		CHECK_EQ(id->route.path_rec->dgid.raw[11], 0xff);
		CHECK_EQ(id->route.path_rec->dgid.raw[15], 6);
		CHECK_EQ(id->route.path_rec->sgid.raw[15], 5);
	}
	CHECK_EQ(rdma_get_src_port(id), htons(40001));
	CHECK_EQ(rdma_get_dst_port(id), htons(7174));
	rdma_ack_cm_event(ev);

	/* No QP: the app gets CONNECT_RESPONSE and calls rdma_establish. */
	errno = 0;
	big[0] = 1;
	param.private_data = big;
	param.private_data_len = sizeof(big);
	CHECK_EQ(rdma_connect(id, &param), -1);
	CHECK_EQ(errno, EINVAL);
	param.private_data = "hi";
	param.private_data_len = 2;
	CHECK_EQ(rdma_connect(id, NULL), -1); /* neither a QP nor a QPN */
	CHECK_EQ(rdma_connect(id, &param), 0);
	pthread_mutex_lock(&srv_lock);
	CHECK_EQ(srv.connect_param.qp_num, 0x11);
	CHECK_EQ(srv.connect_param.retry_count, 7); /* clamped to the 3 bits the CM has */
	CHECK_EQ(srv.connect_param.private_data_len, 2);
	CHECK(memcmp(srv.connect_param.private_data, "hi", 2) == 0);
	pthread_mutex_unlock(&srv_lock);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_RESPONSE);
	CHECK_EQ(ev->param.conn.qp_num, 0x12);
	CHECK_EQ(ev->param.conn.private_data_len, 4);
	CHECK(ev->param.conn.private_data &&
	      memcmp(ev->param.conn.private_data, "pong", 4) == 0);
	rdma_ack_cm_event(ev);
	CHECK_EQ(rdma_establish(id), 0);
	CHECK_EQ(ops(MASQ_OP_CM_ESTABLISH), 1);

	CHECK_EQ(rdma_disconnect(id), 0);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_DISCONNECTED);
	rdma_ack_cm_event(ev);

	/* Nothing queued: a non-blocking channel says so. */
	CHECK_EQ(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
	errno = 0;
	CHECK_EQ(rdma_get_cm_event(ch, &ev), -1);
	CHECK_EQ(errno, EAGAIN);

	CHECK_EQ(rdma_destroy_id(id), 0);
	CHECK_EQ(ops(MASQ_OP_CM_DESTROY_ID), 1);
	rdma_destroy_event_channel(ch);
	CHECK_EQ(ops(MASQ_OP_CM_DESTROY_CHANNEL), 1);
}

static void test_passive_side(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen = NULL, *child;
	struct sockaddr_in any = sin4(0, 0, 0, 0, 7174);
	struct sockaddr_in6 v6 = { .sin6_family = AF_INET6 };
	struct rdma_cm_event *ev = NULL;
	char big[149] = { 0 };
	int tag;

	CHECK(ch != NULL);
	if (!ch)
		return;
	CHECK_EQ(rdma_create_id(ch, &listen, &tag, RDMA_PS_TCP), 0);
	if (!listen)
		return;
	errno = 0;
	CHECK_EQ(rdma_bind_addr(listen, (struct sockaddr *)&v6), -1);
	CHECK_EQ(errno, EAFNOSUPPORT);
	CHECK_EQ(rdma_bind_addr(listen, (struct sockaddr *)&any), 0);
	CHECK(is_sin(&listen->route.addr.src_sin, 0, 0, 0, 0, 7174));
	CHECK(listen->verbs == NULL); /* wildcard: no device yet */
	/* A loopback bind succeeds, as the kernel's (libfabric's verbs
	 * provider probes it), held in libmasq: masqd hears nothing, and
	 * listening or resolving from it is refused. */
	{
		struct rdma_cm_id *lo = NULL;
		struct sockaddr_in lo_addr = sin4(127, 0, 0, 1, 0);
		struct sockaddr_in peer = sin4(10, 0, 0, 2, 7174);
		int binds = ops(MASQ_OP_CM_BIND_ADDR), listens = ops(MASQ_OP_CM_LISTEN);

		CHECK_EQ(rdma_create_id(ch, &lo, NULL, RDMA_PS_TCP), 0);
		if (lo) {
			CHECK_EQ(rdma_bind_addr(lo, (struct sockaddr *)&lo_addr), 0);
			CHECK(is_sin(&lo->route.addr.src_sin, 127, 0, 0, 1, 0));
			CHECK(lo->verbs == NULL);
			CHECK_EQ(ops(MASQ_OP_CM_BIND_ADDR), binds);
			errno = 0;
			CHECK_EQ(rdma_listen(lo, 8), -1);
			CHECK_EQ(errno, EADDRNOTAVAIL);
			errno = 0;
			CHECK_EQ(rdma_resolve_addr(lo, NULL, (struct sockaddr *)&peer, 100), -1);
			CHECK_EQ(errno, EADDRNOTAVAIL);
			CHECK_EQ(ops(MASQ_OP_CM_LISTEN), listens);
			CHECK_EQ(rdma_destroy_id(lo), 0);
		}
	}
	CHECK_EQ(rdma_listen(listen, 8), 0);

	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(ev->listen_id == listen);
	child = ev->id;
	CHECK(child != NULL && child != listen);
	if (child) {
		CHECK(child->context == &tag && child->channel == ch);
		CHECK(child->verbs == &fake_ctx && child->port_num == 1);
		CHECK(child->pd == &fake_pd); /* the device's PD, as librdmacm gives */
		CHECK(child->ps == RDMA_PS_TCP && child->qp_type == IBV_QPT_RC);
		CHECK(is_sin(&child->route.addr.src_sin, 10, 0, 0, 6, 7174));
		CHECK(is_sin(&child->route.addr.dst_sin, 10, 0, 0, 5, 40001));
	}
	CHECK_EQ(ev->param.conn.qp_num, 0x12);
	CHECK_EQ(ev->param.conn.private_data_len, 4);
	CHECK(ev->param.conn.private_data && memcmp(ev->param.conn.private_data, "ping", 4) == 0);
	CHECK_EQ(rdma_ack_cm_event(ev), 0);
	if (!child)
		return;

	/* The request carried the new id's QP attributes: rdma_init_qp_attr
	 * answers from them, with no round trip. */
	{
		int asked = ops(MASQ_OP_CM_INIT_QP_ATTR), mask = 0;
		struct ibv_qp_attr attr;

		memset(&attr, 0x5a, sizeof(attr));
		attr.qp_state = IBV_QPS_INIT;
		CHECK_EQ(rdma_init_qp_attr(child, &attr, &mask), 0);
		CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
		CHECK_EQ(attr.port_num, 1);
		CHECK_EQ(attr.rq_psn, 0); /* not in the mask: zero, not stale */
		attr.qp_state = IBV_QPS_RTR;
		CHECK_EQ(rdma_init_qp_attr(child, &attr, &mask), 0);
		CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
		CHECK_EQ(attr.dest_qp_num, 0x12);
		CHECK_EQ(attr.rq_psn, 0x5678);
		attr.qp_state = IBV_QPS_RTS;
		CHECK_EQ(rdma_init_qp_attr(child, &attr, &mask), 0);
		CHECK_EQ(attr.sq_psn, 0x9abc);
		CHECK_EQ(ops(MASQ_OP_CM_INIT_QP_ATTR), asked);
	}

	errno = 0;
	CHECK_EQ(rdma_reject(child, big, sizeof(big)), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(rdma_reject(child, "no", 2), 0);
	pthread_mutex_lock(&srv_lock);
	CHECK_EQ(srv.reject.private_data_len, 2);
	CHECK(memcmp(srv.reject.private_data, "no", 2) == 0);
	pthread_mutex_unlock(&srv_lock);

	/* An accept without QP names the app's QPN; ESTABLISHED follows. */
	{
		struct rdma_conn_param p = { .qp_num = 0x21, .responder_resources = 0xff,
					     .initiator_depth = 0xff };

		CHECK_EQ(rdma_accept(child, &p), 0);
		CHECK_EQ(last_id(MASQ_OP_CM_ACCEPT), last_id(MASQ_OP_CM_REJECT));
		pthread_mutex_lock(&srv_lock);
		CHECK_EQ(srv.accept_param.qp_num, 0x21);
		CHECK_EQ(srv.accept_param.responder_resources, 1); /* the request's */
		CHECK_EQ(srv.accept_param.rnr_retry_count, 0);
		pthread_mutex_unlock(&srv_lock);
		CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
		CHECK_EQ(ev->event, RDMA_CM_EVENT_ESTABLISHED);
		CHECK(ev->id == child);
		rdma_ack_cm_event(ev);
	}
	CHECK_EQ(rdma_destroy_id(child), 0);
	CHECK_EQ(rdma_destroy_id(listen), 0);
	rdma_destroy_event_channel(ch);
}

static void test_sync_id(void)
{
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in bad = sin4(10, 0, 0, 99, 7174), dst = sin4(10, 0, 0, 6, 7174);
	struct sockaddr_in src = sin4(10, 0, 0, 5, 0);

	CHECK_EQ(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
	if (!id)
		return;
	CHECK(id->channel != NULL);
	errno = 0;
	CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&bad, 2000), -1);
	CHECK_EQ(errno, EHOSTUNREACH);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_ERROR);
	CHECK_EQ(rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000), 0);
	CHECK(id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED);
	CHECK(is_sin(&id->route.addr.src_sin, 10, 0, 0, 5, 0));
	CHECK(id->verbs == &fake_ctx);
	CHECK_EQ(rdma_resolve_route(id, 2000), 0);
	CHECK_EQ(id->route.num_paths, 1);
	CHECK_EQ(rdma_destroy_id(id), 0); /* acks id->event, drops its channel */
}

/* RDMA_PS_UDP: the active side's connect needs no QP and ends in
 * ESTABLISHED with the peer's QP, Q_Key and virtual address vector; the
 * passive side's accept sends its QP and waits for nothing. */
static void test_ud_ids(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL, *listen = NULL, *child;
	struct sockaddr_in dst = sin4(10, 0, 0, 6, 7174), any = sin4(0, 0, 0, 0, 7174);
	struct rdma_conn_param param = { 0 };
	struct rdma_cm_event *ev = NULL;
	char big[181] = { 0 };

	CHECK(ch != NULL);
	if (!ch)
		return;
	CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_UDP), 0);
	if (!id)
		return;
	CHECK(id->ps == RDMA_PS_UDP && id->qp_type == IBV_QPT_UD);
	CHECK_EQ(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000), 0);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	rdma_ack_cm_event(ev);
	CHECK_EQ(rdma_resolve_route(id, 2000), 0);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	rdma_ack_cm_event(ev);

	param.private_data = big;
	param.private_data_len = sizeof(big); /* one more than a SIDR REQ carries */
	errno = 0;
	CHECK_EQ(rdma_connect(id, &param), -1);
	CHECK_EQ(errno, EINVAL);
	CHECK_EQ(rdma_connect(id, NULL), 0);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_ESTABLISHED);
	CHECK_EQ(ev->status, 0);
	CHECK_EQ(ev->param.ud.qp_num, 0x33);
	CHECK_EQ(ev->param.ud.qkey, RDMA_UDP_QKEY);
	CHECK_EQ(ev->param.ud.private_data_len, 3);
	CHECK(ev->param.ud.private_data && memcmp(ev->param.ud.private_data, "ud!", 3) == 0);
	CHECK_EQ(ev->param.ud.ah_attr.is_global, 1);
	CHECK_EQ(ev->param.ud.ah_attr.grh.sgid_index, 1);
	CHECK_EQ(ev->param.ud.ah_attr.grh.dgid.raw[11], 0xff);
	CHECK_EQ(ev->param.ud.ah_attr.grh.dgid.raw[15], 6);
	CHECK_EQ(ev->param.ud.ah_attr.port_num, 1);
	rdma_ack_cm_event(ev);
	CHECK_EQ(rdma_destroy_id(id), 0);

	CHECK_EQ(rdma_create_id(ch, &listen, NULL, RDMA_PS_UDP), 0);
	if (!listen)
		return;
	CHECK_EQ(rdma_bind_addr(listen, (struct sockaddr *)&any), 0);
	CHECK_EQ(rdma_listen(listen, 1), 0);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	child = ev->id;
	CHECK(child != listen && child->qp_type == IBV_QPT_UD);
	CHECK_EQ(ev->param.ud.private_data_len, 4);
	CHECK(ev->param.ud.private_data && memcmp(ev->param.ud.private_data, "ping", 4) == 0);
	CHECK_EQ(ev->param.ud.qp_num, 0);
	rdma_ack_cm_event(ev);
	param.private_data = big;
	param.private_data_len = 137; /* one more than a SIDR REP carries */
	param.qp_num = 0x44;
	errno = 0;
	CHECK_EQ(rdma_accept(child, &param), -1);
	CHECK_EQ(errno, EINVAL);
	param.private_data_len = 0;
	CHECK_EQ(rdma_accept(child, &param), 0);
	pthread_mutex_lock(&srv_lock);
	CHECK_EQ(srv.accept_param.qp_num, 0x44);
	pthread_mutex_unlock(&srv_lock);
	/* Nothing follows a UD accept. */
	CHECK_EQ(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
	errno = 0;
	CHECK_EQ(rdma_get_cm_event(ch, &ev), -1);
	CHECK_EQ(errno, EAGAIN);
	CHECK_EQ(rdma_destroy_id(child), 0);
	CHECK_EQ(rdma_destroy_id(listen), 0);
	rdma_destroy_event_channel(ch);
}

static void test_init_qp_attr(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_attr attr;
	int mask = 0;

	CHECK(ch != NULL);
	if (!ch)
		return;
	CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	if (!id)
		return;
	memset(&attr, 0x5a, sizeof(attr));
	attr.qp_state = IBV_QPS_RTR;
	CHECK_EQ(rdma_init_qp_attr(id, &attr, &mask), 0);
	CHECK_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	CHECK_EQ(attr.qp_state, IBV_QPS_RTR);
	CHECK_EQ(attr.path_mtu, IBV_MTU_1024);
	CHECK_EQ(attr.dest_qp_num, 0x12);
	CHECK_EQ(attr.rq_psn, 0x1234);
	CHECK_EQ(attr.max_dest_rd_atomic, 1);
	CHECK_EQ(attr.min_rnr_timer, 12);
	CHECK_EQ(attr.ah_attr.is_global, 1);
	CHECK_EQ(attr.ah_attr.grh.sgid_index, 1);
	CHECK_EQ(attr.ah_attr.grh.hop_limit, 64);
	CHECK_EQ(attr.ah_attr.grh.dgid.raw[15], 6);
	CHECK_EQ(attr.ah_attr.port_num, 1);
	CHECK_EQ(attr.cap.max_send_wr, 0); /* not in the mask: zero, not stale */
	CHECK_EQ(attr.sq_psn, 0);

	/* The app's ACK timeout and TOS go into the RTS and RTR attributes,
	 * as the kernel's CM puts them (pyverbs' tests read the timeout back
	 * from the QP). */
	{
		uint8_t timeout = 21, tos = 0x60;

		CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
					 sizeof(timeout)),
			 0);
		CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)),
			 0);
		attr.qp_state = IBV_QPS_RTR;
		CHECK_EQ(rdma_init_qp_attr(id, &attr, &mask), 0);
		CHECK_EQ(attr.ah_attr.grh.traffic_class, 0x60);
		CHECK(!(mask & IBV_QP_TIMEOUT));
		attr.qp_state = IBV_QPS_RTS;
		CHECK_EQ(rdma_init_qp_attr(id, &attr, &mask), 0);
		CHECK(mask & IBV_QP_TIMEOUT);
		CHECK_EQ(attr.timeout, 21);
	}
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* rdma_server's pattern: a passive endpoint and rdma_get_request. */
static void test_get_request(void)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP },
			     *res = NULL;
	struct rdma_cm_id *listen = NULL, *child = NULL;
	int migrations;

	CHECK_EQ(rdma_getaddrinfo(NULL, "7471", &hints, &res), 0);
	if (!res)
		return;
	CHECK_EQ(rdma_create_ep(&listen, res, NULL, NULL), 0);
	rdma_freeaddrinfo(res);
	if (!listen)
		return;
	CHECK(is_sin(&listen->route.addr.src_sin, 0, 0, 0, 0, 7471));
	CHECK_EQ(rdma_listen(listen, 0), 0);
	migrations = ops(MASQ_OP_CM_MIGRATE_ID);
	CHECK_EQ(rdma_get_request(listen, &child), 0);
	CHECK(child != NULL);
	if (child) {
		/* Sync like its listener: a channel of its own. */
		CHECK(child->channel != NULL && child->channel != listen->channel);
		CHECK_EQ(ops(MASQ_OP_CM_MIGRATE_ID), migrations + 1);
		CHECK(child->event && child->event->event == RDMA_CM_EVENT_CONNECT_REQUEST);
		CHECK(child->event && child->event->listen_id == listen);
		rdma_destroy_ep(child);
	}
	rdma_destroy_ep(listen);
}

static void test_getaddrinfo(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	struct sockaddr_in src = sin4(10, 0, 0, 5, 0);
	const struct sockaddr_in *s;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	CHECK_EQ(rdma_getaddrinfo(NULL, "7174", &hints, &res), 0);
	if (res) {
		CHECK_EQ(res->ai_family, AF_INET);
		CHECK_EQ(res->ai_qp_type, IBV_QPT_RC);
		CHECK_EQ(res->ai_port_space, RDMA_PS_TCP);
		CHECK(res->ai_flags & RAI_PASSIVE);
		CHECK_EQ(res->ai_src_len, sizeof(struct sockaddr_in));
		CHECK(res->ai_dst_addr == NULL && res->ai_next == NULL);
		s = (const struct sockaddr_in *)res->ai_src_addr;
		CHECK(s && is_sin(s, 0, 0, 0, 0, 7174));
		rdma_freeaddrinfo(res);
	}

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_NUMERICHOST;
	hints.ai_src_addr = (struct sockaddr *)&src;
	hints.ai_src_len = sizeof(src);
	res = NULL;
	CHECK_EQ(rdma_getaddrinfo("10.0.0.6", "7174", &hints, &res), 0);
	if (res) {
		CHECK(!(res->ai_flags & RAI_PASSIVE));
		CHECK_EQ(res->ai_dst_len, sizeof(struct sockaddr_in));
		s = (const struct sockaddr_in *)res->ai_dst_addr;
		CHECK(s && is_sin(s, 10, 0, 0, 6, 7174));
		s = (const struct sockaddr_in *)res->ai_src_addr;
		CHECK(s && is_sin(s, 10, 0, 0, 5, 0));
		CHECK_EQ(res->ai_src_len, sizeof(src));
		rdma_freeaddrinfo(res);
	}

	/* A name that is not numeric, with RAI_NUMERICHOST: the resolver's code. */
	res = NULL;
	CHECK_EQ(rdma_getaddrinfo("not-an-address", "7174", &hints, &res), EAI_NONAME);
	CHECK(res == NULL);
	hints.ai_family = AF_INET6;
	CHECK_EQ(rdma_getaddrinfo("::1", "7174", &hints, &res), EAI_FAMILY);
	errno = 0;
	CHECK_EQ(rdma_getaddrinfo(NULL, NULL, NULL, &res), -1);
	CHECK_EQ(errno, EINVAL);
	rdma_freeaddrinfo(NULL);
}

static void test_addr_conversion(void)
{
	struct sockaddr_in in = sin4(192, 168, 1, 2, 4791), out;
	struct masq_cm_addr w;

	masq_cm_addr_to_wire(&w, &in);
	CHECK(w.addr[0] == 192 && w.addr[1] == 168 && w.addr[2] == 1 && w.addr[3] == 2);
	CHECK_EQ(w.port, 4791);
	CHECK(w.reserved[0] == 0 && w.reserved[1] == 0);
	CHECK_EQ(masq_cm_addr_validate(&w), 0);
	memset(&out, 0xee, sizeof(out));
	masq_cm_addr_from_wire(&out, &w);
	CHECK(is_sin(&out, 192, 168, 1, 2, 4791));
	CHECK(out.sin_zero[0] == 0 && out.sin_zero[7] == 0);
}

static void test_qp_attr_conversion(void)
{
	struct ibv_qp_attr a, b;
	struct masq_qp_attr w;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
		   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = 0xabcdef;
	a.rq_psn = 0x123456;
	a.sq_psn = 77; /* not in the mask: not carried */
	a.max_dest_rd_atomic = 16;
	a.min_rnr_timer = 12;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid.raw[15] = 9;
	a.ah_attr.grh.sgid_index = 3;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.grh.traffic_class = 106;
	a.ah_attr.port_num = 1;
	masq_qp_attr_to_wire(&w, &a, mask);
	CHECK_EQ(masq_qp_attr_validate(&w), 0);
	CHECK_EQ(w.sq_psn, 0);
	memset(&b, 0, sizeof(b));
	masq_qp_attr_from_wire(&b, &w);
	CHECK_EQ(b.qp_state, a.qp_state);
	CHECK_EQ(b.path_mtu, a.path_mtu);
	CHECK_EQ(b.dest_qp_num, a.dest_qp_num);
	CHECK_EQ(b.rq_psn, a.rq_psn);
	CHECK_EQ(b.sq_psn, 0);
	CHECK_EQ(b.max_dest_rd_atomic, 16);
	CHECK_EQ(b.min_rnr_timer, 12);
	CHECK_EQ(b.qp_access_flags, a.qp_access_flags);
	CHECK(memcmp(&b.ah_attr, &a.ah_attr, sizeof(a.ah_attr)) == 0);

	/* UCX asks for flow label 0xffffffff: the kernel keeps the GRH's 20
	 * bits, and so does the wire, which then validates. */
	a.ah_attr.grh.flow_label = 0xffffffff;
	masq_qp_attr_to_wire(&w, &a, mask);
	CHECK_EQ(w.ah_attr.flow_label, 0xfffff);
	CHECK_EQ(masq_qp_attr_validate(&w), 0);
}

static void test_misc(void)
{
	struct rdma_cm_id *id = NULL;
	struct ibv_context **devs;
	uint8_t tos = 32;
	int n = -1;

	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_ESTABLISHED), "RDMA_CM_EVENT_ESTABLISHED") == 0);
	CHECK(strcmp(rdma_event_str(RDMA_CM_EVENT_TIMEWAIT_EXIT), "RDMA_CM_EVENT_TIMEWAIT_EXIT") ==
	      0);
	CHECK(strcmp(rdma_event_str((enum rdma_cm_event_type)99), "UNKNOWN EVENT") == 0);
	devs = rdma_get_devices(&n);
	CHECK(devs && devs[0] == &fake_ctx && devs[1] == &fake_ctx1 && devs[2] == NULL);
	CHECK_EQ(n, 2);
	rdma_free_devices(devs);

	CHECK_EQ(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
	if (!id)
		return;
	CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)), 0);
	errno = 0;
	CHECK_EQ(rdma_set_option(id, RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, NULL, 0), -1);
	CHECK_EQ(errno, ENOSYS);
	/* The kernel's sizes: a byte for TOS and the ACK timeout, an int for
	 * the address flags; anything else is EINVAL. */
	{
		int on = 1;

		errno = 0;
		CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &on,
					 sizeof(on)),
			 -1);
		CHECK_EQ(errno, EINVAL);
		CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &on, sizeof(on)),
			 0);
		errno = 0;
		CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &tos, sizeof(tos)),
			 -1);
		CHECK_EQ(errno, EINVAL);
		errno = 0;
		CHECK_EQ(rdma_set_option(id, RDMA_OPTION_ID, 99, &on, sizeof(on)), -1);
		CHECK_EQ(errno, ENOSYS);
	}
	/* No ECE is carried: the peer's reads as zeros; an id with a QP of
	 * its own has none to set or get (librdmacm's rule). */
	{
		struct ibv_ece ece;

		memset(&ece, 0x5a, sizeof(ece));
		CHECK_EQ(rdma_get_remote_ece(id, &ece), 0);
		CHECK(ece.vendor_id == 0 && ece.options == 0 && ece.comp_mask == 0);
		CHECK_EQ(rdma_set_local_ece(id, &ece), 0);
		errno = 0;
		CHECK_EQ(rdma_set_local_ece(id, NULL), -1);
		CHECK_EQ(errno, EINVAL);
	}
	errno = 0;
	CHECK_EQ(rdma_join_multicast(id, NULL, NULL), -1);
	CHECK_EQ(errno, ENOSYS);
	CHECK_EQ(rdma_notify(id, IBV_EVENT_COMM_EST), 0);
	rdma_destroy_id(id);
}

/* With two rails, an id uses the device whose GID table holds its local
 * address (bound, given as the source, or the one a request came to), and
 * that device's PD and depth limits; an address no device holds means
 * device 0. */
static void test_ids_use_the_device_of_their_local_address(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in rail1 = sin4(10, 1, 0, 5, 0), dst = sin4(10, 1, 0, 6, 7174);
	struct sockaddr_in nobody = sin4(10, 0, 0, 7, 0), any = sin4(0, 0, 0, 0, 7175);
	struct rdma_conn_param param = { .responder_resources = RDMA_MAX_RESP_RES,
					 .initiator_depth = RDMA_MAX_INIT_DEPTH,
					 .qp_num = 0x11 };
	struct rdma_cm_id *id = NULL, *other = NULL, *listen = NULL, *child;
	struct rdma_cm_event *ev = NULL;

	CHECK(ch != NULL);
	if (!ch)
		return;
	CHECK_EQ(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP), 0);
	CHECK_EQ(rdma_create_id(NULL, &other, NULL, RDMA_PS_TCP), 0);
	CHECK_EQ(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP), 0);
	if (!id || !other || !listen)
		return;
	CHECK_EQ(rdma_bind_addr(id, (struct sockaddr *)&rail1), 0);
	CHECK(id->verbs == &fake_ctx1 && id->pd == &fake_pd1);
	CHECK_EQ(rdma_resolve_addr(id, (struct sockaddr *)&rail1, (struct sockaddr *)&dst, 2000),
		 0);
	CHECK(id->verbs == &fake_ctx1 && id->pd == &fake_pd1);
	CHECK_EQ(rdma_resolve_route(id, 2000), 0);
	CHECK_EQ(rdma_connect(id, &param), 0);
	pthread_mutex_lock(&srv_lock);
	CHECK_EQ(srv.connect_param.responder_resources, 4); /* device 1's, not 16 */
	CHECK_EQ(srv.connect_param.initiator_depth, 2);
	pthread_mutex_unlock(&srv_lock);

	CHECK_EQ(rdma_bind_addr(other, (struct sockaddr *)&nobody), 0);
	CHECK(other->verbs == &fake_ctx && other->pd == &fake_pd);

	pthread_mutex_lock(&srv_lock);
	srv.request_to = wire_addr(10, 1, 0, 5, 7175);
	pthread_mutex_unlock(&srv_lock);
	CHECK_EQ(rdma_bind_addr(listen, (struct sockaddr *)&any), 0);
	CHECK(listen->verbs == NULL);
	CHECK_EQ(rdma_listen(listen, 1), 0);
	CHECK_EQ(rdma_get_cm_event(ch, &ev), 0);
	CHECK_EQ(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST);
	child = ev->id;
	CHECK(child->verbs == &fake_ctx1 && child->pd == &fake_pd1);
	rdma_ack_cm_event(ev);
	rdma_destroy_id(child);
	rdma_destroy_id(listen);
	rdma_destroy_id(other);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

static void *blocked_reader(void *arg)
{
	struct rdma_event_channel *ch = arg;
	struct rdma_cm_event *ev;
	long r = rdma_get_cm_event(ch, &ev);

	return (void *)r;
}

/* A channel destroyed under a blocked reader never wakes it (the kernel's
 * does not: rping's CM thread relies on it); one masqd closes while the
 * app still holds it fails with ECONNRESET. */
static void test_channel_close(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *ev;
	struct timespec ts;
	pthread_t th;
	void *res;
	uint32_t handle;

	CHECK(ch != NULL);
	if (!ch)
		return;
	pthread_create(&th, NULL, blocked_reader, ch);
	usleep(50 * 1000);
	rdma_destroy_event_channel(ch);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += 300 * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	CHECK_EQ(pthread_timedjoin_np(th, &res, &ts), ETIMEDOUT);
	pthread_cancel(th);
	pthread_join(th, NULL);

	ch = rdma_create_event_channel();
	CHECK(ch != NULL);
	if (!ch)
		return;
	pthread_mutex_lock(&srv_lock);
	handle = srv.last_channel;
	if (handle >= 1 && handle <= MAX_CHANNELS && srv.chan_fd[handle] >= 0) {
		close(srv.chan_fd[handle]); /* as a masqd that went away */
		srv.chan_fd[handle] = -1;
	}
	pthread_mutex_unlock(&srv_lock);
	errno = 0;
	CHECK_EQ(rdma_get_cm_event(ch, &ev), -1);
	CHECK_EQ(errno, ECONNRESET);
	rdma_destroy_event_channel(ch);
}

/* A forked child talks to masqd over a connection of its own, as each of
 * its rdma_cm files would be its own: sharing the parent's would cross
 * their replies and keep the child's ids after it exits. */
static void test_fork(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel(), *cch;
	struct rdma_cm_id *id;
	int before, status = -1;
	pid_t pid;

	CHECK(ch != NULL);
	if (!ch)
		return;
	before = connections_seen();
	pid = fork();
	if (pid == 0) {
		/* No CHECK here: the counts live in the parent. */
		cch = rdma_create_event_channel();
		if (!cch || rdma_create_id(cch, &id, NULL, RDMA_PS_TCP) || rdma_destroy_id(id))
			_exit(1);
		rdma_destroy_event_channel(cch);
		_exit(connections_seen() == before ? 0 : 2); /* the child's copy: not counted */
	}
	CHECK(pid > 0);
	CHECK_EQ(waitpid(pid, &status, 0), pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	CHECK_EQ(connections_seen(), before + 1);
	/* The parent's connection is untouched by the child's leaving. */
	CHECK_EQ(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	CHECK_EQ(rdma_destroy_id(id), 0);
	CHECK_EQ(connections_seen(), before + 1);
	rdma_destroy_event_channel(ch);
}

static int srv_count(const int *counter)
{
	int v;

	pthread_mutex_lock(&srv_lock);
	v = *counter;
	pthread_mutex_unlock(&srv_lock);
	return v;
}

/* masqd serves the CM only to a process that opened a device: the CM's
 * connection opens device 0 (HELLO names it) with its descriptor before
 * its first request, so masqd refused none of the requests above. */
static void test_the_cm_connection_opens_device_0_before_its_first_request(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	CHECK(ch != NULL);
	CHECK(ops(MASQ_OP_OPEN_DEVICE) >= 1);
	CHECK_EQ(ops(MASQ_OP_OPEN_DEVICE), connections_seen());
	CHECK_EQ(srv_count(&srv.unopened), 0);
	CHECK_EQ(srv_count(&srv.wrong_device), 0);
	if (ch)
		rdma_destroy_event_channel(ch);
}

/* A restarted masqd knows nothing of the process: the CM's new connection
 * opens the device again before the request it carries on. */
static void test_a_reconnected_cm_connection_opens_the_device_again(void)
{
	struct rdma_event_channel *ch;
	int opens = ops(MASQ_OP_OPEN_DEVICE), conns = connections_seen();

	pthread_mutex_lock(&srv_lock);
	srv.hang_up = 1;
	pthread_mutex_unlock(&srv_lock);
	ch = rdma_create_event_channel();
	CHECK(ch != NULL);
	CHECK_EQ(connections_seen(), conns + 1);
	CHECK_EQ(ops(MASQ_OP_OPEN_DEVICE), opens + 1);
	CHECK_EQ(srv_count(&srv.unopened), 0);
	CHECK_EQ(srv_count(&srv.wrong_device), 0);
	if (ch)
		rdma_destroy_event_channel(ch);
}

int main(void)
{
	struct fake_masqd masqd;
	struct stat null_st;
	int i;

	for (i = 0; i <= MAX_CHANNELS; i++)
		srv.chan_fd[i] = -1;
	srv.next_id = 3;
	if (fake_masqd_start(&masqd, "cm", server_main))
		return 1;
	/* Device 0's uverbs fd is /dev/null, device 1's /dev/zero. */
	fake_ctx.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	fake_ctx1.cmd_fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
	if (fake_ctx.cmd_fd < 0 || fake_ctx1.cmd_fd < 0 || fstat(fake_ctx.cmd_fd, &null_st)) {
		perror("test_cm: devices");
		return 1;
	}
	srv.device0 = null_st.st_rdev;
	masq_cm_add_device(&fake_ctx, &fake_pd, 16, 16, htonl(0x0a000005));
	masq_cm_add_device(&fake_ctx1, &fake_pd1, 4, 2, htonl(0x0a010005));

	run("getaddrinfo", test_getaddrinfo);
	run("addr_conversion", test_addr_conversion);
	run("qp_attr_conversion", test_qp_attr_conversion);
	run("active_side", test_active_side);
	run("passive_side", test_passive_side);
	run("sync_id", test_sync_id);
	run("ud_ids", test_ud_ids);
	run("init_qp_attr", test_init_qp_attr);
	run("get_request", test_get_request);
	run("misc", test_misc);
	run("ids_use_the_device_of_their_local_address",
	    test_ids_use_the_device_of_their_local_address);
	run("channel_close", test_channel_close);
	run("fork", test_fork);
	run("the_cm_connection_opens_device_0_before_its_first_request",
	    test_the_cm_connection_opens_device_0_before_its_first_request);
	run("a_reconnected_cm_connection_opens_the_device_again",
	    test_a_reconnected_cm_connection_opens_the_device_again);

	fake_masqd_remove(&masqd);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
