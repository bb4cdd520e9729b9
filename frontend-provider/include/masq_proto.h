/*
 * masq frontend <-> backend protocol.
 *
 * GENERATED from backend/proto/src/spec.rs by
 *   cargo run -p masq-proto --bin masq-proto-gen-c > frontend-provider/include/masq_proto.h
 * Do not edit; `cargo test -p masq-proto` fails when this file is stale.
 *
 * One message per SOCK_SEQPACKET datagram: struct masq_hdr, then a
 * fixed-size little-endian body. The structs here are the wire layout
 * (natural alignment, explicit reserved bytes), so a message is sent with
 * write(fd, &m, sizeof(m)) after masq_msg_*_init() and received with
 * masq_msg_*_decode(), which checks the framing and every field.
 */
#ifndef MASQ_PROTO_H
#define MASQ_PROTO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "masq structs are the little-endian wire layout");

/* Protocol version carried in every header. */
#define MASQ_VERSION 2
/* Largest datagram either side sends or accepts. */
#define MASQ_MAX_MESSAGE 4096
/* Size of the common header. */
#define MASQ_HEADER_SIZE 16
/* Reply opcode = request opcode | REPLY. */
#define MASQ_REPLY 0x8000
/* Opcodes from here (below REPLY) are asynchronous notices. */
#define MASQ_NOTICE_BASE 0x4000
/*
 * Requests with opcodes POSTED_FIRST..=POSTED_LAST are posted: the
 * frontend does not wait and the backend sends no reply, not even an
 * error (it logs and counts a refusal instead).
 */
#define MASQ_POSTED_FIRST 12
#define MASQ_POSTED_LAST 15
/* Feature bit: the frontend accepts asynchronous notices. */
#define MASQ_FEATURE_NOTICES 1
/*
 * Feature bit: the backend takes posted requests (QP_MOVED,
 * QP_DESTROYED), so the frontend may move QPs on its own fd.
 */
#define MASQ_FEATURE_POSTED 2
/* Features this implementation understands. */
#define MASQ_SUPPORTED_FEATURES 3
/* Capacity of the GID table reply. */
#define MASQ_MAX_GIDS 16
/* GID types, as in enum ibv_gid_type. */
#define MASQ_GID_TYPE_IB 0
#define MASQ_GID_TYPE_ROCE_V1 1
#define MASQ_GID_TYPE_ROCE_V2 2
/* QP_ERROR notice reasons. */
#define MASQ_QP_ERROR_POLICY_RESET 1
#define MASQ_QP_ERROR_OPERATOR_TEARDOWN 2
/* RESYNC_QP results: the QP is not connected, nothing to track. */
#define MASQ_RESYNC_UNTRACKED 0
/* The QP is connected and tracked again. */
#define MASQ_RESYNC_TRACKED 1
/*
 * masqd moved the QP to ERROR: the current policy denies it, or its
 * destination in the kernel is not the one claimed.
 */
#define MASQ_RESYNC_RESET 2
/*
 * RDMA CM port spaces masq serves: RDMA_PS_TCP (RC QPs) and
 * RDMA_PS_UDP (UD QPs; the IB CM's SIDR exchange).
 */
#define MASQ_CM_PS_TCP 262
#define MASQ_CM_PS_UDP 273
/* The Q_Key of every RDMA_PS_UDP id (the kernel's RDMA_UDP_QKEY). */
#define MASQ_CM_UDP_QKEY 0x1234567
/*
 * Private data a CM message can carry (the IB CM limits once the
 * RDMA CM header is taken out): REQ, REJ, and REP/the cap.
 */
#define MASQ_CM_REQ_PRIVATE_DATA 56
#define MASQ_CM_REJ_PRIVATE_DATA 148
#define MASQ_CM_MAX_PRIVATE_DATA 196
/* The same for a UD id's SIDR REQ and REP. */
#define MASQ_CM_SIDR_REQ_PRIVATE_DATA 180
#define MASQ_CM_SIDR_REP_PRIVATE_DATA 136
/*
 * SIDR REP statuses, the UNREACHABLE event's status on a UD id: no
 * listener on the port, and a reject by the peer app.
 */
#define MASQ_CM_SIDR_UNSUPPORTED 1
#define MASQ_CM_SIDR_REJECT 2
/* enum rdma_cm_event_type, as librdmacm numbers it. */
#define MASQ_CM_EVENT_ADDR_RESOLVED 0
#define MASQ_CM_EVENT_ADDR_ERROR 1
#define MASQ_CM_EVENT_ROUTE_RESOLVED 2
#define MASQ_CM_EVENT_ROUTE_ERROR 3
#define MASQ_CM_EVENT_CONNECT_REQUEST 4
#define MASQ_CM_EVENT_CONNECT_RESPONSE 5
#define MASQ_CM_EVENT_CONNECT_ERROR 6
#define MASQ_CM_EVENT_UNREACHABLE 7
#define MASQ_CM_EVENT_REJECTED 8
#define MASQ_CM_EVENT_ESTABLISHED 9
#define MASQ_CM_EVENT_DISCONNECTED 10
#define MASQ_CM_EVENT_TIMEWAIT_EXIT 15
/*
 * IB CM reject reasons carried as the REJECTED event's status: no
 * listener on the port, and a reject by the peer app.
 */
#define MASQ_CM_REJ_INVALID_SERVICE_ID 8
#define MASQ_CM_REJ_CONSUMER_DEFINED 28
/* CM_RESTORE_ID: what the id was when masqd went away. */
#define MASQ_CM_RESTORE_BOUND 1
#define MASQ_CM_RESTORE_LISTENING 2
#define MASQ_CM_RESTORE_CONNECTED 3
/*
 * A connection was being set up: it is lost (the id gets
 * CONNECT_ERROR with ECONNRESET).
 */
#define MASQ_CM_RESTORE_PENDING 4

#define MASQ_OP_HELLO 1
#define MASQ_OP_OPEN_DEVICE 2
#define MASQ_OP_QUERY_GID_TABLE 3
#define MASQ_OP_MODIFY_QP 4
#define MASQ_OP_QUERY_QP 5
#define MASQ_OP_DESTROY_QP 6
#define MASQ_OP_RESYNC_QP 7
#define MASQ_OP_CREATE_AH 8
#define MASQ_OP_BIND_AH 9
#define MASQ_OP_DESTROY_AH 10
#define MASQ_OP_RESOLVE_GRH 11
#define MASQ_OP_QP_MOVED 12
#define MASQ_OP_QP_DESTROYED 13
#define MASQ_OP_CM_CREATE_CHANNEL 16
#define MASQ_OP_CM_DESTROY_CHANNEL 17
#define MASQ_OP_CM_CREATE_ID 18
#define MASQ_OP_CM_DESTROY_ID 19
#define MASQ_OP_CM_MIGRATE_ID 20
#define MASQ_OP_CM_BIND_ADDR 21
#define MASQ_OP_CM_RESOLVE_ADDR 22
#define MASQ_OP_CM_RESOLVE_ROUTE 23
#define MASQ_OP_CM_LISTEN 24
#define MASQ_OP_CM_CONNECT 25
#define MASQ_OP_CM_ACCEPT 26
#define MASQ_OP_CM_REJECT 27
#define MASQ_OP_CM_DISCONNECT 28
#define MASQ_OP_CM_INIT_QP_ATTR 29
#define MASQ_OP_CM_ESTABLISH 30
#define MASQ_OP_CM_RESTORE_CHANNEL 31
#define MASQ_OP_CM_RESTORE_ID 32
#define MASQ_OP_CM_ACCEPT_QP 33
#define MASQ_OP_CM_ESTABLISH_QP 34
#define MASQ_OP_RESYNC_AH 35
#define MASQ_NOTICE_QP_ERROR 0x4001
#define MASQ_NOTICE_CM_EVENT 0x4002

