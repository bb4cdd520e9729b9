/*
 * UD address handles through masqd (see ah.h and backend/src/pipeline/ah.rs),
 * ibv_ah_attr on the wire, and the AHs a session remembers to name them
 * again after a restart.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ah.h"
#include "masq_proto.h"

static void v4_mapped(uint8_t gid[16], const uint8_t addr[4])
{
	memset(gid, 0, 16);
	gid[10] = 0xff;
	gid[11] = 0xff;
	memcpy(gid + 12, addr, 4);
}

/* The IPv4 header checksum of 20 bytes, which is 0 over a valid header. */
static uint16_t ipv4_sum(const uint8_t *h)
{
	uint32_t sum = 0;
	int i;

	for (i = 0; i < 20; i += 2)
		sum += (uint32_t)(h[i] << 8 | h[i + 1]);
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)~sum;
}

static int is_ipv4_header(const uint8_t *h)
{
	return h[0] == 0x45;
}

int masq_parse_grh(const struct ibv_grh *grh, struct masq_grh_info *out)
{
	const uint8_t *raw = (const uint8_t *)grh, *ip4 = raw + 20;
	uint32_t vtf = be32toh(grh->version_tclass_flow);
	int v4;

	memset(out, 0, sizeof(*out));
	/* A real IPv6 GRH can look like an IPv4 header in its last 20 bytes
	 * (they are its addresses); only a valid checksum tells them apart,
	 * as libibverbs does. */
	if ((vtf >> 28) != 6)
		v4 = is_ipv4_header(ip4);
	else
		v4 = is_ipv4_header(ip4) && ipv4_sum(ip4) == 0;
	if (v4) {
		v4_mapped(out->sgid, ip4 + 12);
		v4_mapped(out->dgid, ip4 + 16);
		out->traffic_class = ip4[1];
		out->hop_limit = ip4[8];
		return 0;
	}
	if ((vtf >> 28) != 6)
		return EPROTONOSUPPORT;
	memcpy(out->sgid, grh->sgid.raw, 16);
	memcpy(out->dgid, grh->dgid.raw, 16);
	out->traffic_class = (uint8_t)(vtf >> 20);
	out->flow_label = vtf & 0xFFFFF;
	out->hop_limit = grh->hop_limit;
	return 0;
}

int masq_create_ah_admit(struct masq_session *s, const struct ibv_ah_attr *virt,
			 struct ibv_ah_attr *phys, uint32_t *ah_id)
{
	struct masq_msg_create_ah_req req;
	struct masq_msg_create_ah_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	masq_msg_create_ah_req_init(&req);
	masq_ah_attr_to_wire(&req.body.ah_attr, virt);
	if (masq_create_ah_req_validate(&req.body)) {
		masq_log("ibv_create_ah: an attribute is outside its range (sl %u)", virt->sl);
		return EINVAL;
	}
	/* Admitting twice costs nothing: an unbound admission is dropped. */
	n = masq_session_request(s, &req, sizeof(req), buf, 1);
	if (n < 0)
		return (int)-n;
	err = masq_msg_create_ah_reply_decode(buf, (size_t)n, &rep);
	if (err)
		return -err;
	masq_ah_attr_from_wire(phys, &rep.body.ah_attr);
	*ah_id = rep.body.ah_id;
	return 0;
}

int masq_bind_ah(struct masq_session *s, uint32_t ah_id, uint32_t handle,
		 const struct ibv_ah_attr *virt)
{
	struct masq_msg_bind_ah_req req;
	struct masq_msg_bind_ah_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	masq_msg_bind_ah_req_init(&req);
	req.body.ah_id = ah_id;
	req.body.ah_handle = handle;
	n = masq_session_request(s, &req, sizeof(req), buf, 0);
	if (n < 0)
		return (int)-n;
	err = -masq_msg_bind_ah_reply_decode(buf, (size_t)n, &rep);
	return err ? err : masq_session_remember_ah(s, handle, virt);
}

