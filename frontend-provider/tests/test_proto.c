/*
 * masq_proto.h against the golden vectors in backend/proto/golden/, which
 * the Rust crate checks too: the same instances built here must give the
 * same bytes, and the files must decode back to them. Then malformed
 * input: every decoder refuses it without reading out of bounds (run
 * under ASan/UBSan).
 *
 * From frontend-provider/:
 *   make -f tests/proto.mk
 * or
 *   cc -std=gnu11 -Wall -Wextra -Werror -fsanitize=address,undefined \
 *      -Iinclude -o build/test_proto tests/test_proto.c && build/test_proto
 * The golden directory is found from __FILE__; pass it as argv[1] (or set
 * MASQ_GOLDEN_DIR) when running from elsewhere.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "masq_proto.h"
#include "check.h"

/* The protocol uses libibverbs' numbering. */
_Static_assert(MASQ_GID_TYPE_IB == IBV_GID_TYPE_IB, "gid type");
_Static_assert(MASQ_GID_TYPE_ROCE_V1 == IBV_GID_TYPE_ROCE_V1, "gid type");
_Static_assert(MASQ_GID_TYPE_ROCE_V2 == IBV_GID_TYPE_ROCE_V2, "gid type");

static char golden_dir[4096];

static void run(const char *name, void (*fn)(void))
{
	run_with(name, NULL, fn);
}

/* The bytes of golden/NAME.hex: hex pairs, '#' starts a comment. */
static size_t load(const char *name, uint8_t *buf, size_t cap)
{
	char path[4200], line[512];
	size_t n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s.hex", golden_dir, name);
	f = fopen(path, "r");
	if (!f) {
		fprintf(stderr, "cannot open %s: %s\n", path, strerror(errno));
		cur_failed = 1;
		return 0;
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *hash = strchr(line, '#');
		unsigned int b;
		int used;

		if (hash)
			*hash = 0;
		while (sscanf(p, " %2x%n", &b, &used) == 1) {
			if (n == cap) {
				fprintf(stderr, "%s: longer than %zu bytes\n", path, cap);
				cur_failed = 1;
				fclose(f);
				return 0;
			}
			buf[n++] = (uint8_t)b;
			p += used;
		}
	}
	fclose(f);
	return n;
}

static void same_bytes(const char *what, const void *got, const void *want, size_t n)
{
	const uint8_t *g = got, *w = want;
	size_t i;

	for (i = 0; i < n; i++)
		if (g[i] != w[i]) {
			fprintf(stderr, "%s: byte %zu is %02x, golden has %02x\n", what, i, g[i],
				w[i]);
			cur_failed = 1;
			return;
		}
}

/*
 * Build the instance, compare with the golden file, decode the file and
 * compare again.
 */