static inline int masq__zero(const void *p, size_t n)
{
	const uint8_t *b = (const uint8_t *)p;
	size_t i;

	for (i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* A NUL within the field, and only zeros after it. */
static inline int masq__str_ok(const char *s, size_t n)
{
	const char *nul = (const char *)memchr(s, 0, n);

	return nul && masq__zero(nul, n - (size_t)(nul - s));
}

/*
 * Fill a name field of size n from src: printable ASCII kept, other bytes
 * turned into '?' (names must be UTF-8), cut at n - 1, zero tail.
 */
static inline void masq_copy_name(char *dst, size_t n, const char *src)
{
	size_t i = 0;

	for (; i + 1 < n && src[i]; i++)
		dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
	memset(dst + i, 0, n - i);
}

/* The common header of every message. */
struct masq_hdr {
	uint16_t version;
	uint16_t opcode;
	uint32_t length; /* Whole message, header included. */
	uint32_t request_id;
	int32_t status; /* 0, or a negative errno in a reply (which then has no body). */
};
_Static_assert(sizeof(struct masq_hdr) == 16, "masq_hdr: size");
_Static_assert(offsetof(struct masq_hdr, version) == 0, "masq_hdr.version: offset");
_Static_assert(offsetof(struct masq_hdr, opcode) == 2, "masq_hdr.opcode: offset");
_Static_assert(offsetof(struct masq_hdr, length) == 4, "masq_hdr.length: offset");
_Static_assert(offsetof(struct masq_hdr, request_id) == 8, "masq_hdr.request_id: offset");
_Static_assert(offsetof(struct masq_hdr, status) == 12, "masq_hdr.status: offset");

struct masq_hello_req {
	uint32_t features; /* FEATURE_* bits the frontend supports. */
	uint8_t vdev; /* Which of the endpoint's virtual devices the session serves (`vrdmaN`'s N). An older masqd takes only 0 (it checks the byte as reserved): libmasq asks for another only when HELLO on device 0 counted more. */
	uint8_t reserved[3];
	char app_name[32];
};
_Static_assert(sizeof(struct masq_hello_req) == 40, "masq_hello_req: size");
_Static_assert(offsetof(struct masq_hello_req, features) == 0, "masq_hello_req.features: offset");
_Static_assert(offsetof(struct masq_hello_req, vdev) == 4, "masq_hello_req.vdev: offset");
_Static_assert(offsetof(struct masq_hello_req, reserved) == 5, "masq_hello_req.reserved: offset");
_Static_assert(offsetof(struct masq_hello_req, app_name) == 8, "masq_hello_req.app_name: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_hello_req_validate(const struct masq_hello_req *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (!masq__str_ok(s->app_name, sizeof(s->app_name)))
		return -EINVAL;
	return 0;
}

struct masq_hello_reply {
	uint32_t features; /* The accepted subset of the requested features. */
	uint32_t session_id;
	char vdev_name[64];
	char phys_dev_name[64];
	uint64_t node_guid; /* GUIDs as numbers; verbs shows them big-endian (htobe64). */
	uint64_t sys_image_guid;
	uint8_t phys_port;
	uint8_t gid_count;
	uint8_t vdev_count; /* How many virtual devices the endpoint has, one per rail it is attached to; 0 from an older masqd, which means one. */
	uint8_t reserved[5];
};
_Static_assert(sizeof(struct masq_hello_reply) == 160, "masq_hello_reply: size");
_Static_assert(offsetof(struct masq_hello_reply, features) == 0, "masq_hello_reply.features: offset");
_Static_assert(offsetof(struct masq_hello_reply, session_id) == 4, "masq_hello_reply.session_id: offset");
_Static_assert(offsetof(struct masq_hello_reply, vdev_name) == 8, "masq_hello_reply.vdev_name: offset");
_Static_assert(offsetof(struct masq_hello_reply, phys_dev_name) == 72, "masq_hello_reply.phys_dev_name: offset");
_Static_assert(offsetof(struct masq_hello_reply, node_guid) == 136, "masq_hello_reply.node_guid: offset");
_Static_assert(offsetof(struct masq_hello_reply, sys_image_guid) == 144, "masq_hello_reply.sys_image_guid: offset");
_Static_assert(offsetof(struct masq_hello_reply, phys_port) == 152, "masq_hello_reply.phys_port: offset");
_Static_assert(offsetof(struct masq_hello_reply, gid_count) == 153, "masq_hello_reply.gid_count: offset");
_Static_assert(offsetof(struct masq_hello_reply, vdev_count) == 154, "masq_hello_reply.vdev_count: offset");
_Static_assert(offsetof(struct masq_hello_reply, reserved) == 155, "masq_hello_reply.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_hello_reply_validate(const struct masq_hello_reply *s)
{
	if (!masq__str_ok(s->vdev_name, sizeof(s->vdev_name)))
		return -EINVAL;
	if (!masq__str_ok(s->phys_dev_name, sizeof(s->phys_dev_name)))
		return -EINVAL;
	if (!(s->gid_count <= 16))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

struct masq_query_gid_table_req {
	uint8_t port;
	uint8_t reserved[7];
};
_Static_assert(sizeof(struct masq_query_gid_table_req) == 8, "masq_query_gid_table_req: size");
_Static_assert(offsetof(struct masq_query_gid_table_req, port) == 0, "masq_query_gid_table_req.port: offset");
_Static_assert(offsetof(struct masq_query_gid_table_req, reserved) == 1, "masq_query_gid_table_req.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_query_gid_table_req_validate(const struct masq_query_gid_table_req *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

struct masq_gid_entry {
	uint32_t index;
	uint32_t gid_type; /* enum ibv_gid_type */
	uint8_t gid[16];
};
_Static_assert(sizeof(struct masq_gid_entry) == 24, "masq_gid_entry: size");
_Static_assert(offsetof(struct masq_gid_entry, index) == 0, "masq_gid_entry.index: offset");
_Static_assert(offsetof(struct masq_gid_entry, gid_type) == 4, "masq_gid_entry.gid_type: offset");
_Static_assert(offsetof(struct masq_gid_entry, gid) == 8, "masq_gid_entry.gid: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_gid_entry_validate(const struct masq_gid_entry *s)
{
	if (!(s->gid_type <= 2))
		return -EINVAL;
	return 0;
}

struct masq_gid_table {
	uint32_t count;
	uint8_t reserved[4];
	struct masq_gid_entry entries[16];
};
_Static_assert(sizeof(struct masq_gid_table) == 392, "masq_gid_table: size");
_Static_assert(offsetof(struct masq_gid_table, count) == 0, "masq_gid_table.count: offset");
_Static_assert(offsetof(struct masq_gid_table, reserved) == 4, "masq_gid_table.reserved: offset");
_Static_assert(offsetof(struct masq_gid_table, entries) == 8, "masq_gid_table.entries: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_gid_table_validate(const struct masq_gid_table *s)
{
	uint32_t i;

	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (s->count > 16)
		return -EINVAL;
	for (i = 0; i < s->count; i++)
		if (masq_gid_entry_validate(&s->entries[i]))
			return -EINVAL;
	if (!masq__zero(&s->entries[s->count], (16 - s->count) * sizeof(s->entries[0])))
		return -EINVAL;
	return 0;
}

/* struct ibv_qp_cap */
struct masq_qp_cap {
	uint32_t max_send_wr;
	uint32_t max_recv_wr;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	uint32_t max_inline_data;
};
_Static_assert(sizeof(struct masq_qp_cap) == 20, "masq_qp_cap: size");
_Static_assert(offsetof(struct masq_qp_cap, max_send_wr) == 0, "masq_qp_cap.max_send_wr: offset");
_Static_assert(offsetof(struct masq_qp_cap, max_recv_wr) == 4, "masq_qp_cap.max_recv_wr: offset");
_Static_assert(offsetof(struct masq_qp_cap, max_send_sge) == 8, "masq_qp_cap.max_send_sge: offset");
_Static_assert(offsetof(struct masq_qp_cap, max_recv_sge) == 12, "masq_qp_cap.max_recv_sge: offset");
_Static_assert(offsetof(struct masq_qp_cap, max_inline_data) == 16, "masq_qp_cap.max_inline_data: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_qp_cap_validate(const struct masq_qp_cap *s)
{
	(void)s;
	return 0;
}

/* struct ibv_ah_attr with its global route flattened in. */
struct masq_ah_attr {
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t sgid_index;
	uint8_t hop_limit;
	uint8_t traffic_class;
	uint8_t is_global;
	uint16_t dlid;
	uint8_t sl;
	uint8_t src_path_bits;
	uint8_t static_rate;
	uint8_t port_num;
	uint8_t reserved[2];
};
_Static_assert(sizeof(struct masq_ah_attr) == 32, "masq_ah_attr: size");
_Static_assert(offsetof(struct masq_ah_attr, dgid) == 0, "masq_ah_attr.dgid: offset");
_Static_assert(offsetof(struct masq_ah_attr, flow_label) == 16, "masq_ah_attr.flow_label: offset");
_Static_assert(offsetof(struct masq_ah_attr, sgid_index) == 20, "masq_ah_attr.sgid_index: offset");
_Static_assert(offsetof(struct masq_ah_attr, hop_limit) == 21, "masq_ah_attr.hop_limit: offset");
_Static_assert(offsetof(struct masq_ah_attr, traffic_class) == 22, "masq_ah_attr.traffic_class: offset");
_Static_assert(offsetof(struct masq_ah_attr, is_global) == 23, "masq_ah_attr.is_global: offset");
_Static_assert(offsetof(struct masq_ah_attr, dlid) == 24, "masq_ah_attr.dlid: offset");
_Static_assert(offsetof(struct masq_ah_attr, sl) == 26, "masq_ah_attr.sl: offset");
_Static_assert(offsetof(struct masq_ah_attr, src_path_bits) == 27, "masq_ah_attr.src_path_bits: offset");
_Static_assert(offsetof(struct masq_ah_attr, static_rate) == 28, "masq_ah_attr.static_rate: offset");
_Static_assert(offsetof(struct masq_ah_attr, port_num) == 29, "masq_ah_attr.port_num: offset");
_Static_assert(offsetof(struct masq_ah_attr, reserved) == 30, "masq_ah_attr.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_ah_attr_validate(const struct masq_ah_attr *s)
{
	if (!(s->flow_label <= 0xFFFFF))
		return -EINVAL;
	if (!(s->is_global <= 1))
		return -EINVAL;
	if (!(s->sl <= 15))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * The fields of struct ibv_qp_attr that masq carries. A sender copies
 * only the fields named in the attribute mask and zeroes the others.
 */
struct masq_qp_attr {
	uint8_t qp_state; /* enum ibv_qp_state, RESET..ERR */
	uint8_t cur_qp_state;
	uint8_t path_mtu; /* enum ibv_mtu (0 when unset) */
	uint8_t path_mig_state; /* enum ibv_mig_state */
	uint32_t qkey;
	uint32_t rq_psn;
	uint32_t sq_psn;
	uint32_t dest_qp_num;
	uint32_t qp_access_flags;
	uint16_t pkey_index;
	uint8_t en_sqd_async_notify;
	uint8_t sq_draining;
	uint8_t max_rd_atomic;
	uint8_t max_dest_rd_atomic;
	uint8_t min_rnr_timer; /* 5-bit IB encoding */
	uint8_t port_num;
	uint8_t timeout; /* 5-bit IB encoding */
	uint8_t retry_cnt;
	uint8_t rnr_retry; /* 7 = retry forever */
	uint8_t reserved[1];
	uint32_t rate_limit;
	struct masq_qp_cap cap;
	struct masq_ah_attr ah_attr;
};
_Static_assert(sizeof(struct masq_qp_attr) == 92, "masq_qp_attr: size");
_Static_assert(offsetof(struct masq_qp_attr, qp_state) == 0, "masq_qp_attr.qp_state: offset");
_Static_assert(offsetof(struct masq_qp_attr, cur_qp_state) == 1, "masq_qp_attr.cur_qp_state: offset");
_Static_assert(offsetof(struct masq_qp_attr, path_mtu) == 2, "masq_qp_attr.path_mtu: offset");
_Static_assert(offsetof(struct masq_qp_attr, path_mig_state) == 3, "masq_qp_attr.path_mig_state: offset");
_Static_assert(offsetof(struct masq_qp_attr, qkey) == 4, "masq_qp_attr.qkey: offset");
_Static_assert(offsetof(struct masq_qp_attr, rq_psn) == 8, "masq_qp_attr.rq_psn: offset");
_Static_assert(offsetof(struct masq_qp_attr, sq_psn) == 12, "masq_qp_attr.sq_psn: offset");
_Static_assert(offsetof(struct masq_qp_attr, dest_qp_num) == 16, "masq_qp_attr.dest_qp_num: offset");
_Static_assert(offsetof(struct masq_qp_attr, qp_access_flags) == 20, "masq_qp_attr.qp_access_flags: offset");
_Static_assert(offsetof(struct masq_qp_attr, pkey_index) == 24, "masq_qp_attr.pkey_index: offset");
_Static_assert(offsetof(struct masq_qp_attr, en_sqd_async_notify) == 26, "masq_qp_attr.en_sqd_async_notify: offset");
_Static_assert(offsetof(struct masq_qp_attr, sq_draining) == 27, "masq_qp_attr.sq_draining: offset");
_Static_assert(offsetof(struct masq_qp_attr, max_rd_atomic) == 28, "masq_qp_attr.max_rd_atomic: offset");
_Static_assert(offsetof(struct masq_qp_attr, max_dest_rd_atomic) == 29, "masq_qp_attr.max_dest_rd_atomic: offset");
_Static_assert(offsetof(struct masq_qp_attr, min_rnr_timer) == 30, "masq_qp_attr.min_rnr_timer: offset");
_Static_assert(offsetof(struct masq_qp_attr, port_num) == 31, "masq_qp_attr.port_num: offset");
_Static_assert(offsetof(struct masq_qp_attr, timeout) == 32, "masq_qp_attr.timeout: offset");
_Static_assert(offsetof(struct masq_qp_attr, retry_cnt) == 33, "masq_qp_attr.retry_cnt: offset");
_Static_assert(offsetof(struct masq_qp_attr, rnr_retry) == 34, "masq_qp_attr.rnr_retry: offset");
_Static_assert(offsetof(struct masq_qp_attr, reserved) == 35, "masq_qp_attr.reserved: offset");
_Static_assert(offsetof(struct masq_qp_attr, rate_limit) == 36, "masq_qp_attr.rate_limit: offset");
_Static_assert(offsetof(struct masq_qp_attr, cap) == 40, "masq_qp_attr.cap: offset");
_Static_assert(offsetof(struct masq_qp_attr, ah_attr) == 60, "masq_qp_attr.ah_attr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_qp_attr_validate(const struct masq_qp_attr *s)
{
	if (!(s->qp_state <= 6))
		return -EINVAL;
	if (!(s->cur_qp_state <= 6))
		return -EINVAL;
	if (!(s->path_mtu <= 5))
		return -EINVAL;
	if (!(s->path_mig_state <= 2))
		return -EINVAL;
	if (!(s->en_sqd_async_notify <= 1))
		return -EINVAL;
	if (!(s->sq_draining <= 1))
		return -EINVAL;
	if (!(s->min_rnr_timer <= 31))
		return -EINVAL;
	if (!(s->timeout <= 31))
		return -EINVAL;
	if (!(s->retry_cnt <= 7))
		return -EINVAL;
	if (!(s->rnr_retry <= 7))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (masq_qp_cap_validate(&s->cap))
		return -EINVAL;
	if (masq_ah_attr_validate(&s->ah_attr))
		return -EINVAL;
	return 0;
}

struct masq_modify_qp_req {
	uint32_t qp_handle;
	uint32_t qp_num;
	uint32_t qp_type; /* enum ibv_qp_type: RC, UC, UD, RAW_PACKET, XRC_SEND, XRC_RECV, DRIVER */
	uint32_t attr_mask; /* enum ibv_qp_attr_mask bits */
	struct masq_qp_attr attr;
};
_Static_assert(sizeof(struct masq_modify_qp_req) == 108, "masq_modify_qp_req: size");
_Static_assert(offsetof(struct masq_modify_qp_req, qp_handle) == 0, "masq_modify_qp_req.qp_handle: offset");
_Static_assert(offsetof(struct masq_modify_qp_req, qp_num) == 4, "masq_modify_qp_req.qp_num: offset");
_Static_assert(offsetof(struct masq_modify_qp_req, qp_type) == 8, "masq_modify_qp_req.qp_type: offset");
_Static_assert(offsetof(struct masq_modify_qp_req, attr_mask) == 12, "masq_modify_qp_req.attr_mask: offset");
_Static_assert(offsetof(struct masq_modify_qp_req, attr) == 16, "masq_modify_qp_req.attr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_modify_qp_req_validate(const struct masq_modify_qp_req *s)
{
	if (!((s->qp_type >= 2 && s->qp_type <= 4) || (s->qp_type >= 8 && s->qp_type <= 10) || s->qp_type == 255))
		return -EINVAL;
	if (masq_qp_attr_validate(&s->attr))
		return -EINVAL;
	return 0;
}

struct masq_query_qp_req {
	uint32_t qp_handle;
	uint32_t attr_mask;
};
_Static_assert(sizeof(struct masq_query_qp_req) == 8, "masq_query_qp_req: size");
_Static_assert(offsetof(struct masq_query_qp_req, qp_handle) == 0, "masq_query_qp_req.qp_handle: offset");
_Static_assert(offsetof(struct masq_query_qp_req, attr_mask) == 4, "masq_query_qp_req.attr_mask: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_query_qp_req_validate(const struct masq_query_qp_req *s)
{
	(void)s;
	return 0;
}

struct masq_destroy_qp_req {
	uint32_t qp_handle;
	uint32_t qp_num;
};
_Static_assert(sizeof(struct masq_destroy_qp_req) == 8, "masq_destroy_qp_req: size");
_Static_assert(offsetof(struct masq_destroy_qp_req, qp_handle) == 0, "masq_destroy_qp_req.qp_handle: offset");
_Static_assert(offsetof(struct masq_destroy_qp_req, qp_num) == 4, "masq_destroy_qp_req.qp_num: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_destroy_qp_req_validate(const struct masq_destroy_qp_req *s)
{
	(void)s;
	return 0;
}

/*
 * After masqd restarted: a QP the frontend had set up in an earlier
 * session, named again so that masqd tracks it. Only the handle is
 * checked by the kernel (QUERY_QP on the session's fd); masqd reads
 * the state, destination QPN and physical dgid from there and treats
 * the rest as claims to verify.
 */
struct masq_resync_qp_req {
	uint32_t qp_handle;
	uint32_t qp_num;
	uint32_t qp_type; /* enum ibv_qp_type, as in ModifyQpReq */
	uint8_t sgid_index; /* The virtual sgid index the app set with IBV_QP_AV. */
	uint8_t has_route; /* 1 when the app set a destination (then dgid is its virtual dgid). */
	uint8_t reserved[2];
	uint8_t dgid[16];
};
_Static_assert(sizeof(struct masq_resync_qp_req) == 32, "masq_resync_qp_req: size");
_Static_assert(offsetof(struct masq_resync_qp_req, qp_handle) == 0, "masq_resync_qp_req.qp_handle: offset");
_Static_assert(offsetof(struct masq_resync_qp_req, qp_num) == 4, "masq_resync_qp_req.qp_num: offset");
_Static_assert(offsetof(struct masq_resync_qp_req, qp_type) == 8, "masq_resync_qp_req.qp_type: offset");
_Static_assert(offsetof(struct masq_resync_qp_req, sgid_index) == 12, "masq_resync_qp_req.sgid_index: offset");
_Static_assert(offsetof(struct masq_resync_qp_req, has_route) == 13, "masq_resync_qp_req.has_route: offset");
_Static_assert(offsetof(struct masq_resync_qp_req, reserved) == 14, "masq_resync_qp_req.reserved: offset");
_Static_assert(offsetof(struct masq_resync_qp_req, dgid) == 16, "masq_resync_qp_req.dgid: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_resync_qp_req_validate(const struct masq_resync_qp_req *s)
{
	if (!((s->qp_type >= 2 && s->qp_type <= 4) || (s->qp_type >= 8 && s->qp_type <= 10) || s->qp_type == 255))
		return -EINVAL;
	if (!(s->has_route <= 1))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * Posted after the frontend moved one of its QPs itself, on its own
 * uverbs fd (a change that carries no address: see docs/trust-model.md). Only
 * a prompt: masqd reads the QP's state from the kernel, so a false
 * claim changes nothing it records.
 */
struct masq_qp_moved_req {
	uint32_t qp_handle;
	uint32_t qp_num;
	uint32_t qp_type; /* enum ibv_qp_type, as in ModifyQpReq */
	uint32_t attr_mask; /* enum ibv_qp_attr_mask bits the app passed */
	uint8_t qp_state; /* enum ibv_qp_state the app moved the QP to (with IBV_QP_STATE) */
	uint8_t reserved[7];
};
_Static_assert(sizeof(struct masq_qp_moved_req) == 24, "masq_qp_moved_req: size");
_Static_assert(offsetof(struct masq_qp_moved_req, qp_handle) == 0, "masq_qp_moved_req.qp_handle: offset");
_Static_assert(offsetof(struct masq_qp_moved_req, qp_num) == 4, "masq_qp_moved_req.qp_num: offset");
_Static_assert(offsetof(struct masq_qp_moved_req, qp_type) == 8, "masq_qp_moved_req.qp_type: offset");
_Static_assert(offsetof(struct masq_qp_moved_req, attr_mask) == 12, "masq_qp_moved_req.attr_mask: offset");
_Static_assert(offsetof(struct masq_qp_moved_req, qp_state) == 16, "masq_qp_moved_req.qp_state: offset");
_Static_assert(offsetof(struct masq_qp_moved_req, reserved) == 17, "masq_qp_moved_req.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_qp_moved_req_validate(const struct masq_qp_moved_req *s)
{
	if (!((s->qp_type >= 2 && s->qp_type <= 4) || (s->qp_type >= 8 && s->qp_type <= 10) || s->qp_type == 255))
		return -EINVAL;
	if (!(s->qp_state <= 6))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

struct masq_resync_qp_reply {
	uint8_t qp_state; /* enum ibv_qp_state, as the kernel reports it now */
	uint8_t result; /* RESYNC_* result */
	uint8_t reserved[6];
};
_Static_assert(sizeof(struct masq_resync_qp_reply) == 8, "masq_resync_qp_reply: size");
_Static_assert(offsetof(struct masq_resync_qp_reply, qp_state) == 0, "masq_resync_qp_reply.qp_state: offset");
_Static_assert(offsetof(struct masq_resync_qp_reply, result) == 1, "masq_resync_qp_reply.result: offset");
_Static_assert(offsetof(struct masq_resync_qp_reply, reserved) == 2, "masq_resync_qp_reply.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_resync_qp_reply_validate(const struct masq_resync_qp_reply *s)
{
	if (!(s->qp_state <= 6))
		return -EINVAL;
	if (!(s->result <= 2))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * A CM event channel; its event socket rides along as SCM_RIGHTS in
 * the CM_CREATE_CHANNEL reply.
 */
struct masq_cm_channel {
	uint32_t channel;
	uint8_t reserved[4];
};
_Static_assert(sizeof(struct masq_cm_channel) == 8, "masq_cm_channel: size");
_Static_assert(offsetof(struct masq_cm_channel, channel) == 0, "masq_cm_channel.channel: offset");
_Static_assert(offsetof(struct masq_cm_channel, reserved) == 4, "masq_cm_channel.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_channel_validate(const struct masq_cm_channel *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

struct masq_cm_create_id_req {
	uint32_t channel;
	uint32_t port_space; /* enum rdma_port_space: RDMA_PS_TCP or RDMA_PS_UDP */
};
_Static_assert(sizeof(struct masq_cm_create_id_req) == 8, "masq_cm_create_id_req: size");
_Static_assert(offsetof(struct masq_cm_create_id_req, channel) == 0, "masq_cm_create_id_req.channel: offset");
_Static_assert(offsetof(struct masq_cm_create_id_req, port_space) == 4, "masq_cm_create_id_req.port_space: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_create_id_req_validate(const struct masq_cm_create_id_req *s)
{
	if (!(s->port_space == 0x0106 || s->port_space == 0x0111))
		return -EINVAL;
	return 0;
}

struct masq_cm_id {
	uint32_t id;
	uint8_t reserved[4];
};
_Static_assert(sizeof(struct masq_cm_id) == 8, "masq_cm_id: size");
_Static_assert(offsetof(struct masq_cm_id, id) == 0, "masq_cm_id.id: offset");
_Static_assert(offsetof(struct masq_cm_id, reserved) == 4, "masq_cm_id.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_id_validate(const struct masq_cm_id *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

struct masq_cm_migrate_req {
	uint32_t id;
	uint32_t channel;
};
_Static_assert(sizeof(struct masq_cm_migrate_req) == 8, "masq_cm_migrate_req: size");
_Static_assert(offsetof(struct masq_cm_migrate_req, id) == 0, "masq_cm_migrate_req.id: offset");
_Static_assert(offsetof(struct masq_cm_migrate_req, channel) == 4, "masq_cm_migrate_req.channel: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_migrate_req_validate(const struct masq_cm_migrate_req *s)
{
	(void)s;
	return 0;
}

/* An IPv4 socket address: addr in network byte order, port as a number. */
struct masq_cm_addr {
	uint8_t addr[4];
	uint16_t port;
	uint8_t reserved[2];
};
_Static_assert(sizeof(struct masq_cm_addr) == 8, "masq_cm_addr: size");
_Static_assert(offsetof(struct masq_cm_addr, addr) == 0, "masq_cm_addr.addr: offset");
_Static_assert(offsetof(struct masq_cm_addr, port) == 4, "masq_cm_addr.port: offset");
_Static_assert(offsetof(struct masq_cm_addr, reserved) == 6, "masq_cm_addr.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_addr_validate(const struct masq_cm_addr *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

struct masq_cm_bind_req {
	uint32_t id;
	uint8_t reserved[4];
	struct masq_cm_addr addr;
};
_Static_assert(sizeof(struct masq_cm_bind_req) == 16, "masq_cm_bind_req: size");
_Static_assert(offsetof(struct masq_cm_bind_req, id) == 0, "masq_cm_bind_req.id: offset");
_Static_assert(offsetof(struct masq_cm_bind_req, reserved) == 4, "masq_cm_bind_req.reserved: offset");
_Static_assert(offsetof(struct masq_cm_bind_req, addr) == 8, "masq_cm_bind_req.addr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_bind_req_validate(const struct masq_cm_bind_req *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (masq_cm_addr_validate(&s->addr))
		return -EINVAL;
	return 0;
}

/* The id's addresses as they are now (port 0 and 0.0.0.0 when unset). */
struct masq_cm_addrs {
	struct masq_cm_addr src;
	struct masq_cm_addr dst;
};
_Static_assert(sizeof(struct masq_cm_addrs) == 16, "masq_cm_addrs: size");
_Static_assert(offsetof(struct masq_cm_addrs, src) == 0, "masq_cm_addrs.src: offset");
_Static_assert(offsetof(struct masq_cm_addrs, dst) == 8, "masq_cm_addrs.dst: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_addrs_validate(const struct masq_cm_addrs *s)
{
	if (masq_cm_addr_validate(&s->src))
		return -EINVAL;
	if (masq_cm_addr_validate(&s->dst))
		return -EINVAL;
	return 0;
}

struct masq_cm_resolve_addr_req {
	uint32_t id;
	uint32_t timeout_ms;
	uint8_t has_src; /* 1 when the app named a source address. */
	uint8_t reserved[3];
	struct masq_cm_addr src;
	struct masq_cm_addr dst;
};
_Static_assert(sizeof(struct masq_cm_resolve_addr_req) == 28, "masq_cm_resolve_addr_req: size");
_Static_assert(offsetof(struct masq_cm_resolve_addr_req, id) == 0, "masq_cm_resolve_addr_req.id: offset");
_Static_assert(offsetof(struct masq_cm_resolve_addr_req, timeout_ms) == 4, "masq_cm_resolve_addr_req.timeout_ms: offset");
_Static_assert(offsetof(struct masq_cm_resolve_addr_req, has_src) == 8, "masq_cm_resolve_addr_req.has_src: offset");
_Static_assert(offsetof(struct masq_cm_resolve_addr_req, reserved) == 9, "masq_cm_resolve_addr_req.reserved: offset");
_Static_assert(offsetof(struct masq_cm_resolve_addr_req, src) == 12, "masq_cm_resolve_addr_req.src: offset");
_Static_assert(offsetof(struct masq_cm_resolve_addr_req, dst) == 20, "masq_cm_resolve_addr_req.dst: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_resolve_addr_req_validate(const struct masq_cm_resolve_addr_req *s)
{
	if (!(s->has_src <= 1))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (masq_cm_addr_validate(&s->src))
		return -EINVAL;
	if (masq_cm_addr_validate(&s->dst))
		return -EINVAL;
	return 0;
}

struct masq_cm_listen_req {
	uint32_t id;
	uint32_t backlog;
};
_Static_assert(sizeof(struct masq_cm_listen_req) == 8, "masq_cm_listen_req: size");
_Static_assert(offsetof(struct masq_cm_listen_req, id) == 0, "masq_cm_listen_req.id: offset");
_Static_assert(offsetof(struct masq_cm_listen_req, backlog) == 4, "masq_cm_listen_req.backlog: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_listen_req_validate(const struct masq_cm_listen_req *s)
{
	(void)s;
	return 0;
}

/*
 * struct rdma_conn_param. In a CONNECT_REQUEST event qp_num is the
 * peer's QP and the depths are from this side's point of view.
 */
struct masq_cm_conn_param {
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t flow_control;
	uint8_t retry_count;
	uint8_t rnr_retry_count; /* 7 = retry forever */
	uint8_t srq;
	uint8_t reserved[2];
	uint32_t qp_num;
	uint32_t private_data_len;
	uint8_t private_data[196];
};
_Static_assert(sizeof(struct masq_cm_conn_param) == 212, "masq_cm_conn_param: size");
_Static_assert(offsetof(struct masq_cm_conn_param, responder_resources) == 0, "masq_cm_conn_param.responder_resources: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, initiator_depth) == 1, "masq_cm_conn_param.initiator_depth: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, flow_control) == 2, "masq_cm_conn_param.flow_control: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, retry_count) == 3, "masq_cm_conn_param.retry_count: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, rnr_retry_count) == 4, "masq_cm_conn_param.rnr_retry_count: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, srq) == 5, "masq_cm_conn_param.srq: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, reserved) == 6, "masq_cm_conn_param.reserved: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, qp_num) == 8, "masq_cm_conn_param.qp_num: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, private_data_len) == 12, "masq_cm_conn_param.private_data_len: offset");
_Static_assert(offsetof(struct masq_cm_conn_param, private_data) == 16, "masq_cm_conn_param.private_data: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_conn_param_validate(const struct masq_cm_conn_param *s)
{
	if (!(s->flow_control <= 1))
		return -EINVAL;
	if (!(s->retry_count <= 7))
		return -EINVAL;
	if (!(s->rnr_retry_count <= 7))
		return -EINVAL;
	if (!(s->srq <= 1))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (!(s->qp_num <= 0xFFFFFF))
		return -EINVAL;
	if (s->private_data_len > 196)
		return -EINVAL;
	if (!masq__zero(&s->private_data[s->private_data_len], 196 - s->private_data_len))
		return -EINVAL;
	return 0;
}

struct masq_cm_connect_req {
	uint32_t id;
	uint8_t reserved[4];
	struct masq_cm_conn_param param;
};
_Static_assert(sizeof(struct masq_cm_connect_req) == 220, "masq_cm_connect_req: size");
_Static_assert(offsetof(struct masq_cm_connect_req, id) == 0, "masq_cm_connect_req.id: offset");
_Static_assert(offsetof(struct masq_cm_connect_req, reserved) == 4, "masq_cm_connect_req.reserved: offset");
_Static_assert(offsetof(struct masq_cm_connect_req, param) == 8, "masq_cm_connect_req.param: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_connect_req_validate(const struct masq_cm_connect_req *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (masq_cm_conn_param_validate(&s->param))
		return -EINVAL;
	return 0;
}

struct masq_cm_reject_req {
	uint32_t id;
	uint32_t private_data_len;
	uint8_t private_data[148];
};
_Static_assert(sizeof(struct masq_cm_reject_req) == 156, "masq_cm_reject_req: size");
_Static_assert(offsetof(struct masq_cm_reject_req, id) == 0, "masq_cm_reject_req.id: offset");
_Static_assert(offsetof(struct masq_cm_reject_req, private_data_len) == 4, "masq_cm_reject_req.private_data_len: offset");
_Static_assert(offsetof(struct masq_cm_reject_req, private_data) == 8, "masq_cm_reject_req.private_data: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_reject_req_validate(const struct masq_cm_reject_req *s)
{
	if (s->private_data_len > 148)
		return -EINVAL;
	if (!masq__zero(&s->private_data[s->private_data_len], 148 - s->private_data_len))
		return -EINVAL;
	return 0;
}

struct masq_cm_init_qp_attr_req {
	uint32_t id;
	uint32_t qp_state; /* enum ibv_qp_state: INIT, RTR or RTS */
};
_Static_assert(sizeof(struct masq_cm_init_qp_attr_req) == 8, "masq_cm_init_qp_attr_req: size");
_Static_assert(offsetof(struct masq_cm_init_qp_attr_req, id) == 0, "masq_cm_init_qp_attr_req.id: offset");
_Static_assert(offsetof(struct masq_cm_init_qp_attr_req, qp_state) == 4, "masq_cm_init_qp_attr_req.qp_state: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_init_qp_attr_req_validate(const struct masq_cm_init_qp_attr_req *s)
{
	if (!((s->qp_state >= 1 && s->qp_state <= 3)))
		return -EINVAL;
	return 0;
}

struct masq_cm_qp_attr {
	uint32_t attr_mask; /* enum ibv_qp_attr_mask bits of the fields set */
	uint8_t reserved[4];
	struct masq_qp_attr attr;
};
_Static_assert(sizeof(struct masq_cm_qp_attr) == 100, "masq_cm_qp_attr: size");
_Static_assert(offsetof(struct masq_cm_qp_attr, attr_mask) == 0, "masq_cm_qp_attr.attr_mask: offset");
_Static_assert(offsetof(struct masq_cm_qp_attr, reserved) == 4, "masq_cm_qp_attr.reserved: offset");
_Static_assert(offsetof(struct masq_cm_qp_attr, attr) == 8, "masq_cm_qp_attr.attr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_qp_attr_validate(const struct masq_cm_qp_attr *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (masq_qp_attr_validate(&s->attr))
		return -EINVAL;
	return 0;
}

/* One RDMA CM event, pushed on the channel's event socket. */
struct masq_cm_event {
	uint32_t id; /* The id the event is for; for CONNECT_REQUEST the new id. */
	uint32_t listen_id; /* For CONNECT_REQUEST the listening id, else 0. */
	uint32_t event; /* enum rdma_cm_event_type */
	int32_t status; /* 0, a negative errno, or for REJECTED the IB CM reject reason */
	struct masq_cm_addrs addrs; /* The id's addresses once the event is applied. */
	struct masq_cm_conn_param param; /* CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED, REJECTED: the peer's parameters and private data. */
	struct masq_cm_qp_attr init_attr; /* What CM_INIT_QP_ATTR would answer for INIT, RTR and RTS once this event is applied, where the event makes it known (attr_mask 0 otherwise): ROUTE_RESOLVED carries INIT's, CONNECT_REQUEST and CONNECT_RESPONSE all three. The frontend's rdma_init_qp_attr answers from them without a round trip. On a UD id's ESTABLISHED, rtr_attr instead names the peer as rdma_ud_param does: ah_attr (virtual), qkey and dest_qp_num (mask IBV_QP_AV | IBV_QP_QKEY | IBV_QP_DEST_QPN). */
	struct masq_cm_qp_attr rtr_attr;
	struct masq_cm_qp_attr rts_attr;
};
_Static_assert(sizeof(struct masq_cm_event) == 544, "masq_cm_event: size");
_Static_assert(offsetof(struct masq_cm_event, id) == 0, "masq_cm_event.id: offset");
_Static_assert(offsetof(struct masq_cm_event, listen_id) == 4, "masq_cm_event.listen_id: offset");
_Static_assert(offsetof(struct masq_cm_event, event) == 8, "masq_cm_event.event: offset");
_Static_assert(offsetof(struct masq_cm_event, status) == 12, "masq_cm_event.status: offset");
_Static_assert(offsetof(struct masq_cm_event, addrs) == 16, "masq_cm_event.addrs: offset");
_Static_assert(offsetof(struct masq_cm_event, param) == 32, "masq_cm_event.param: offset");
_Static_assert(offsetof(struct masq_cm_event, init_attr) == 244, "masq_cm_event.init_attr: offset");
_Static_assert(offsetof(struct masq_cm_event, rtr_attr) == 344, "masq_cm_event.rtr_attr: offset");
_Static_assert(offsetof(struct masq_cm_event, rts_attr) == 444, "masq_cm_event.rts_attr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_event_validate(const struct masq_cm_event *s)
{
	if (!(s->event <= 15))
		return -EINVAL;
	if (masq_cm_addrs_validate(&s->addrs))
		return -EINVAL;
	if (masq_cm_conn_param_validate(&s->param))
		return -EINVAL;
	if (masq_cm_qp_attr_validate(&s->init_attr))
		return -EINVAL;
	if (masq_cm_qp_attr_validate(&s->rtr_attr))
		return -EINVAL;
	if (masq_cm_qp_attr_validate(&s->rts_attr))
		return -EINVAL;
	return 0;
}

/*
 * CREATE_AH: a UD destination by virtual address. `ah_attr` is the
 * app's (virtual dgid and sgid index; is_global must be 1).
 */
struct masq_create_ah_req {
	struct masq_ah_attr ah_attr;
};
_Static_assert(sizeof(struct masq_create_ah_req) == 32, "masq_create_ah_req: size");
_Static_assert(offsetof(struct masq_create_ah_req, ah_attr) == 0, "masq_create_ah_req.ah_attr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_create_ah_req_validate(const struct masq_create_ah_req *s)
{
	if (masq_ah_attr_validate(&s->ah_attr))
		return -EINVAL;
	return 0;
}

/*
 * What the frontend hands the provider's create_ah: the same AH with
 * the peer host's physical dgid, the host's sgid index and the
 * policy's traffic class. `ah_id` names this admission in BIND_AH.
 */
struct masq_create_ah_reply {
	uint32_t ah_id;
	uint8_t reserved[4];
	struct masq_ah_attr ah_attr;
};
_Static_assert(sizeof(struct masq_create_ah_reply) == 40, "masq_create_ah_reply: size");
_Static_assert(offsetof(struct masq_create_ah_reply, ah_id) == 0, "masq_create_ah_reply.ah_id: offset");
_Static_assert(offsetof(struct masq_create_ah_reply, reserved) == 4, "masq_create_ah_reply.reserved: offset");
_Static_assert(offsetof(struct masq_create_ah_reply, ah_attr) == 8, "masq_create_ah_reply.ah_attr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_create_ah_reply_validate(const struct masq_create_ah_reply *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (masq_ah_attr_validate(&s->ah_attr))
		return -EINVAL;
	return 0;
}

/*
 * The provider created admission `ah_id`'s AH: its kernel handle, by
 * which masqd tracks it (and destroys it on a policy reset).
 */
struct masq_bind_ah_req {
	uint32_t ah_id;
	uint32_t ah_handle;
};
_Static_assert(sizeof(struct masq_bind_ah_req) == 8, "masq_bind_ah_req: size");
_Static_assert(offsetof(struct masq_bind_ah_req, ah_id) == 0, "masq_bind_ah_req.ah_id: offset");
_Static_assert(offsetof(struct masq_bind_ah_req, ah_handle) == 4, "masq_bind_ah_req.ah_handle: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_bind_ah_req_validate(const struct masq_bind_ah_req *s)
{
	(void)s;
	return 0;
}

struct masq_destroy_ah_req {
	uint32_t ah_handle;
	uint8_t reserved[4];
};
_Static_assert(sizeof(struct masq_destroy_ah_req) == 8, "masq_destroy_ah_req: size");
_Static_assert(offsetof(struct masq_destroy_ah_req, ah_handle) == 0, "masq_destroy_ah_req.ah_handle: offset");
_Static_assert(offsetof(struct masq_destroy_ah_req, reserved) == 4, "masq_destroy_ah_req.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_destroy_ah_req_validate(const struct masq_destroy_ah_req *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * After a masqd restart, once per AH the frontend holds: its kernel
 * handle and the virtual attributes the app created it with. masqd
 * admits it again as CREATE_AH and BIND_AH would have (RESYNC_TRACKED)
 * or, if the security groups no longer allow it, destroys it on the
 * app's uverbs file (RESYNC_RESET).
 */
struct masq_resync_ah_req {
	uint32_t ah_handle;
	uint8_t reserved[4];
	struct masq_ah_attr ah_attr;
};
_Static_assert(sizeof(struct masq_resync_ah_req) == 40, "masq_resync_ah_req: size");
_Static_assert(offsetof(struct masq_resync_ah_req, ah_handle) == 0, "masq_resync_ah_req.ah_handle: offset");
_Static_assert(offsetof(struct masq_resync_ah_req, reserved) == 4, "masq_resync_ah_req.reserved: offset");
_Static_assert(offsetof(struct masq_resync_ah_req, ah_attr) == 8, "masq_resync_ah_req.ah_attr: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_resync_ah_req_validate(const struct masq_resync_ah_req *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	if (masq_ah_attr_validate(&s->ah_attr))
		return -EINVAL;
	return 0;
}

struct masq_resync_ah_reply {
	uint8_t result; /* RESYNC_TRACKED or RESYNC_RESET */
	uint8_t reserved[7];
};
_Static_assert(sizeof(struct masq_resync_ah_reply) == 8, "masq_resync_ah_reply: size");
_Static_assert(offsetof(struct masq_resync_ah_reply, result) == 0, "masq_resync_ah_reply.result: offset");
_Static_assert(offsetof(struct masq_resync_ah_reply, reserved) == 1, "masq_resync_ah_reply.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_resync_ah_reply_validate(const struct masq_resync_ah_reply *s)
{
	if (!((s->result >= 1 && s->result <= 2)))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * A received UD packet's GRH (as the app's ibv_init_ah_from_wc sees
 * it), to be named in virtual terms: the sender host's physical
 * source GID, this host's physical destination GID, and the sending
 * QP (ibv_wc.src_qp).
 */
struct masq_resolve_grh_req {
	uint32_t src_qp;
	uint8_t reserved[4];
	uint8_t sgid[16];
	uint8_t dgid[16];
};
_Static_assert(sizeof(struct masq_resolve_grh_req) == 40, "masq_resolve_grh_req: size");
_Static_assert(offsetof(struct masq_resolve_grh_req, src_qp) == 0, "masq_resolve_grh_req.src_qp: offset");
_Static_assert(offsetof(struct masq_resolve_grh_req, reserved) == 4, "masq_resolve_grh_req.reserved: offset");
_Static_assert(offsetof(struct masq_resolve_grh_req, sgid) == 8, "masq_resolve_grh_req.sgid: offset");
_Static_assert(offsetof(struct masq_resolve_grh_req, dgid) == 24, "masq_resolve_grh_req.dgid: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_resolve_grh_req_validate(const struct masq_resolve_grh_req *s)
{
	if (!(s->src_qp <= 0xFFFFFF))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * The sender's virtual GID (`::ffff:vIP` in this VPC) and the virtual
 * index of this endpoint's GID the packet was sent to.
 */
struct masq_resolve_grh_reply {
	uint8_t sgid[16];
	uint8_t sgid_index;
	uint8_t reserved[7];
};
_Static_assert(sizeof(struct masq_resolve_grh_reply) == 24, "masq_resolve_grh_reply: size");
_Static_assert(offsetof(struct masq_resolve_grh_reply, sgid) == 0, "masq_resolve_grh_reply.sgid: offset");
_Static_assert(offsetof(struct masq_resolve_grh_reply, sgid_index) == 16, "masq_resolve_grh_reply.sgid_index: offset");
_Static_assert(offsetof(struct masq_resolve_grh_reply, reserved) == 17, "masq_resolve_grh_reply.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_resolve_grh_reply_validate(const struct masq_resolve_grh_reply *s)
{
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * CM_ACCEPT_QP, on the verbs session of the QP's context: masqd
 * moves the QP to RTR and RTS with the CM id's attributes (RTR's
 * max_dest_rd_atomic and RTS's max_rd_atomic from `param`'s depths,
 * as rdma_accept gives them) and then accepts as CM_ACCEPT does. The
 * id must be a CM id of the same process and endpoint.
 */
struct masq_cm_accept_qp_req {
	uint32_t id;
	uint32_t qp_handle;
	struct masq_cm_conn_param param;
};
_Static_assert(sizeof(struct masq_cm_accept_qp_req) == 220, "masq_cm_accept_qp_req: size");
_Static_assert(offsetof(struct masq_cm_accept_qp_req, id) == 0, "masq_cm_accept_qp_req.id: offset");
_Static_assert(offsetof(struct masq_cm_accept_qp_req, qp_handle) == 4, "masq_cm_accept_qp_req.qp_handle: offset");
_Static_assert(offsetof(struct masq_cm_accept_qp_req, param) == 8, "masq_cm_accept_qp_req.param: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_accept_qp_req_validate(const struct masq_cm_accept_qp_req *s)
{
	if (masq_cm_conn_param_validate(&s->param))
		return -EINVAL;
	return 0;
}

/*
 * CM_ESTABLISH_QP, on the verbs session of the QP's context: the
 * active side's answer to CONNECT_RESPONSE. masqd moves the QP to RTR
 * and RTS with the CM id's attributes and then establishes as
 * CM_ESTABLISH does (the RTU).
 */
struct masq_cm_establish_qp_req {
	uint32_t id;
	uint32_t qp_handle;
	uint32_t qp_num;
	uint8_t reserved[4];
};
_Static_assert(sizeof(struct masq_cm_establish_qp_req) == 16, "masq_cm_establish_qp_req: size");
_Static_assert(offsetof(struct masq_cm_establish_qp_req, id) == 0, "masq_cm_establish_qp_req.id: offset");
_Static_assert(offsetof(struct masq_cm_establish_qp_req, qp_handle) == 4, "masq_cm_establish_qp_req.qp_handle: offset");
_Static_assert(offsetof(struct masq_cm_establish_qp_req, qp_num) == 8, "masq_cm_establish_qp_req.qp_num: offset");
_Static_assert(offsetof(struct masq_cm_establish_qp_req, reserved) == 12, "masq_cm_establish_qp_req.reserved: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_establish_qp_req_validate(const struct masq_cm_establish_qp_req *s)
{
	if (!((s->qp_num >= 1 && s->qp_num <= 0xFFFFFF)))
		return -EINVAL;
	if (!masq__zero(s->reserved, sizeof(s->reserved)))
		return -EINVAL;
	return 0;
}

/*
 * After a masqd restart: an id as the app holds it, under its old
 * number (the peer's masqd knows it by that number).
 */
struct masq_cm_restore_id_req {
	uint32_t id;
	uint32_t channel;
	uint32_t port_space; /* enum rdma_port_space: RDMA_PS_TCP or RDMA_PS_UDP */
	uint32_t state; /* CM_RESTORE_* */
	uint32_t active; /* CONNECTED, PENDING: 1 if this side called rdma_connect, 0 if it answers a connection request */
	uint32_t backlog; /* LISTENING: rdma_listen's backlog */
	uint32_t qp_num; /* CONNECTED: this side's QP and the peer's (masqd checks both against the connection it tracks for the app's QP) */
	uint32_t remote_qpn;
	struct masq_cm_addrs addrs;
};
_Static_assert(sizeof(struct masq_cm_restore_id_req) == 48, "masq_cm_restore_id_req: size");
_Static_assert(offsetof(struct masq_cm_restore_id_req, id) == 0, "masq_cm_restore_id_req.id: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, channel) == 4, "masq_cm_restore_id_req.channel: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, port_space) == 8, "masq_cm_restore_id_req.port_space: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, state) == 12, "masq_cm_restore_id_req.state: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, active) == 16, "masq_cm_restore_id_req.active: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, backlog) == 20, "masq_cm_restore_id_req.backlog: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, qp_num) == 24, "masq_cm_restore_id_req.qp_num: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, remote_qpn) == 28, "masq_cm_restore_id_req.remote_qpn: offset");
_Static_assert(offsetof(struct masq_cm_restore_id_req, addrs) == 32, "masq_cm_restore_id_req.addrs: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_cm_restore_id_req_validate(const struct masq_cm_restore_id_req *s)
{
	if (!(s->port_space == 0x0106 || s->port_space == 0x0111))
		return -EINVAL;
	if (!((s->state >= 1 && s->state <= 4)))
		return -EINVAL;
	if (!(s->active <= 1))
		return -EINVAL;
	if (!(s->qp_num <= 0xFFFFFF))
		return -EINVAL;
	if (!(s->remote_qpn <= 0xFFFFFF))
		return -EINVAL;
	if (masq_cm_addrs_validate(&s->addrs))
		return -EINVAL;
	return 0;
}

struct masq_qp_error_notice {
	uint32_t qp_num;
	uint32_t reason; /* QP_ERROR_* reason */
};
_Static_assert(sizeof(struct masq_qp_error_notice) == 8, "masq_qp_error_notice: size");
_Static_assert(offsetof(struct masq_qp_error_notice, qp_num) == 0, "masq_qp_error_notice.qp_num: offset");
_Static_assert(offsetof(struct masq_qp_error_notice, reason) == 4, "masq_qp_error_notice.reason: offset");

/* 0 if every field is within its allowed values, else -EINVAL. */
static inline int masq_qp_error_notice_validate(const struct masq_qp_error_notice *s)
{
	if (!((s->reason >= 1 && s->reason <= 2)))
		return -EINVAL;
	return 0;
}

static inline int masq_opcode_is_reply(uint16_t opcode)
{
	return (opcode & MASQ_REPLY) != 0;
}

/* A posted request: the backend sends no reply to it. */
static inline int masq_opcode_is_posted(uint16_t opcode)
{
	return opcode >= MASQ_POSTED_FIRST && opcode <= MASQ_POSTED_LAST;
}

static inline int masq_opcode_is_notice(uint16_t opcode)
{
	return opcode >= MASQ_NOTICE_BASE && opcode < MASQ_REPLY;
}

static inline void masq_hdr_init(struct masq_hdr *h, uint16_t opcode, uint32_t length)
{
	memset(h, 0, sizeof(*h));
	h->version = MASQ_VERSION;
	h->opcode = opcode;
	h->length = length;
}

/* Set the request id of a message that starts with a struct masq_hdr. */
static inline void masq_hdr_set_request_id(void *msg, uint32_t request_id)
{
	memcpy((uint8_t *)msg + offsetof(struct masq_hdr, request_id), &request_id,
	       sizeof(request_id));
}

/*
 * Check the framing of a received datagram of len bytes and copy its
 * header out. 0, -EPROTONOSUPPORT for another version, or -EPROTO.
 */
static inline int masq_hdr_decode(const void *buf, size_t len, struct masq_hdr *h)
{
	if (len < sizeof(*h) || len > MASQ_MAX_MESSAGE)
		return -EPROTO;
	memcpy(h, buf, sizeof(*h));
	if (h->version != MASQ_VERSION)
		return -EPROTONOSUPPORT;
	if (h->length != len)
		return -EPROTO;
	if (h->status > 0 || (h->status < 0 && len != sizeof(*h)))
		return -EPROTO;
	return 0;
}

/*
 * Framing checks for one expected opcode. Returns 0 with the message
 * copied to out; an error reply's (negative) status with only its header
 * copied; or -EPROTO / -EPROTONOSUPPORT.
 */
static inline int masq__decode(const void *buf, size_t len, uint16_t opcode, void *out,
			       size_t size)
{
	struct masq_hdr h;
	int err = masq_hdr_decode(buf, len, &h);

	if (err)
		return err;
	if (h.opcode != opcode)
		return -EPROTO;
	if (h.status < 0) {
		if (!masq_opcode_is_reply(opcode))
			return -EPROTO;
		memcpy(out, &h, sizeof(h));
		return h.status;
	}
	if (masq_opcode_is_notice(opcode) && h.request_id != 0)
		return -EPROTO;
	if (len != size)
		return -EPROTO;
	memcpy(out, buf, size);
	return 0;
}

/* HELLO req (opcode 0x0001) */
struct masq_msg_hello_req {
	struct masq_hdr hdr;
	struct masq_hello_req body;
};
_Static_assert(sizeof(struct masq_msg_hello_req) == 56, "masq_msg_hello_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_hello_req_init(struct masq_msg_hello_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_HELLO, sizeof(*m));
}

static inline int masq_msg_hello_req_decode(const void *buf, size_t len, struct masq_msg_hello_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_HELLO, m, sizeof(*m));

	return err ? err : masq_hello_req_validate(&m->body);
}

/* HELLO reply (opcode 0x0001) */
struct masq_msg_hello_reply {
	struct masq_hdr hdr;
	struct masq_hello_reply body;
};
_Static_assert(sizeof(struct masq_msg_hello_reply) == 176, "masq_msg_hello_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_hello_reply_init(struct masq_msg_hello_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_HELLO | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_hello_reply_decode(const void *buf, size_t len, struct masq_msg_hello_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_HELLO | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_hello_reply_validate(&m->body);
}

/* OPEN_DEVICE req (opcode 0x0002) */
struct masq_msg_open_device_req {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_open_device_req) == 16, "masq_msg_open_device_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_open_device_req_init(struct masq_msg_open_device_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_OPEN_DEVICE, sizeof(*m));
}

static inline int masq_msg_open_device_req_decode(const void *buf, size_t len, struct masq_msg_open_device_req *m)
{
	return masq__decode(buf, len, MASQ_OP_OPEN_DEVICE, m, sizeof(*m));
}

/* OPEN_DEVICE reply (opcode 0x0002) */
struct masq_msg_open_device_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_open_device_reply) == 16, "masq_msg_open_device_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_open_device_reply_init(struct masq_msg_open_device_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_OPEN_DEVICE | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_open_device_reply_decode(const void *buf, size_t len, struct masq_msg_open_device_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_OPEN_DEVICE | MASQ_REPLY), m, sizeof(*m));
}

/* QUERY_GID_TABLE req (opcode 0x0003) */
struct masq_msg_query_gid_table_req {
	struct masq_hdr hdr;
	struct masq_query_gid_table_req body;
};
_Static_assert(sizeof(struct masq_msg_query_gid_table_req) == 24, "masq_msg_query_gid_table_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_query_gid_table_req_init(struct masq_msg_query_gid_table_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_QUERY_GID_TABLE, sizeof(*m));
}

static inline int masq_msg_query_gid_table_req_decode(const void *buf, size_t len, struct masq_msg_query_gid_table_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_QUERY_GID_TABLE, m, sizeof(*m));

	return err ? err : masq_query_gid_table_req_validate(&m->body);
}

/* QUERY_GID_TABLE reply (opcode 0x0003) */
struct masq_msg_query_gid_table_reply {
	struct masq_hdr hdr;
	struct masq_gid_table body;
};
_Static_assert(sizeof(struct masq_msg_query_gid_table_reply) == 408, "masq_msg_query_gid_table_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_query_gid_table_reply_init(struct masq_msg_query_gid_table_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_QUERY_GID_TABLE | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_query_gid_table_reply_decode(const void *buf, size_t len, struct masq_msg_query_gid_table_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_QUERY_GID_TABLE | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_gid_table_validate(&m->body);
}

/* MODIFY_QP req (opcode 0x0004) */
struct masq_msg_modify_qp_req {
	struct masq_hdr hdr;
	struct masq_modify_qp_req body;
};
_Static_assert(sizeof(struct masq_msg_modify_qp_req) == 124, "masq_msg_modify_qp_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_modify_qp_req_init(struct masq_msg_modify_qp_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_MODIFY_QP, sizeof(*m));
}

static inline int masq_msg_modify_qp_req_decode(const void *buf, size_t len, struct masq_msg_modify_qp_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_MODIFY_QP, m, sizeof(*m));

	return err ? err : masq_modify_qp_req_validate(&m->body);
}

/* MODIFY_QP reply (opcode 0x0004) */
struct masq_msg_modify_qp_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_modify_qp_reply) == 16, "masq_msg_modify_qp_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_modify_qp_reply_init(struct masq_msg_modify_qp_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_MODIFY_QP | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_modify_qp_reply_decode(const void *buf, size_t len, struct masq_msg_modify_qp_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_MODIFY_QP | MASQ_REPLY), m, sizeof(*m));
}

/* QUERY_QP req (opcode 0x0005) */
struct masq_msg_query_qp_req {
	struct masq_hdr hdr;
	struct masq_query_qp_req body;
};
_Static_assert(sizeof(struct masq_msg_query_qp_req) == 24, "masq_msg_query_qp_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_query_qp_req_init(struct masq_msg_query_qp_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_QUERY_QP, sizeof(*m));
}

static inline int masq_msg_query_qp_req_decode(const void *buf, size_t len, struct masq_msg_query_qp_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_QUERY_QP, m, sizeof(*m));

	return err ? err : masq_query_qp_req_validate(&m->body);
}

/* QUERY_QP reply (opcode 0x0005) */
struct masq_msg_query_qp_reply {
	struct masq_hdr hdr;
	struct masq_qp_attr body;
};
_Static_assert(sizeof(struct masq_msg_query_qp_reply) == 108, "masq_msg_query_qp_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_query_qp_reply_init(struct masq_msg_query_qp_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_QUERY_QP | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_query_qp_reply_decode(const void *buf, size_t len, struct masq_msg_query_qp_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_QUERY_QP | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_qp_attr_validate(&m->body);
}

/* DESTROY_QP req (opcode 0x0006) */
struct masq_msg_destroy_qp_req {
	struct masq_hdr hdr;
	struct masq_destroy_qp_req body;
};
_Static_assert(sizeof(struct masq_msg_destroy_qp_req) == 24, "masq_msg_destroy_qp_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_destroy_qp_req_init(struct masq_msg_destroy_qp_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_DESTROY_QP, sizeof(*m));
}

static inline int masq_msg_destroy_qp_req_decode(const void *buf, size_t len, struct masq_msg_destroy_qp_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_DESTROY_QP, m, sizeof(*m));

	return err ? err : masq_destroy_qp_req_validate(&m->body);
}

/* DESTROY_QP reply (opcode 0x0006) */
struct masq_msg_destroy_qp_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_destroy_qp_reply) == 16, "masq_msg_destroy_qp_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_destroy_qp_reply_init(struct masq_msg_destroy_qp_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_DESTROY_QP | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_destroy_qp_reply_decode(const void *buf, size_t len, struct masq_msg_destroy_qp_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_DESTROY_QP | MASQ_REPLY), m, sizeof(*m));
}

/* RESYNC_QP req (opcode 0x0007) */
struct masq_msg_resync_qp_req {
	struct masq_hdr hdr;
	struct masq_resync_qp_req body;
};
_Static_assert(sizeof(struct masq_msg_resync_qp_req) == 48, "masq_msg_resync_qp_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_resync_qp_req_init(struct masq_msg_resync_qp_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_RESYNC_QP, sizeof(*m));
}

static inline int masq_msg_resync_qp_req_decode(const void *buf, size_t len, struct masq_msg_resync_qp_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_RESYNC_QP, m, sizeof(*m));

	return err ? err : masq_resync_qp_req_validate(&m->body);
}

/* RESYNC_QP reply (opcode 0x0007) */
struct masq_msg_resync_qp_reply {
	struct masq_hdr hdr;
	struct masq_resync_qp_reply body;
};
_Static_assert(sizeof(struct masq_msg_resync_qp_reply) == 24, "masq_msg_resync_qp_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_resync_qp_reply_init(struct masq_msg_resync_qp_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_RESYNC_QP | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_resync_qp_reply_decode(const void *buf, size_t len, struct masq_msg_resync_qp_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_RESYNC_QP | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_resync_qp_reply_validate(&m->body);
}

/* CREATE_AH req (opcode 0x0008) */
struct masq_msg_create_ah_req {
	struct masq_hdr hdr;
	struct masq_create_ah_req body;
};
_Static_assert(sizeof(struct masq_msg_create_ah_req) == 48, "masq_msg_create_ah_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_create_ah_req_init(struct masq_msg_create_ah_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CREATE_AH, sizeof(*m));
}

static inline int masq_msg_create_ah_req_decode(const void *buf, size_t len, struct masq_msg_create_ah_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CREATE_AH, m, sizeof(*m));

	return err ? err : masq_create_ah_req_validate(&m->body);
}

/* CREATE_AH reply (opcode 0x0008) */
struct masq_msg_create_ah_reply {
	struct masq_hdr hdr;
	struct masq_create_ah_reply body;
};
_Static_assert(sizeof(struct masq_msg_create_ah_reply) == 56, "masq_msg_create_ah_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_create_ah_reply_init(struct masq_msg_create_ah_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CREATE_AH | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_create_ah_reply_decode(const void *buf, size_t len, struct masq_msg_create_ah_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_CREATE_AH | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_create_ah_reply_validate(&m->body);
}

/* BIND_AH req (opcode 0x0009) */
struct masq_msg_bind_ah_req {
	struct masq_hdr hdr;
	struct masq_bind_ah_req body;
};
_Static_assert(sizeof(struct masq_msg_bind_ah_req) == 24, "masq_msg_bind_ah_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_bind_ah_req_init(struct masq_msg_bind_ah_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_BIND_AH, sizeof(*m));
}

static inline int masq_msg_bind_ah_req_decode(const void *buf, size_t len, struct masq_msg_bind_ah_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_BIND_AH, m, sizeof(*m));

	return err ? err : masq_bind_ah_req_validate(&m->body);
}

/* BIND_AH reply (opcode 0x0009) */
struct masq_msg_bind_ah_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_bind_ah_reply) == 16, "masq_msg_bind_ah_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_bind_ah_reply_init(struct masq_msg_bind_ah_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_BIND_AH | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_bind_ah_reply_decode(const void *buf, size_t len, struct masq_msg_bind_ah_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_BIND_AH | MASQ_REPLY), m, sizeof(*m));
}

/* DESTROY_AH req (opcode 0x000a) */
struct masq_msg_destroy_ah_req {
	struct masq_hdr hdr;
	struct masq_destroy_ah_req body;
};
_Static_assert(sizeof(struct masq_msg_destroy_ah_req) == 24, "masq_msg_destroy_ah_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_destroy_ah_req_init(struct masq_msg_destroy_ah_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_DESTROY_AH, sizeof(*m));
}

static inline int masq_msg_destroy_ah_req_decode(const void *buf, size_t len, struct masq_msg_destroy_ah_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_DESTROY_AH, m, sizeof(*m));

	return err ? err : masq_destroy_ah_req_validate(&m->body);
}

/* DESTROY_AH reply (opcode 0x000a) */
struct masq_msg_destroy_ah_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_destroy_ah_reply) == 16, "masq_msg_destroy_ah_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_destroy_ah_reply_init(struct masq_msg_destroy_ah_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_DESTROY_AH | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_destroy_ah_reply_decode(const void *buf, size_t len, struct masq_msg_destroy_ah_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_DESTROY_AH | MASQ_REPLY), m, sizeof(*m));
}

/* RESOLVE_GRH req (opcode 0x000b) */
struct masq_msg_resolve_grh_req {
	struct masq_hdr hdr;
	struct masq_resolve_grh_req body;
};
_Static_assert(sizeof(struct masq_msg_resolve_grh_req) == 56, "masq_msg_resolve_grh_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_resolve_grh_req_init(struct masq_msg_resolve_grh_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_RESOLVE_GRH, sizeof(*m));
}

static inline int masq_msg_resolve_grh_req_decode(const void *buf, size_t len, struct masq_msg_resolve_grh_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_RESOLVE_GRH, m, sizeof(*m));

	return err ? err : masq_resolve_grh_req_validate(&m->body);
}

/* RESOLVE_GRH reply (opcode 0x000b) */
struct masq_msg_resolve_grh_reply {
	struct masq_hdr hdr;
	struct masq_resolve_grh_reply body;
};
_Static_assert(sizeof(struct masq_msg_resolve_grh_reply) == 40, "masq_msg_resolve_grh_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_resolve_grh_reply_init(struct masq_msg_resolve_grh_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_RESOLVE_GRH | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_resolve_grh_reply_decode(const void *buf, size_t len, struct masq_msg_resolve_grh_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_RESOLVE_GRH | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_resolve_grh_reply_validate(&m->body);
}

/* QP_MOVED req (opcode 0x000c) */
struct masq_msg_qp_moved_req {
	struct masq_hdr hdr;
	struct masq_qp_moved_req body;
};
_Static_assert(sizeof(struct masq_msg_qp_moved_req) == 40, "masq_msg_qp_moved_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_qp_moved_req_init(struct masq_msg_qp_moved_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_QP_MOVED, sizeof(*m));
}

static inline int masq_msg_qp_moved_req_decode(const void *buf, size_t len, struct masq_msg_qp_moved_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_QP_MOVED, m, sizeof(*m));

	return err ? err : masq_qp_moved_req_validate(&m->body);
}

/* QP_DESTROYED req (opcode 0x000d) */
struct masq_msg_qp_destroyed_req {
	struct masq_hdr hdr;
	struct masq_destroy_qp_req body;
};
_Static_assert(sizeof(struct masq_msg_qp_destroyed_req) == 24, "masq_msg_qp_destroyed_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_qp_destroyed_req_init(struct masq_msg_qp_destroyed_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_QP_DESTROYED, sizeof(*m));
}

static inline int masq_msg_qp_destroyed_req_decode(const void *buf, size_t len, struct masq_msg_qp_destroyed_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_QP_DESTROYED, m, sizeof(*m));

	return err ? err : masq_destroy_qp_req_validate(&m->body);
}

/* CM_CREATE_CHANNEL req (opcode 0x0010) */
struct masq_msg_cm_create_channel_req {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_create_channel_req) == 16, "masq_msg_cm_create_channel_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_create_channel_req_init(struct masq_msg_cm_create_channel_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_CREATE_CHANNEL, sizeof(*m));
}

static inline int masq_msg_cm_create_channel_req_decode(const void *buf, size_t len, struct masq_msg_cm_create_channel_req *m)
{
	return masq__decode(buf, len, MASQ_OP_CM_CREATE_CHANNEL, m, sizeof(*m));
}

/* CM_CREATE_CHANNEL reply (opcode 0x0010) */
struct masq_msg_cm_create_channel_reply {
	struct masq_hdr hdr;
	struct masq_cm_channel body;
};
_Static_assert(sizeof(struct masq_msg_cm_create_channel_reply) == 24, "masq_msg_cm_create_channel_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_create_channel_reply_init(struct masq_msg_cm_create_channel_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_CREATE_CHANNEL | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_create_channel_reply_decode(const void *buf, size_t len, struct masq_msg_cm_create_channel_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_CM_CREATE_CHANNEL | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_cm_channel_validate(&m->body);
}

/* CM_DESTROY_CHANNEL req (opcode 0x0011) */
struct masq_msg_cm_destroy_channel_req {
	struct masq_hdr hdr;
	struct masq_cm_channel body;
};
_Static_assert(sizeof(struct masq_msg_cm_destroy_channel_req) == 24, "masq_msg_cm_destroy_channel_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_destroy_channel_req_init(struct masq_msg_cm_destroy_channel_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_DESTROY_CHANNEL, sizeof(*m));
}

static inline int masq_msg_cm_destroy_channel_req_decode(const void *buf, size_t len, struct masq_msg_cm_destroy_channel_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_DESTROY_CHANNEL, m, sizeof(*m));

	return err ? err : masq_cm_channel_validate(&m->body);
}

/* CM_DESTROY_CHANNEL reply (opcode 0x0011) */
struct masq_msg_cm_destroy_channel_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_destroy_channel_reply) == 16, "masq_msg_cm_destroy_channel_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_destroy_channel_reply_init(struct masq_msg_cm_destroy_channel_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_DESTROY_CHANNEL | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_destroy_channel_reply_decode(const void *buf, size_t len, struct masq_msg_cm_destroy_channel_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_DESTROY_CHANNEL | MASQ_REPLY), m, sizeof(*m));
}

/* CM_CREATE_ID req (opcode 0x0012) */
struct masq_msg_cm_create_id_req {
	struct masq_hdr hdr;
	struct masq_cm_create_id_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_create_id_req) == 24, "masq_msg_cm_create_id_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_create_id_req_init(struct masq_msg_cm_create_id_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_CREATE_ID, sizeof(*m));
}

static inline int masq_msg_cm_create_id_req_decode(const void *buf, size_t len, struct masq_msg_cm_create_id_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_CREATE_ID, m, sizeof(*m));

	return err ? err : masq_cm_create_id_req_validate(&m->body);
}

/* CM_CREATE_ID reply (opcode 0x0012) */
struct masq_msg_cm_create_id_reply {
	struct masq_hdr hdr;
	struct masq_cm_id body;
};
_Static_assert(sizeof(struct masq_msg_cm_create_id_reply) == 24, "masq_msg_cm_create_id_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_create_id_reply_init(struct masq_msg_cm_create_id_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_CREATE_ID | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_create_id_reply_decode(const void *buf, size_t len, struct masq_msg_cm_create_id_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_CM_CREATE_ID | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_cm_id_validate(&m->body);
}

/* CM_DESTROY_ID req (opcode 0x0013) */
struct masq_msg_cm_destroy_id_req {
	struct masq_hdr hdr;
	struct masq_cm_id body;
};
_Static_assert(sizeof(struct masq_msg_cm_destroy_id_req) == 24, "masq_msg_cm_destroy_id_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_destroy_id_req_init(struct masq_msg_cm_destroy_id_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_DESTROY_ID, sizeof(*m));
}

static inline int masq_msg_cm_destroy_id_req_decode(const void *buf, size_t len, struct masq_msg_cm_destroy_id_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_DESTROY_ID, m, sizeof(*m));

	return err ? err : masq_cm_id_validate(&m->body);
}

/* CM_DESTROY_ID reply (opcode 0x0013) */
struct masq_msg_cm_destroy_id_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_destroy_id_reply) == 16, "masq_msg_cm_destroy_id_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_destroy_id_reply_init(struct masq_msg_cm_destroy_id_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_DESTROY_ID | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_destroy_id_reply_decode(const void *buf, size_t len, struct masq_msg_cm_destroy_id_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_DESTROY_ID | MASQ_REPLY), m, sizeof(*m));
}

/* CM_MIGRATE_ID req (opcode 0x0014) */
struct masq_msg_cm_migrate_id_req {
	struct masq_hdr hdr;
	struct masq_cm_migrate_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_migrate_id_req) == 24, "masq_msg_cm_migrate_id_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_migrate_id_req_init(struct masq_msg_cm_migrate_id_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_MIGRATE_ID, sizeof(*m));
}

static inline int masq_msg_cm_migrate_id_req_decode(const void *buf, size_t len, struct masq_msg_cm_migrate_id_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_MIGRATE_ID, m, sizeof(*m));

	return err ? err : masq_cm_migrate_req_validate(&m->body);
}

/* CM_MIGRATE_ID reply (opcode 0x0014) */
struct masq_msg_cm_migrate_id_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_migrate_id_reply) == 16, "masq_msg_cm_migrate_id_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_migrate_id_reply_init(struct masq_msg_cm_migrate_id_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_MIGRATE_ID | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_migrate_id_reply_decode(const void *buf, size_t len, struct masq_msg_cm_migrate_id_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_MIGRATE_ID | MASQ_REPLY), m, sizeof(*m));
}