void masq_destroy_ah(struct masq_session *s, uint32_t handle)
{
	struct masq_msg_destroy_ah_req req;
	uint8_t buf[MASQ_MAX_MESSAGE];

	masq_session_forget_ah(s, handle);
	masq_msg_destroy_ah_req_init(&req);
	req.body.ah_handle = handle;
	/* The AH is gone already; the reply only keeps requests in step. */
	(void)masq_session_request(s, &req, sizeof(req), buf, 1);
}

int masq_resolve_grh(struct masq_session *s, uint32_t src_qp, const struct masq_grh_info *g,
		     uint8_t vsgid[16], uint8_t *vindex)
{
	struct masq_msg_resolve_grh_req req;
	struct masq_msg_resolve_grh_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	masq_msg_resolve_grh_req_init(&req);
	req.body.src_qp = src_qp & 0xFFFFFF;
	memcpy(req.body.sgid, g->sgid, 16);
	memcpy(req.body.dgid, g->dgid, 16);
	n = masq_session_request(s, &req, sizeof(req), buf, 1);
	if (n < 0)
		return (int)-n;
	err = masq_msg_resolve_grh_reply_decode(buf, (size_t)n, &rep);
	if (err)
		return -err;
	memcpy(vsgid, rep.body.sgid, 16);
	*vindex = rep.body.sgid_index;
	return 0;
}

int masq_session_remember_ah(struct masq_session *s, uint32_t handle,
			     const struct ibv_ah_attr *virt)
{
	struct masq_ah_info *more;
	size_t cap;
	int err = 0;

	pthread_mutex_lock(&s->lock);
	if (s->nahs == s->cap_ahs) {
		cap = s->cap_ahs ? 2 * s->cap_ahs : 8;
		more = realloc(s->ahs, cap * sizeof(*more));
		if (more) {
			s->ahs = more;
			s->cap_ahs = cap;
		}
	}
	if (s->nahs < s->cap_ahs) {
		s->ahs[s->nahs].handle = handle;
		masq_ah_attr_to_wire(&s->ahs[s->nahs].virt, virt);
		s->nahs++;
	} else {
		err = ENOMEM;
	}
	pthread_mutex_unlock(&s->lock);
	return err;
}

void masq_session_forget_ah(struct masq_session *s, uint32_t handle)
{
	size_t i;

	pthread_mutex_lock(&s->lock);
	for (i = 0; i < s->nahs; i++)
		if (s->ahs[i].handle == handle) {
			s->ahs[i] = s->ahs[--s->nahs];
			break;
		}
	pthread_mutex_unlock(&s->lock);
}

void masq_ah_attr_to_wire(struct masq_ah_attr *w, const struct ibv_ah_attr *ah)
{
	memset(w, 0, sizeof(*w));
	memcpy(w->dgid, ah->grh.dgid.raw, sizeof(w->dgid));
	/* The GRH carries 20 bits and the kernel uses no more (UCX passes
	 * 0xffffffff); the wire takes what the kernel would. */
	w->flow_label = ah->grh.flow_label & 0xFFFFF;
	w->sgid_index = ah->grh.sgid_index;
	w->hop_limit = ah->grh.hop_limit;
	w->traffic_class = ah->grh.traffic_class;
	w->is_global = ah->is_global ? 1 : 0;
	w->dlid = ah->dlid;
	w->sl = ah->sl;
	w->src_path_bits = ah->src_path_bits;
	w->static_rate = ah->static_rate;
	w->port_num = ah->port_num;
}

void masq_ah_attr_from_wire(struct ibv_ah_attr *ah, const struct masq_ah_attr *w)
{
	memset(ah, 0, sizeof(*ah));
	memcpy(ah->grh.dgid.raw, w->dgid, sizeof(ah->grh.dgid.raw));
	ah->grh.flow_label = w->flow_label;
	ah->grh.sgid_index = w->sgid_index;
	ah->grh.hop_limit = w->hop_limit;
	ah->grh.traffic_class = w->traffic_class;
	ah->is_global = w->is_global;
	ah->dlid = w->dlid;
	ah->sl = w->sl;
	ah->src_path_bits = w->src_path_bits;
	ah->static_rate = w->static_rate;
	ah->port_num = w->port_num;
}