#define GOLDEN(file, type, build)                                                \
	do {                                                                     \
		struct type want_, got_;                                         \
		uint8_t buf_[MASQ_MAX_MESSAGE];                                  \
		size_t n_ = load(file, buf_, sizeof(buf_));                      \
		build(&want_);                                                   \
		CHECK_EQ(n_, sizeof(want_));                                     \
		if (n_ != sizeof(want_))                                         \
			break;                                                   \
		same_bytes(file " (encode)", &want_, buf_, n_);                  \
		memset(&got_, 0xa5, sizeof(got_));                               \
		CHECK_EQ(type##_decode(buf_, n_, &got_), 0);                     \
		same_bytes(file " (decode)", &got_, &want_, n_);                 \
	} while (0)

static void v4_mapped(uint8_t gid[16], uint8_t a, uint8_t b, uint8_t c, uint8_t d)
{
	memset(gid, 0, 16);
	gid[10] = gid[11] = 0xff;
	gid[12] = a;
	gid[13] = b;
	gid[14] = c;
	gid[15] = d;
}

static void ah_to_peer(struct masq_ah_attr *ah)
{
	v4_mapped(ah->dgid, 10, 0, 0, 6);
	ah->sgid_index = 1;
	ah->hop_limit = 64;
	ah->is_global = 1;
	ah->port_num = 1;
}

/* The instances of backend/proto/tests/golden.rs. */

static void hello_req(struct masq_msg_hello_req *m)
{
	masq_msg_hello_req_init(m);
	masq_hdr_set_request_id(m, 1);
	m->body.features = MASQ_FEATURE_NOTICES;
	masq_copy_name(m->body.app_name, sizeof(m->body.app_name), "ib_write_bw");
}

static void hello_reply(struct masq_msg_hello_reply *m)
{
	masq_msg_hello_reply_init(m);
	m->hdr.request_id = 1;
	m->body.features = MASQ_FEATURE_NOTICES;
	m->body.session_id = 7;
	masq_copy_name(m->body.vdev_name, sizeof(m->body.vdev_name), "vrdma0");
	masq_copy_name(m->body.phys_dev_name, sizeof(m->body.phys_dev_name), "rxe0");
	m->body.node_guid = 0x00420afffe000005ULL;
	m->body.sys_image_guid = 0x00420afffe000005ULL;
	m->body.phys_port = 1;
	m->body.gid_count = 2;
}

static void open_device_req(struct masq_msg_open_device_req *m)
{
	masq_msg_open_device_req_init(m);
	m->hdr.request_id = 2;
}

static void open_device_reply(struct masq_msg_open_device_reply *m)
{
	masq_msg_open_device_reply_init(m);
	m->hdr.request_id = 2;
}

static void query_gid_table_req(struct masq_msg_query_gid_table_req *m)
{
	masq_msg_query_gid_table_req_init(m);
	m->hdr.request_id = 3;
	m->body.port = 1;
}

static void query_gid_table_reply(struct masq_msg_query_gid_table_reply *m)
{
	static const uint8_t link_local[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0,
						0x00, 0x42, 0x0a, 0xff, 0xfe, 0, 0, 0x05 };

	masq_msg_query_gid_table_reply_init(m);
	m->hdr.request_id = 3;
	m->body.count = 2;
	m->body.entries[0].index = 0;
	m->body.entries[0].gid_type = IBV_GID_TYPE_ROCE_V2;
	memcpy(m->body.entries[0].gid, link_local, 16);
	m->body.entries[1].index = 1;
	m->body.entries[1].gid_type = IBV_GID_TYPE_ROCE_V2;
	v4_mapped(m->body.entries[1].gid, 10, 0, 0, 5);
}

static void modify_qp_req(struct masq_msg_modify_qp_req *m)
{
	masq_msg_modify_qp_req_init(m);
	m->hdr.request_id = 4;
	m->body.qp_handle = 1;
	m->body.qp_num = 0x11;
	m->body.qp_type = IBV_QPT_RC;
	m->body.attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_RQ_PSN |
			    IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_DEST_QPN;
	m->body.attr.qp_state = IBV_QPS_RTR;
	m->body.attr.path_mtu = IBV_MTU_1024;
	m->body.attr.rq_psn = 0x1a2b3c;
	m->body.attr.dest_qp_num = 0x12;
	m->body.attr.max_dest_rd_atomic = 1;
	m->body.attr.min_rnr_timer = 12;
	ah_to_peer(&m->body.attr.ah_attr);
}

static void modify_qp_reply(struct masq_msg_modify_qp_reply *m)
{
	masq_msg_modify_qp_reply_init(m);
	m->hdr.request_id = 4;
}

static void query_qp_req(struct masq_msg_query_qp_req *m)
{
	masq_msg_query_qp_req_init(m);
	m->hdr.request_id = 5;
	m->body.qp_handle = 1;
	m->body.attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_CAP;
}

static void query_qp_reply(struct masq_msg_query_qp_reply *m)
{
	struct masq_qp_attr *a = &m->body;

	masq_msg_query_qp_reply_init(m);
	m->hdr.request_id = 5;
	a->qp_state = IBV_QPS_RTS;
	a->cur_qp_state = IBV_QPS_RTS;
	a->path_mtu = IBV_MTU_1024;
	a->rq_psn = 0x1a2b3c;
	a->sq_psn = 0x4d5e6f;
	a->dest_qp_num = 0x12;
	a->qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			     IBV_ACCESS_REMOTE_READ;
	a->max_rd_atomic = 1;
	a->max_dest_rd_atomic = 1;
	a->min_rnr_timer = 12;
	a->port_num = 1;
	a->timeout = 14;
	a->retry_cnt = 7;
	a->rnr_retry = 7;
	a->cap.max_send_wr = 128;
	a->cap.max_recv_wr = 512;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
	a->cap.max_inline_data = 64;
	ah_to_peer(&a->ah_attr);
}

static void qp_moved_req(struct masq_msg_qp_moved_req *m)
{
	masq_msg_qp_moved_req_init(m);
	m->hdr.request_id = 12;
	m->body.qp_handle = 1;
	m->body.qp_num = 0x11;
	m->body.qp_type = IBV_QPT_RC;
	m->body.attr_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			    IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN;
	m->body.qp_state = IBV_QPS_RTS;
}

static void qp_destroyed_req(struct masq_msg_qp_destroyed_req *m)
{
	masq_msg_qp_destroyed_req_init(m);
	m->hdr.request_id = 13;
	m->body.qp_handle = 1;
	m->body.qp_num = 0x11;
}

static void destroy_qp_req(struct masq_msg_destroy_qp_req *m)
{
	masq_msg_destroy_qp_req_init(m);
	m->hdr.request_id = 6;
	m->body.qp_handle = 1;
	m->body.qp_num = 0x11;
}

static void destroy_qp_reply(struct masq_msg_destroy_qp_reply *m)
{
	masq_msg_destroy_qp_reply_init(m);
	m->hdr.request_id = 6;
}

static void resync_qp_req(struct masq_msg_resync_qp_req *m)
{
	masq_msg_resync_qp_req_init(m);
	m->hdr.request_id = 7;
	m->body.qp_handle = 1;
	m->body.qp_num = 0x11;
	m->body.qp_type = IBV_QPT_RC;
	m->body.sgid_index = 1;
	m->body.has_route = 1;
	v4_mapped(m->body.dgid, 10, 0, 0, 6);
}

static void resync_qp_reply(struct masq_msg_resync_qp_reply *m)
{
	masq_msg_resync_qp_reply_init(m);
	m->hdr.request_id = 7;
	m->body.qp_state = IBV_QPS_RTS;
	m->body.result = MASQ_RESYNC_TRACKED;
}

static void qp_error_notice(struct masq_msg_qp_error_notice *m)
{
	masq_msg_qp_error_notice_init(m);
	m->body.qp_num = 0x11;
	m->body.reason = MASQ_QP_ERROR_POLICY_RESET;
}

/* RDMA CM: rping's client (10.0.0.5) connecting to its server at
 * 10.0.0.6:7174, id 3 on channel 1 (cm_goldens() in golden.rs). */

static struct masq_cm_addr cm_addr(uint8_t a, uint8_t b, uint8_t c, uint8_t d, uint16_t port)
{
	struct masq_cm_addr w;

	memset(&w, 0, sizeof(w));
	w.addr[0] = a;
	w.addr[1] = b;
	w.addr[2] = c;
	w.addr[3] = d;
	w.port = port;
	return w;
}

static struct masq_cm_addrs cm_addrs(void)
{
	struct masq_cm_addrs a;

	a.src = cm_addr(10, 0, 0, 5, 40001);
	a.dst = cm_addr(10, 0, 0, 6, 7174);
	return a;
}

static void cm_conn_param(struct masq_cm_conn_param *p, uint32_t qpn, const char *pdata)
{
	memset(p, 0, sizeof(*p));
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = qpn;
	p->private_data_len = (uint32_t)strlen(pdata);
	memcpy(p->private_data, pdata, p->private_data_len);
}

/* A request or reply whose body is just an id. */
#define CM_ID_MSG(fn, type, rid, handle)            \
	static void fn(struct type *m)              \
	{                                           \
		type##_init(m);                     \
		m->hdr.request_id = (rid);          \
		m->body.id = (handle);              \
	}
/* A reply with no body. */
#define CM_EMPTY_MSG(fn, type, rid)                 \
	static void fn(struct type *m)              \
	{                                           \
		type##_init(m);                     \
		m->hdr.request_id = (rid);          \
	}

CM_EMPTY_MSG(cm_create_channel_req, masq_msg_cm_create_channel_req, 16)
CM_EMPTY_MSG(cm_destroy_channel_reply, masq_msg_cm_destroy_channel_reply, 17)
CM_ID_MSG(cm_create_id_reply, masq_msg_cm_create_id_reply, 18, 3)
CM_ID_MSG(cm_destroy_id_req, masq_msg_cm_destroy_id_req, 19, 3)
CM_EMPTY_MSG(cm_destroy_id_reply, masq_msg_cm_destroy_id_reply, 19)
CM_EMPTY_MSG(cm_migrate_id_reply, masq_msg_cm_migrate_id_reply, 20)
CM_ID_MSG(cm_resolve_route_req, masq_msg_cm_resolve_route_req, 23, 3)
CM_EMPTY_MSG(cm_resolve_route_reply, masq_msg_cm_resolve_route_reply, 23)
CM_EMPTY_MSG(cm_listen_reply, masq_msg_cm_listen_reply, 24)
CM_EMPTY_MSG(cm_connect_reply, masq_msg_cm_connect_reply, 25)
CM_EMPTY_MSG(cm_accept_reply, masq_msg_cm_accept_reply, 26)
CM_EMPTY_MSG(cm_reject_reply, masq_msg_cm_reject_reply, 27)
CM_ID_MSG(cm_disconnect_req, masq_msg_cm_disconnect_req, 28, 3)
CM_EMPTY_MSG(cm_disconnect_reply, masq_msg_cm_disconnect_reply, 28)
CM_ID_MSG(cm_establish_req, masq_msg_cm_establish_req, 30, 3)
CM_EMPTY_MSG(cm_establish_reply, masq_msg_cm_establish_reply, 30)
CM_EMPTY_MSG(cm_restore_channel_reply, masq_msg_cm_restore_channel_reply, 31)
CM_EMPTY_MSG(cm_restore_id_reply, masq_msg_cm_restore_id_reply, 32)
CM_EMPTY_MSG(cm_accept_qp_reply, masq_msg_cm_accept_qp_reply, 33)
CM_EMPTY_MSG(cm_establish_qp_reply, masq_msg_cm_establish_qp_reply, 34)

static void cm_restore_channel_req(struct masq_msg_cm_restore_channel_req *m)
{
	masq_msg_cm_restore_channel_req_init(m);
	m->hdr.request_id = 31;
	m->body.channel = 1;
}

static void cm_restore_id_req(struct masq_msg_cm_restore_id_req *m)
{
	masq_msg_cm_restore_id_req_init(m);
	m->hdr.request_id = 32;
	m->body.id = 3;
	m->body.channel = 1;
	m->body.port_space = MASQ_CM_PS_TCP;
	m->body.state = MASQ_CM_RESTORE_CONNECTED;
	m->body.active = 1;
	m->body.qp_num = 0x11;
	m->body.remote_qpn = 0x12;
	m->body.addrs = cm_addrs();
}

static void cm_create_channel_reply(struct masq_msg_cm_create_channel_reply *m)
{
	masq_msg_cm_create_channel_reply_init(m);
	m->hdr.request_id = 16;
	m->body.channel = 1;
}

static void cm_destroy_channel_req(struct masq_msg_cm_destroy_channel_req *m)
{
	masq_msg_cm_destroy_channel_req_init(m);
	m->hdr.request_id = 17;
	m->body.channel = 1;
}

static void cm_create_id_req(struct masq_msg_cm_create_id_req *m)
{
	masq_msg_cm_create_id_req_init(m);
	m->hdr.request_id = 18;
	m->body.channel = 1;
	m->body.port_space = MASQ_CM_PS_TCP;
}

static void cm_migrate_id_req(struct masq_msg_cm_migrate_id_req *m)
{
	masq_msg_cm_migrate_id_req_init(m);
	m->hdr.request_id = 20;
	m->body.id = 3;
	m->body.channel = 2;
}

static void cm_bind_addr_req(struct masq_msg_cm_bind_addr_req *m)
{
	masq_msg_cm_bind_addr_req_init(m);
	m->hdr.request_id = 21;
	m->body.id = 3;
	m->body.addr = cm_addr(0, 0, 0, 0, 7174);
}

static void cm_bind_addr_reply(struct masq_msg_cm_bind_addr_reply *m)
{
	masq_msg_cm_bind_addr_reply_init(m);
	m->hdr.request_id = 21;
	m->body.src = cm_addr(0, 0, 0, 0, 7174);
}

static void cm_resolve_addr_req(struct masq_msg_cm_resolve_addr_req *m)
{
	masq_msg_cm_resolve_addr_req_init(m);
	m->hdr.request_id = 22;
	m->body.id = 3;
	m->body.timeout_ms = 2000;
	m->body.dst = cm_addrs().dst;
}

static void cm_resolve_addr_reply(struct masq_msg_cm_resolve_addr_reply *m)
{
	masq_msg_cm_resolve_addr_reply_init(m);
	m->hdr.request_id = 22;
	m->body = cm_addrs();
}

static void cm_listen_req(struct masq_msg_cm_listen_req *m)
{
	masq_msg_cm_listen_req_init(m);
	m->hdr.request_id = 24;
	m->body.id = 3;
	m->body.backlog = 1024;
}

static void cm_connect_req(struct masq_msg_cm_connect_req *m)
{
	masq_msg_cm_connect_req_init(m);
	m->hdr.request_id = 25;
	m->body.id = 3;
	cm_conn_param(&m->body.param, 0x11, "ping");
}

static void cm_accept_req(struct masq_msg_cm_accept_req *m)
{
	masq_msg_cm_accept_req_init(m);
	m->hdr.request_id = 26;
	m->body.id = 4;
	cm_conn_param(&m->body.param, 0x12, "");
}

static void cm_accept_qp_req(struct masq_msg_cm_accept_qp_req *m)
{
	masq_msg_cm_accept_qp_req_init(m);
	m->hdr.request_id = 33;
	m->body.id = 4;
	m->body.qp_handle = 9;
	cm_conn_param(&m->body.param, 0x12, "");
}

static void cm_establish_qp_req(struct masq_msg_cm_establish_qp_req *m)
{
	masq_msg_cm_establish_qp_req_init(m);
	m->hdr.request_id = 34;
	m->body.id = 3;
	m->body.qp_handle = 8;
	m->body.qp_num = 0x11;
}

static void cm_reject_req(struct masq_msg_cm_reject_req *m)
{
	masq_msg_cm_reject_req_init(m);
	m->hdr.request_id = 27;
	m->body.id = 4;
	m->body.private_data_len = 2;
	memcpy(m->body.private_data, "no", 2);
}

static void cm_init_qp_attr_req(struct masq_msg_cm_init_qp_attr_req *m)
{
	masq_msg_cm_init_qp_attr_req_init(m);
	m->hdr.request_id = 29;
	m->body.id = 3;
	m->body.qp_state = IBV_QPS_RTR;
}

/* What the CM gives for RTR towards 10.0.0.6's QP 0x12. */
static void rtr_to_peer(struct masq_cm_qp_attr *q)
{
	struct masq_qp_attr *a = &q->attr;

	q->attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
		       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	a->qp_state = IBV_QPS_RTR;
	a->path_mtu = IBV_MTU_1024;
	a->dest_qp_num = 0x12;
	a->rq_psn = 0x1234;
	a->max_dest_rd_atomic = 1;
	a->min_rnr_timer = 12;
	ah_to_peer(&a->ah_attr);
}

static void cm_init_qp_attr_reply(struct masq_msg_cm_init_qp_attr_reply *m)
{
	masq_msg_cm_init_qp_attr_reply_init(m);
	m->hdr.request_id = 29;
	rtr_to_peer(&m->body);
}

static void cm_event_notice(struct masq_msg_cm_event_notice *m)
{
	struct masq_cm_qp_attr *init = &m->body.init_attr, *rts = &m->body.rts_attr;

	masq_msg_cm_event_notice_init(m);
	m->body.id = 3;
	m->body.event = MASQ_CM_EVENT_CONNECT_RESPONSE;
	m->body.addrs = cm_addrs();
	cm_conn_param(&m->body.param, 0x12, "pong");
	init->attr_mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	init->attr.qp_state = IBV_QPS_INIT;
	init->attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	init->attr.port_num = 1;
	rtr_to_peer(&m->body.rtr_attr);
	rts->attr_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			 IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_SQ_PSN;
	rts->attr.qp_state = IBV_QPS_RTS;
	rts->attr.timeout = 14;
	rts->attr.retry_cnt = 7;
	rts->attr.rnr_retry = 7;
	rts->attr.sq_psn = 0x4321;
	rts->attr.max_rd_atomic = 1;
}

static void create_ah_req(struct masq_msg_create_ah_req *m)
{
	masq_msg_create_ah_req_init(m);
	m->hdr.request_id = 8;
	ah_to_peer(&m->body.ah_attr);
}

static void create_ah_reply(struct masq_msg_create_ah_reply *m)
{
	masq_msg_create_ah_reply_init(m);
	m->hdr.request_id = 8;
	m->body.ah_id = 3;
	ah_to_peer(&m->body.ah_attr);
	v4_mapped(m->body.ah_attr.dgid, 192, 168, 1, 2);
	m->body.ah_attr.traffic_class = 46 << 2;
}

static void bind_ah_req(struct masq_msg_bind_ah_req *m)
{
	masq_msg_bind_ah_req_init(m);
	m->hdr.request_id = 9;
	m->body.ah_id = 3;
	m->body.ah_handle = 5;
}

static void bind_ah_reply(struct masq_msg_bind_ah_reply *m)
{
	masq_msg_bind_ah_reply_init(m);
	m->hdr.request_id = 9;
}

static void resync_ah_req(struct masq_msg_resync_ah_req *m)
{
	masq_msg_resync_ah_req_init(m);
	m->hdr.request_id = 35;
	m->body.ah_handle = 5;
	ah_to_peer(&m->body.ah_attr);
}

static void resync_ah_reply(struct masq_msg_resync_ah_reply *m)
{
	masq_msg_resync_ah_reply_init(m);
	m->hdr.request_id = 35;
	m->body.result = MASQ_RESYNC_TRACKED;
}

static void destroy_ah_req(struct masq_msg_destroy_ah_req *m)
{
	masq_msg_destroy_ah_req_init(m);
	m->hdr.request_id = 10;
	m->body.ah_handle = 5;
}

static void destroy_ah_reply(struct masq_msg_destroy_ah_reply *m)
{
	masq_msg_destroy_ah_reply_init(m);
	m->hdr.request_id = 10;
}

static void resolve_grh_req(struct masq_msg_resolve_grh_req *m)
{
	masq_msg_resolve_grh_req_init(m);
	m->hdr.request_id = 11;
	m->body.src_qp = 0x12;
	v4_mapped(m->body.sgid, 192, 168, 1, 2);
	v4_mapped(m->body.dgid, 192, 168, 1, 1);
}

static void resolve_grh_reply(struct masq_msg_resolve_grh_reply *m)
{
	masq_msg_resolve_grh_reply_init(m);
	m->hdr.request_id = 11;
	v4_mapped(m->body.sgid, 10, 0, 0, 6);
	m->body.sgid_index = 1;
}

static void test_golden_ah(void)
{
	struct masq_msg_create_ah_reply got;
	struct masq_msg_resolve_grh_req r;
	uint8_t buf[MASQ_MAX_MESSAGE];
	size_t n;

	GOLDEN("create_ah_req", masq_msg_create_ah_req, create_ah_req);
	GOLDEN("create_ah_reply", masq_msg_create_ah_reply, create_ah_reply);
	GOLDEN("bind_ah_req", masq_msg_bind_ah_req, bind_ah_req);
	GOLDEN("bind_ah_reply", masq_msg_bind_ah_reply, bind_ah_reply);
	GOLDEN("resync_ah_req", masq_msg_resync_ah_req, resync_ah_req);
	GOLDEN("resync_ah_reply", masq_msg_resync_ah_reply, resync_ah_reply);
	GOLDEN("destroy_ah_req", masq_msg_destroy_ah_req, destroy_ah_req);
	GOLDEN("destroy_ah_reply", masq_msg_destroy_ah_reply, destroy_ah_reply);
	GOLDEN("resolve_grh_req", masq_msg_resolve_grh_req, resolve_grh_req);
	GOLDEN("resolve_grh_reply", masq_msg_resolve_grh_reply, resolve_grh_reply);
	/* Outside the VPC: the app's errno comes from the header alone. */
	n = load("create_ah_reply_ehostunreach", buf, sizeof(buf));
	CHECK_EQ(n, sizeof(struct masq_hdr));
	CHECK_EQ(masq_msg_create_ah_reply_decode(buf, n, &got), -EHOSTUNREACH);
	/* A QPN has 24 bits. */
	resolve_grh_req(&r);
	CHECK_EQ(masq_resolve_grh_req_validate(&r.body), 0);
	r.body.src_qp = 0x1000000;
	CHECK_EQ(masq_resolve_grh_req_validate(&r.body), -EINVAL);
}

static void test_golden_hello(void)
{
	GOLDEN("hello_req", masq_msg_hello_req, hello_req);
	GOLDEN("hello_reply", masq_msg_hello_reply, hello_reply);
}

static void test_golden_open_device(void)
{
	GOLDEN("open_device_req", masq_msg_open_device_req, open_device_req);
	GOLDEN("open_device_reply", masq_msg_open_device_reply, open_device_reply);
}

static void test_golden_query_gid_table(void)
{
	GOLDEN("query_gid_table_req", masq_msg_query_gid_table_req, query_gid_table_req);
	GOLDEN("query_gid_table_reply", masq_msg_query_gid_table_reply, query_gid_table_reply);
}

static void test_golden_modify_qp(void)
{
	GOLDEN("modify_qp_req", masq_msg_modify_qp_req, modify_qp_req);
	GOLDEN("modify_qp_reply", masq_msg_modify_qp_reply, modify_qp_reply);
}

static void test_golden_query_qp(void)
{
	GOLDEN("query_qp_req", masq_msg_query_qp_req, query_qp_req);
	GOLDEN("query_qp_reply", masq_msg_query_qp_reply, query_qp_reply);
}

static void test_golden_destroy_qp(void)
{
	GOLDEN("destroy_qp_req", masq_msg_destroy_qp_req, destroy_qp_req);
	GOLDEN("destroy_qp_reply", masq_msg_destroy_qp_reply, destroy_qp_reply);
}

static void test_golden_posted(void)
{
	struct masq_msg_qp_moved_req r;

	GOLDEN("qp_moved_req", masq_msg_qp_moved_req, qp_moved_req);
	GOLDEN("qp_destroyed_req", masq_msg_qp_destroyed_req, qp_destroyed_req);
	CHECK(masq_opcode_is_posted(MASQ_OP_QP_MOVED));
	CHECK(masq_opcode_is_posted(MASQ_OP_QP_DESTROYED));
	CHECK(!masq_opcode_is_posted(MASQ_OP_MODIFY_QP));
	CHECK(!masq_opcode_is_posted(MASQ_OP_RESOLVE_GRH));
	qp_moved_req(&r);
	CHECK_EQ(masq_qp_moved_req_validate(&r.body), 0);
	r.body.qp_state = 7;
	CHECK_EQ(masq_qp_moved_req_validate(&r.body), -EINVAL);
}

static void test_golden_resync_qp(void)
{
	struct masq_msg_resync_qp_req r;

	GOLDEN("resync_qp_req", masq_msg_resync_qp_req, resync_qp_req);
	GOLDEN("resync_qp_reply", masq_msg_resync_qp_reply, resync_qp_reply);
	/* The frontend checks its own request like masqd does. */
	resync_qp_req(&r);
	CHECK_EQ(masq_resync_qp_req_validate(&r.body), 0);
	r.body.has_route = 2;
	CHECK_EQ(masq_resync_qp_req_validate(&r.body), -EINVAL);
	resync_qp_req(&r);
	r.body.reserved[1] = 1;
	CHECK_EQ(masq_resync_qp_req_validate(&r.body), -EINVAL);
}

static void test_golden_notice(void)
{
	GOLDEN("qp_error_notice", masq_msg_qp_error_notice, qp_error_notice);
}

static void test_golden_error_reply(void)
{
	struct masq_msg_modify_qp_reply got;
	struct masq_hdr want;
	uint8_t buf[MASQ_MAX_MESSAGE];
	size_t n = load("modify_qp_reply_eacces", buf, sizeof(buf));

	masq_hdr_init(&want, MASQ_OP_MODIFY_QP | MASQ_REPLY, sizeof(want));
	want.request_id = 9;
	want.status = -EACCES;
	CHECK_EQ(n, sizeof(want));
	same_bytes("modify_qp_reply_eacces", &want, buf, sizeof(want));
	CHECK_EQ(masq_msg_modify_qp_reply_decode(buf, n, &got), -EACCES);
	CHECK_EQ(got.hdr.request_id, 9);
	/* An error reply to a request with a reply body: still header-only. */
	{
		struct masq_msg_query_qp_reply q;

		CHECK_EQ(masq_msg_query_qp_reply_decode(buf, n, &q), -EPROTO); /* opcode */
		((struct masq_hdr *)buf)->opcode = MASQ_OP_QUERY_QP | MASQ_REPLY;
		CHECK_EQ(masq_msg_query_qp_reply_decode(buf, n, &q), -EACCES);
	}
}

#define GOLDEN_CM(name) GOLDEN(#name, masq_msg_##name, name)

static void test_golden_cm(void)
{
	GOLDEN_CM(cm_create_channel_req);
	GOLDEN_CM(cm_create_channel_reply);
	GOLDEN_CM(cm_destroy_channel_req);
	GOLDEN_CM(cm_destroy_channel_reply);
	GOLDEN_CM(cm_create_id_req);
	GOLDEN_CM(cm_create_id_reply);
	GOLDEN_CM(cm_destroy_id_req);
	GOLDEN_CM(cm_destroy_id_reply);
	GOLDEN_CM(cm_migrate_id_req);
	GOLDEN_CM(cm_migrate_id_reply);
	GOLDEN_CM(cm_bind_addr_req);
	GOLDEN_CM(cm_bind_addr_reply);
	GOLDEN_CM(cm_resolve_addr_req);
	GOLDEN_CM(cm_resolve_addr_reply);
	GOLDEN_CM(cm_resolve_route_req);
	GOLDEN_CM(cm_resolve_route_reply);
	GOLDEN_CM(cm_listen_req);
	GOLDEN_CM(cm_listen_reply);
	GOLDEN_CM(cm_connect_req);
	GOLDEN_CM(cm_connect_reply);
	GOLDEN_CM(cm_accept_req);
	GOLDEN_CM(cm_accept_reply);
	GOLDEN_CM(cm_reject_req);
	GOLDEN_CM(cm_reject_reply);
	GOLDEN_CM(cm_disconnect_req);
	GOLDEN_CM(cm_disconnect_reply);
	GOLDEN_CM(cm_init_qp_attr_req);
	GOLDEN_CM(cm_init_qp_attr_reply);
	GOLDEN_CM(cm_establish_req);
	GOLDEN_CM(cm_establish_reply);
	GOLDEN_CM(cm_restore_channel_req);
	GOLDEN_CM(cm_restore_channel_reply);
	GOLDEN_CM(cm_restore_id_req);
	GOLDEN_CM(cm_restore_id_reply);
	GOLDEN_CM(cm_accept_qp_req);
	GOLDEN_CM(cm_accept_qp_reply);
	GOLDEN_CM(cm_establish_qp_req);
	GOLDEN_CM(cm_establish_qp_reply);
	GOLDEN("cm_event_notice", masq_msg_cm_event_notice, cm_event_notice);
}

/* What the frontend relies on when it reads CM replies and events. */
static void test_cm_fields(void)
{
	struct masq_msg_cm_event_notice ev, e;
	struct masq_msg_cm_create_id_req ci;
	struct masq_msg_cm_init_qp_attr_req qa;

	_Static_assert(MASQ_CM_PS_TCP == 0x0106, "RDMA_PS_TCP");
	cm_event_notice(&ev);
	CHECK_EQ(masq_msg_cm_event_notice_decode(&ev, sizeof(ev), &e), 0);
	ev.body.param.private_data_len = MASQ_CM_MAX_PRIVATE_DATA + 1;
	CHECK_EQ(masq_msg_cm_event_notice_decode(&ev, sizeof(ev), &e), -EINVAL);
	cm_event_notice(&ev);
	ev.body.param.private_data[10] = 1; /* beyond the 4 bytes in use */
	CHECK_EQ(masq_msg_cm_event_notice_decode(&ev, sizeof(ev), &e), -EINVAL);
	cm_event_notice(&ev);
	ev.body.event = MASQ_CM_EVENT_TIMEWAIT_EXIT + 1;
	CHECK_EQ(masq_msg_cm_event_notice_decode(&ev, sizeof(ev), &e), -EINVAL);
	cm_event_notice(&ev);
	ev.body.addrs.dst.reserved[0] = 1;
	CHECK_EQ(masq_msg_cm_event_notice_decode(&ev, sizeof(ev), &e), -EINVAL);
	cm_event_notice(&ev);
	ev.hdr.request_id = 5; /* notices have none */
	CHECK_EQ(masq_msg_cm_event_notice_decode(&ev, sizeof(ev), &e), -EPROTO);

	cm_create_id_req(&ci);
	CHECK_EQ(masq_cm_create_id_req_validate(&ci.body), 0);
	ci.body.port_space = 0x0002; /* RDMA_PS_IPOIB: not served */
	CHECK_EQ(masq_cm_create_id_req_validate(&ci.body), -EINVAL);
	cm_init_qp_attr_req(&qa);
	qa.body.qp_state = IBV_QPS_ERR;
	CHECK_EQ(masq_cm_init_qp_attr_req_validate(&qa.body), -EINVAL);
}

static void test_framing(void)
{
	struct masq_msg_hello_reply good, m;
	uint8_t buf[MASQ_MAX_MESSAGE + 16];
	struct masq_hdr *h = (struct masq_hdr *)buf;

	hello_reply(&good);
	memcpy(buf, &good, sizeof(good));
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good), &m), 0);
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good) - 1, &m), -EPROTO);
	CHECK_EQ(masq_msg_hello_reply_decode(buf, 15, &m), -EPROTO);
	CHECK_EQ(masq_msg_hello_reply_decode(buf, 0, &m), -EPROTO);
	/* Longer than the protocol allows, even if the length field agrees. */
	memset(buf + sizeof(good), 0, sizeof(buf) - sizeof(good));
	h->length = sizeof(buf);
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(buf), &m), -EPROTO);
	h->length = sizeof(good) + 4;
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good) + 4, &m), -EPROTO);
	h->length = sizeof(good);

	h->version = MASQ_VERSION + 1;
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good), &m), -EPROTONOSUPPORT);
	h->version = MASQ_VERSION;
	h->opcode = MASQ_OP_HELLO; /* a request, not its reply */
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good), &m), -EPROTO);
	h->opcode = MASQ_OP_HELLO | MASQ_REPLY;
	h->status = 5;
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good), &m), -EPROTO);
	h->status = -EINVAL; /* error status but a body */
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good), &m), -EPROTO);
	h->status = 0;
	CHECK_EQ(masq_msg_hello_reply_decode(buf, sizeof(good), &m), 0);

	CHECK(masq_opcode_is_notice(MASQ_NOTICE_QP_ERROR));
	CHECK(!masq_opcode_is_notice(MASQ_OP_HELLO | MASQ_REPLY));
	CHECK(masq_opcode_is_reply(MASQ_OP_HELLO | MASQ_REPLY));
}