/* CM_BIND_ADDR req (opcode 0x0015) */
struct masq_msg_cm_bind_addr_req {
	struct masq_hdr hdr;
	struct masq_cm_bind_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_bind_addr_req) == 32, "masq_msg_cm_bind_addr_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_bind_addr_req_init(struct masq_msg_cm_bind_addr_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_BIND_ADDR, sizeof(*m));
}

static inline int masq_msg_cm_bind_addr_req_decode(const void *buf, size_t len, struct masq_msg_cm_bind_addr_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_BIND_ADDR, m, sizeof(*m));

	return err ? err : masq_cm_bind_req_validate(&m->body);
}

/* CM_BIND_ADDR reply (opcode 0x0015) */
struct masq_msg_cm_bind_addr_reply {
	struct masq_hdr hdr;
	struct masq_cm_addrs body;
};
_Static_assert(sizeof(struct masq_msg_cm_bind_addr_reply) == 32, "masq_msg_cm_bind_addr_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_bind_addr_reply_init(struct masq_msg_cm_bind_addr_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_BIND_ADDR | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_bind_addr_reply_decode(const void *buf, size_t len, struct masq_msg_cm_bind_addr_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_CM_BIND_ADDR | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_cm_addrs_validate(&m->body);
}

/* CM_RESOLVE_ADDR req (opcode 0x0016) */
struct masq_msg_cm_resolve_addr_req {
	struct masq_hdr hdr;
	struct masq_cm_resolve_addr_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_resolve_addr_req) == 44, "masq_msg_cm_resolve_addr_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_resolve_addr_req_init(struct masq_msg_cm_resolve_addr_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_RESOLVE_ADDR, sizeof(*m));
}

static inline int masq_msg_cm_resolve_addr_req_decode(const void *buf, size_t len, struct masq_msg_cm_resolve_addr_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_RESOLVE_ADDR, m, sizeof(*m));

	return err ? err : masq_cm_resolve_addr_req_validate(&m->body);
}

/* CM_RESOLVE_ADDR reply (opcode 0x0016) */
struct masq_msg_cm_resolve_addr_reply {
	struct masq_hdr hdr;
	struct masq_cm_addrs body;
};
_Static_assert(sizeof(struct masq_msg_cm_resolve_addr_reply) == 32, "masq_msg_cm_resolve_addr_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_resolve_addr_reply_init(struct masq_msg_cm_resolve_addr_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_RESOLVE_ADDR | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_resolve_addr_reply_decode(const void *buf, size_t len, struct masq_msg_cm_resolve_addr_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_CM_RESOLVE_ADDR | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_cm_addrs_validate(&m->body);
}

/* CM_RESOLVE_ROUTE req (opcode 0x0017) */
struct masq_msg_cm_resolve_route_req {
	struct masq_hdr hdr;
	struct masq_cm_id body;
};
_Static_assert(sizeof(struct masq_msg_cm_resolve_route_req) == 24, "masq_msg_cm_resolve_route_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_resolve_route_req_init(struct masq_msg_cm_resolve_route_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_RESOLVE_ROUTE, sizeof(*m));
}