static void test_fields(void)
{
	struct masq_msg_hello_req hq, mq;
	struct masq_msg_hello_reply hr, m;
	struct masq_msg_query_gid_table_reply gt, g;
	struct masq_msg_query_qp_reply qr, q;
	struct masq_msg_qp_error_notice nt, n;
	struct masq_msg_modify_qp_req mr;

	hello_req(&hq);
	hq.body.vdev = 7; /* any device: masqd, not the decoder, checks the range */
	CHECK_EQ(masq_msg_hello_req_decode(&hq, sizeof(hq), &mq), 0);
	CHECK_EQ(mq.body.vdev, 7);
	hq.body.reserved[0] = 1;
	CHECK_EQ(masq_msg_hello_req_decode(&hq, sizeof(hq), &mq), -EINVAL);
	hello_reply(&hr);
	hr.body.vdev_count = 2;
	CHECK_EQ(masq_msg_hello_reply_decode(&hr, sizeof(hr), &m), 0);
	CHECK_EQ(m.body.vdev_count, 2);
	hello_reply(&hr);
	memset(hr.body.vdev_name, 'v', sizeof(hr.body.vdev_name)); /* no NUL */
	CHECK_EQ(masq_msg_hello_reply_decode(&hr, sizeof(hr), &m), -EINVAL);
	hello_reply(&hr);
	hr.body.vdev_name[40] = 'x'; /* after the NUL */
	CHECK_EQ(masq_msg_hello_reply_decode(&hr, sizeof(hr), &m), -EINVAL);
	hello_reply(&hr);
	hr.body.reserved[4] = 1;
	CHECK_EQ(masq_msg_hello_reply_decode(&hr, sizeof(hr), &m), -EINVAL);
	hello_reply(&hr);
	hr.body.gid_count = MASQ_MAX_GIDS + 1;
	CHECK_EQ(masq_msg_hello_reply_decode(&hr, sizeof(hr), &m), -EINVAL);

	query_gid_table_reply(&gt);
	gt.body.count = MASQ_MAX_GIDS + 1;
	CHECK_EQ(masq_msg_query_gid_table_reply_decode(&gt, sizeof(gt), &g), -EINVAL);
	gt.body.count = 0xffffffffu;
	CHECK_EQ(masq_msg_query_gid_table_reply_decode(&gt, sizeof(gt), &g), -EINVAL);
	gt.body.count = 1; /* entry 1 is then an unused slot, and not zero */
	CHECK_EQ(masq_msg_query_gid_table_reply_decode(&gt, sizeof(gt), &g), -EINVAL);
	gt.body.count = MASQ_MAX_GIDS;
	CHECK_EQ(masq_msg_query_gid_table_reply_decode(&gt, sizeof(gt), &g), 0);
	query_gid_table_reply(&gt);
	gt.body.entries[1].gid_type = IBV_GID_TYPE_ROCE_V2 + 1;
	CHECK_EQ(masq_msg_query_gid_table_reply_decode(&gt, sizeof(gt), &g), -EINVAL);

	query_qp_reply(&qr);
	qr.body.qp_state = IBV_QPS_ERR;
	CHECK_EQ(masq_msg_query_qp_reply_decode(&qr, sizeof(qr), &q), 0);
	qr.body.qp_state = IBV_QPS_UNKNOWN;
	CHECK_EQ(masq_msg_query_qp_reply_decode(&qr, sizeof(qr), &q), -EINVAL);
	query_qp_reply(&qr);
	qr.body.path_mtu = IBV_MTU_4096;
	qr.body.path_mig_state = IBV_MIG_ARMED;
	CHECK_EQ(masq_msg_query_qp_reply_decode(&qr, sizeof(qr), &q), 0);
	qr.body.path_mtu = IBV_MTU_4096 + 1;
	CHECK_EQ(masq_msg_query_qp_reply_decode(&qr, sizeof(qr), &q), -EINVAL);
	query_qp_reply(&qr);
	qr.body.ah_attr.flow_label = 1u << 20;
	CHECK_EQ(masq_msg_query_qp_reply_decode(&qr, sizeof(qr), &q), -EINVAL);
	query_qp_reply(&qr);
	qr.body.ah_attr.reserved[1] = 1;
	CHECK_EQ(masq_msg_query_qp_reply_decode(&qr, sizeof(qr), &q), -EINVAL);

	modify_qp_req(&mr);
	CHECK_EQ(masq_modify_qp_req_validate(&mr.body), 0);
	{
		static const uint32_t ok[] = { IBV_QPT_RC,	 IBV_QPT_UC,	   IBV_QPT_UD,
					       IBV_QPT_RAW_PACKET, IBV_QPT_XRC_SEND, IBV_QPT_XRC_RECV,
					       IBV_QPT_DRIVER };
		size_t i;

		for (i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
			mr.body.qp_type = ok[i];
			CHECK_EQ(masq_modify_qp_req_validate(&mr.body), 0);
		}
		mr.body.qp_type = 5;
		CHECK_EQ(masq_modify_qp_req_validate(&mr.body), -EINVAL);
	}

	qp_error_notice(&nt);
	nt.hdr.request_id = 3;
	CHECK_EQ(masq_msg_qp_error_notice_decode(&nt, sizeof(nt), &n), -EPROTO);
	qp_error_notice(&nt);
	nt.body.reason = 3;
	CHECK_EQ(masq_msg_qp_error_notice_decode(&nt, sizeof(nt), &n), -EINVAL);
	nt.body.reason = MASQ_QP_ERROR_OPERATOR_TEARDOWN;
	CHECK_EQ(masq_msg_qp_error_notice_decode(&nt, sizeof(nt), &n), 0);
}