static inline int masq_msg_cm_resolve_route_req_decode(const void *buf, size_t len, struct masq_msg_cm_resolve_route_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_RESOLVE_ROUTE, m, sizeof(*m));

	return err ? err : masq_cm_id_validate(&m->body);
}

/* CM_RESOLVE_ROUTE reply (opcode 0x0017) */
struct masq_msg_cm_resolve_route_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_resolve_route_reply) == 16, "masq_msg_cm_resolve_route_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_resolve_route_reply_init(struct masq_msg_cm_resolve_route_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_RESOLVE_ROUTE | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_resolve_route_reply_decode(const void *buf, size_t len, struct masq_msg_cm_resolve_route_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_RESOLVE_ROUTE | MASQ_REPLY), m, sizeof(*m));
}

/* CM_LISTEN req (opcode 0x0018) */
struct masq_msg_cm_listen_req {
	struct masq_hdr hdr;
	struct masq_cm_listen_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_listen_req) == 24, "masq_msg_cm_listen_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_listen_req_init(struct masq_msg_cm_listen_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_LISTEN, sizeof(*m));
}

static inline int masq_msg_cm_listen_req_decode(const void *buf, size_t len, struct masq_msg_cm_listen_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_LISTEN, m, sizeof(*m));

	return err ? err : masq_cm_listen_req_validate(&m->body);
}

/* CM_LISTEN reply (opcode 0x0018) */
struct masq_msg_cm_listen_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_listen_reply) == 16, "masq_msg_cm_listen_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_listen_reply_init(struct masq_msg_cm_listen_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_LISTEN | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_listen_reply_decode(const void *buf, size_t len, struct masq_msg_cm_listen_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_LISTEN | MASQ_REPLY), m, sizeof(*m));
}

/* CM_CONNECT req (opcode 0x0019) */
struct masq_msg_cm_connect_req {
	struct masq_hdr hdr;
	struct masq_cm_connect_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_connect_req) == 236, "masq_msg_cm_connect_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_connect_req_init(struct masq_msg_cm_connect_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_CONNECT, sizeof(*m));
}

static inline int masq_msg_cm_connect_req_decode(const void *buf, size_t len, struct masq_msg_cm_connect_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_CONNECT, m, sizeof(*m));

	return err ? err : masq_cm_connect_req_validate(&m->body);
}

/* CM_CONNECT reply (opcode 0x0019) */
struct masq_msg_cm_connect_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_connect_reply) == 16, "masq_msg_cm_connect_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_connect_reply_init(struct masq_msg_cm_connect_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_CONNECT | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_connect_reply_decode(const void *buf, size_t len, struct masq_msg_cm_connect_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_CONNECT | MASQ_REPLY), m, sizeof(*m));
}