static void test_copy_name(void)
{
	char name[8];

	masq_copy_name(name, sizeof(name), "a\xc3\xa9" "b\tlongername");
	CHECK(memcmp(name, "a??b?lo", 8) == 0);
	memset(name, 'x', sizeof(name));
	masq_copy_name(name, sizeof(name), "ab");
	CHECK(memcmp(name, "ab\0\0\0\0\0\0", 8) == 0);
	CHECK(masq__str_ok(name, sizeof(name)));
}

/* Every decoder on corrupted and truncated copies of every golden file. */
static void test_corruption(void)
{
	static const char *const files[] = {
		"hello_req",	     "hello_reply",	   "open_device_req",
		"open_device_reply", "query_gid_table_req", "query_gid_table_reply",
		"modify_qp_req",     "modify_qp_reply",	   "modify_qp_reply_eacces",
		"query_qp_req",	     "query_qp_reply",	   "destroy_qp_req",
		"destroy_qp_reply",  "qp_error_notice",	   "cm_create_channel_reply",
		"cm_create_id_reply", "cm_bind_addr_reply",  "cm_resolve_addr_reply",
		"cm_init_qp_attr_reply", "cm_event_notice", "create_ah_req",
		"create_ah_reply", "resolve_grh_req", "resolve_grh_reply",
	};
	static const uint8_t flips[] = { 0x01, 0x80, 0xff };
	union {
		struct masq_msg_hello_req a;
		struct masq_msg_hello_reply b;
		struct masq_msg_query_gid_table_reply c;
		struct masq_msg_query_qp_reply d;
		struct masq_msg_modify_qp_req e;
		struct masq_msg_qp_error_notice f;
		struct masq_msg_cm_create_channel_reply g;
		struct masq_msg_cm_create_id_reply h;
		struct masq_msg_cm_bind_addr_reply i;
		struct masq_msg_cm_init_qp_attr_reply j;
		struct masq_msg_cm_event_notice k;
		struct masq_msg_create_ah_req l;
		struct masq_msg_create_ah_reply m;
		struct masq_msg_resolve_grh_req n;
		struct masq_msg_resolve_grh_reply o;
	} out;
	size_t fi, i, k;
	unsigned long accepted = 0;

	for (fi = 0; fi < sizeof(files) / sizeof(files[0]); fi++) {
		uint8_t good[MASQ_MAX_MESSAGE], *b;
		size_t n = load(files[fi], good, sizeof(good));

		for (i = 0; i <= n * 3; i++) {
			size_t len = i < n * 3 ? n : n / 2;

			/* A heap copy of exactly len bytes so ASan sees overreads. */
			b = malloc(len ? len : 1);
			if (!b)
				abort();
			memcpy(b, good, len);
			if (i < n * 3)
				b[i / 3] ^= flips[i % 3];
			for (k = 0; k < 2; k++) {
				size_t l = k ? len / 2 : len;

				accepted += !masq_msg_hello_req_decode(b, l, &out.a);
				accepted += !masq_msg_hello_reply_decode(b, l, &out.b);
				accepted += !masq_msg_query_gid_table_reply_decode(b, l, &out.c);
				accepted += !masq_msg_query_qp_reply_decode(b, l, &out.d);
				accepted += !masq_msg_modify_qp_req_decode(b, l, &out.e);
				accepted += !masq_msg_qp_error_notice_decode(b, l, &out.f);
				accepted += !masq_msg_cm_create_channel_reply_decode(b, l, &out.g);
				accepted += !masq_msg_cm_create_id_reply_decode(b, l, &out.h);
				accepted += !masq_msg_cm_bind_addr_reply_decode(b, l, &out.i);
				accepted += !masq_msg_cm_init_qp_attr_reply_decode(b, l, &out.j);
				accepted += !masq_msg_cm_event_notice_decode(b, l, &out.k);
				accepted += !masq_msg_create_ah_req_decode(b, l, &out.l);
				accepted += !masq_msg_create_ah_reply_decode(b, l, &out.m);
				accepted += !masq_msg_resolve_grh_req_decode(b, l, &out.n);
				accepted += !masq_msg_resolve_grh_reply_decode(b, l, &out.o);
			}
			free(b);
		}
	}
	/* Flips of value bytes (names, GIDs, numbers) still decode. */
	CHECK(accepted > 0);
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : getenv("MASQ_GOLDEN_DIR");

	if (dir) {
		snprintf(golden_dir, sizeof(golden_dir), "%s", dir);
	} else {
		const char *slash = strrchr(__FILE__, '/');
		int len = slash ? (int)(slash - __FILE__) : 1;

		snprintf(golden_dir, sizeof(golden_dir), "%.*s/../../backend/proto/golden", len,
			 slash ? __FILE__ : ".");
	}

	run("golden_hello", test_golden_hello);
	run("golden_open_device", test_golden_open_device);
	run("golden_query_gid_table", test_golden_query_gid_table);
	run("golden_modify_qp", test_golden_modify_qp);
	run("golden_query_qp", test_golden_query_qp);
	run("golden_destroy_qp", test_golden_destroy_qp);
	run("golden_posted", test_golden_posted);
	run("golden_resync_qp", test_golden_resync_qp);
	run("golden_ah", test_golden_ah);
	run("golden_notice", test_golden_notice);
	run("golden_error_reply", test_golden_error_reply);
	run("golden_cm", test_golden_cm);
	run("cm_fields", test_cm_fields);
	run("framing", test_framing);
	run("fields", test_fields);
	run("copy_name", test_copy_name);
	run("corruption", test_corruption);

	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