/* CM_ACCEPT req (opcode 0x001a) */
struct masq_msg_cm_accept_req {
	struct masq_hdr hdr;
	struct masq_cm_connect_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_accept_req) == 236, "masq_msg_cm_accept_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_accept_req_init(struct masq_msg_cm_accept_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_ACCEPT, sizeof(*m));
}

static inline int masq_msg_cm_accept_req_decode(const void *buf, size_t len, struct masq_msg_cm_accept_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_ACCEPT, m, sizeof(*m));

	return err ? err : masq_cm_connect_req_validate(&m->body);
}

/* CM_ACCEPT reply (opcode 0x001a) */
struct masq_msg_cm_accept_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_accept_reply) == 16, "masq_msg_cm_accept_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_accept_reply_init(struct masq_msg_cm_accept_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_ACCEPT | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_accept_reply_decode(const void *buf, size_t len, struct masq_msg_cm_accept_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_ACCEPT | MASQ_REPLY), m, sizeof(*m));
}

/* CM_REJECT req (opcode 0x001b) */
struct masq_msg_cm_reject_req {
	struct masq_hdr hdr;
	struct masq_cm_reject_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_reject_req) == 172, "masq_msg_cm_reject_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_reject_req_init(struct masq_msg_cm_reject_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_REJECT, sizeof(*m));
}

static inline int masq_msg_cm_reject_req_decode(const void *buf, size_t len, struct masq_msg_cm_reject_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_REJECT, m, sizeof(*m));

	return err ? err : masq_cm_reject_req_validate(&m->body);
}

/* CM_REJECT reply (opcode 0x001b) */
struct masq_msg_cm_reject_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_reject_reply) == 16, "masq_msg_cm_reject_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_reject_reply_init(struct masq_msg_cm_reject_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_REJECT | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_reject_reply_decode(const void *buf, size_t len, struct masq_msg_cm_reject_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_REJECT | MASQ_REPLY), m, sizeof(*m));
}

/* CM_DISCONNECT req (opcode 0x001c) */
struct masq_msg_cm_disconnect_req {
	struct masq_hdr hdr;
	struct masq_cm_id body;
};
_Static_assert(sizeof(struct masq_msg_cm_disconnect_req) == 24, "masq_msg_cm_disconnect_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_disconnect_req_init(struct masq_msg_cm_disconnect_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_DISCONNECT, sizeof(*m));
}

static inline int masq_msg_cm_disconnect_req_decode(const void *buf, size_t len, struct masq_msg_cm_disconnect_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_DISCONNECT, m, sizeof(*m));

	return err ? err : masq_cm_id_validate(&m->body);
}

/* CM_DISCONNECT reply (opcode 0x001c) */
struct masq_msg_cm_disconnect_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_disconnect_reply) == 16, "masq_msg_cm_disconnect_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_disconnect_reply_init(struct masq_msg_cm_disconnect_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_DISCONNECT | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_disconnect_reply_decode(const void *buf, size_t len, struct masq_msg_cm_disconnect_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_DISCONNECT | MASQ_REPLY), m, sizeof(*m));
}

/* CM_INIT_QP_ATTR req (opcode 0x001d) */
struct masq_msg_cm_init_qp_attr_req {
	struct masq_hdr hdr;
	struct masq_cm_init_qp_attr_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_init_qp_attr_req) == 24, "masq_msg_cm_init_qp_attr_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_init_qp_attr_req_init(struct masq_msg_cm_init_qp_attr_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_INIT_QP_ATTR, sizeof(*m));
}

static inline int masq_msg_cm_init_qp_attr_req_decode(const void *buf, size_t len, struct masq_msg_cm_init_qp_attr_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_INIT_QP_ATTR, m, sizeof(*m));

	return err ? err : masq_cm_init_qp_attr_req_validate(&m->body);
}

/* CM_INIT_QP_ATTR reply (opcode 0x001d) */
struct masq_msg_cm_init_qp_attr_reply {
	struct masq_hdr hdr;
	struct masq_cm_qp_attr body;
};
_Static_assert(sizeof(struct masq_msg_cm_init_qp_attr_reply) == 116, "masq_msg_cm_init_qp_attr_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_init_qp_attr_reply_init(struct masq_msg_cm_init_qp_attr_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_INIT_QP_ATTR | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_init_qp_attr_reply_decode(const void *buf, size_t len, struct masq_msg_cm_init_qp_attr_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_CM_INIT_QP_ATTR | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_cm_qp_attr_validate(&m->body);
}

/* CM_ESTABLISH req (opcode 0x001e) */
struct masq_msg_cm_establish_req {
	struct masq_hdr hdr;
	struct masq_cm_id body;
};
_Static_assert(sizeof(struct masq_msg_cm_establish_req) == 24, "masq_msg_cm_establish_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_establish_req_init(struct masq_msg_cm_establish_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_ESTABLISH, sizeof(*m));
}

static inline int masq_msg_cm_establish_req_decode(const void *buf, size_t len, struct masq_msg_cm_establish_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_ESTABLISH, m, sizeof(*m));

	return err ? err : masq_cm_id_validate(&m->body);
}

/* CM_ESTABLISH reply (opcode 0x001e) */
struct masq_msg_cm_establish_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_establish_reply) == 16, "masq_msg_cm_establish_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_establish_reply_init(struct masq_msg_cm_establish_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_ESTABLISH | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_establish_reply_decode(const void *buf, size_t len, struct masq_msg_cm_establish_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_ESTABLISH | MASQ_REPLY), m, sizeof(*m));
}

/* CM_RESTORE_CHANNEL req (opcode 0x001f) */
struct masq_msg_cm_restore_channel_req {
	struct masq_hdr hdr;
	struct masq_cm_channel body;
};
_Static_assert(sizeof(struct masq_msg_cm_restore_channel_req) == 24, "masq_msg_cm_restore_channel_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_restore_channel_req_init(struct masq_msg_cm_restore_channel_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_RESTORE_CHANNEL, sizeof(*m));
}

static inline int masq_msg_cm_restore_channel_req_decode(const void *buf, size_t len, struct masq_msg_cm_restore_channel_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_RESTORE_CHANNEL, m, sizeof(*m));

	return err ? err : masq_cm_channel_validate(&m->body);
}

/* CM_RESTORE_CHANNEL reply (opcode 0x001f) */
struct masq_msg_cm_restore_channel_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_restore_channel_reply) == 16, "masq_msg_cm_restore_channel_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_restore_channel_reply_init(struct masq_msg_cm_restore_channel_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_RESTORE_CHANNEL | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_restore_channel_reply_decode(const void *buf, size_t len, struct masq_msg_cm_restore_channel_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_RESTORE_CHANNEL | MASQ_REPLY), m, sizeof(*m));
}

/* CM_RESTORE_ID req (opcode 0x0020) */
struct masq_msg_cm_restore_id_req {
	struct masq_hdr hdr;
	struct masq_cm_restore_id_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_restore_id_req) == 64, "masq_msg_cm_restore_id_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_restore_id_req_init(struct masq_msg_cm_restore_id_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_RESTORE_ID, sizeof(*m));
}

static inline int masq_msg_cm_restore_id_req_decode(const void *buf, size_t len, struct masq_msg_cm_restore_id_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_RESTORE_ID, m, sizeof(*m));

	return err ? err : masq_cm_restore_id_req_validate(&m->body);
}

/* CM_RESTORE_ID reply (opcode 0x0020) */
struct masq_msg_cm_restore_id_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_restore_id_reply) == 16, "masq_msg_cm_restore_id_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_restore_id_reply_init(struct masq_msg_cm_restore_id_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_RESTORE_ID | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_restore_id_reply_decode(const void *buf, size_t len, struct masq_msg_cm_restore_id_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_RESTORE_ID | MASQ_REPLY), m, sizeof(*m));
}

/* CM_ACCEPT_QP req (opcode 0x0021) */
struct masq_msg_cm_accept_qp_req {
	struct masq_hdr hdr;
	struct masq_cm_accept_qp_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_accept_qp_req) == 236, "masq_msg_cm_accept_qp_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_accept_qp_req_init(struct masq_msg_cm_accept_qp_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_ACCEPT_QP, sizeof(*m));
}

static inline int masq_msg_cm_accept_qp_req_decode(const void *buf, size_t len, struct masq_msg_cm_accept_qp_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_ACCEPT_QP, m, sizeof(*m));

	return err ? err : masq_cm_accept_qp_req_validate(&m->body);
}

/* CM_ACCEPT_QP reply (opcode 0x0021) */
struct masq_msg_cm_accept_qp_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_accept_qp_reply) == 16, "masq_msg_cm_accept_qp_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_accept_qp_reply_init(struct masq_msg_cm_accept_qp_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_ACCEPT_QP | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_accept_qp_reply_decode(const void *buf, size_t len, struct masq_msg_cm_accept_qp_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_ACCEPT_QP | MASQ_REPLY), m, sizeof(*m));
}

/* CM_ESTABLISH_QP req (opcode 0x0022) */
struct masq_msg_cm_establish_qp_req {
	struct masq_hdr hdr;
	struct masq_cm_establish_qp_req body;
};
_Static_assert(sizeof(struct masq_msg_cm_establish_qp_req) == 32, "masq_msg_cm_establish_qp_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_establish_qp_req_init(struct masq_msg_cm_establish_qp_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_CM_ESTABLISH_QP, sizeof(*m));
}

static inline int masq_msg_cm_establish_qp_req_decode(const void *buf, size_t len, struct masq_msg_cm_establish_qp_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_CM_ESTABLISH_QP, m, sizeof(*m));

	return err ? err : masq_cm_establish_qp_req_validate(&m->body);
}

/* CM_ESTABLISH_QP reply (opcode 0x0022) */
struct masq_msg_cm_establish_qp_reply {
	struct masq_hdr hdr;
};
_Static_assert(sizeof(struct masq_msg_cm_establish_qp_reply) == 16, "masq_msg_cm_establish_qp_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_establish_qp_reply_init(struct masq_msg_cm_establish_qp_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_CM_ESTABLISH_QP | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_cm_establish_qp_reply_decode(const void *buf, size_t len, struct masq_msg_cm_establish_qp_reply *m)
{
	return masq__decode(buf, len, (MASQ_OP_CM_ESTABLISH_QP | MASQ_REPLY), m, sizeof(*m));
}

/* RESYNC_AH req (opcode 0x0023) */
struct masq_msg_resync_ah_req {
	struct masq_hdr hdr;
	struct masq_resync_ah_req body;
};
_Static_assert(sizeof(struct masq_msg_resync_ah_req) == 56, "masq_msg_resync_ah_req: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_resync_ah_req_init(struct masq_msg_resync_ah_req *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_OP_RESYNC_AH, sizeof(*m));
}

static inline int masq_msg_resync_ah_req_decode(const void *buf, size_t len, struct masq_msg_resync_ah_req *m)
{
	int err = masq__decode(buf, len, MASQ_OP_RESYNC_AH, m, sizeof(*m));

	return err ? err : masq_resync_ah_req_validate(&m->body);
}

/* RESYNC_AH reply (opcode 0x0023) */
struct masq_msg_resync_ah_reply {
	struct masq_hdr hdr;
	struct masq_resync_ah_reply body;
};
_Static_assert(sizeof(struct masq_msg_resync_ah_reply) == 24, "masq_msg_resync_ah_reply: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_resync_ah_reply_init(struct masq_msg_resync_ah_reply *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, (MASQ_OP_RESYNC_AH | MASQ_REPLY), sizeof(*m));
}

static inline int masq_msg_resync_ah_reply_decode(const void *buf, size_t len, struct masq_msg_resync_ah_reply *m)
{
	int err = masq__decode(buf, len, (MASQ_OP_RESYNC_AH | MASQ_REPLY), m, sizeof(*m));

	return err ? err : masq_resync_ah_reply_validate(&m->body);
}

/* QP_ERROR notice (opcode 0x4001) */
struct masq_msg_qp_error_notice {
	struct masq_hdr hdr;
	struct masq_qp_error_notice body;
};
_Static_assert(sizeof(struct masq_msg_qp_error_notice) == 24, "masq_msg_qp_error_notice: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_qp_error_notice_init(struct masq_msg_qp_error_notice *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_NOTICE_QP_ERROR, sizeof(*m));
}

static inline int masq_msg_qp_error_notice_decode(const void *buf, size_t len, struct masq_msg_qp_error_notice *m)
{
	int err = masq__decode(buf, len, MASQ_NOTICE_QP_ERROR, m, sizeof(*m));

	return err ? err : masq_qp_error_notice_validate(&m->body);
}

/* CM_EVENT notice (opcode 0x4002) */
struct masq_msg_cm_event_notice {
	struct masq_hdr hdr;
	struct masq_cm_event body;
};
_Static_assert(sizeof(struct masq_msg_cm_event_notice) == 560, "masq_msg_cm_event_notice: size");

/* Zeroed, with the header filled in (request_id 0). */
static inline void masq_msg_cm_event_notice_init(struct masq_msg_cm_event_notice *m)
{
	memset(m, 0, sizeof(*m));
	masq_hdr_init(&m->hdr, MASQ_NOTICE_CM_EVENT, sizeof(*m));
}

static inline int masq_msg_cm_event_notice_decode(const void *buf, size_t len, struct masq_msg_cm_event_notice *m)
{
	int err = masq__decode(buf, len, MASQ_NOTICE_CM_EVENT, m, sizeof(*m));

	return err ? err : masq_cm_event_validate(&m->body);
}
#endif /* MASQ_PROTO_H */
