/*
 * Address handles through masqd (cmd/ah.c): the client side of CREATE_AH,
 * BIND_AH, DESTROY_AH and RESOLVE_GRH, and the reading of a received
 * packet's GRH (which carries physical addresses).
 *
 * Errors: 0 or a positive errno value, never errno, as in all of cmd/
 * (see qp.h).
 */
#ifndef MASQ_CMD_AH_H
#define MASQ_CMD_AH_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include "masq_proto.h"
#include "transport/transport.h"

/* What a received GRH says, IPv4 or IPv6 alike; GIDs IPv4-mapped. */
struct masq_grh_info {
	uint8_t sgid[16];
	uint8_t dgid[16];
	uint32_t flow_label;
	uint8_t traffic_class;
	uint8_t hop_limit;
};

/*
 * Read the 40 bytes a UD receive puts first. RoCE v2 over IPv4 leaves the
 * IPv4 header in the last 20 (the first 20 unused); over IPv6 it is a GRH.
 * 0, or EPROTONOSUPPORT when it is neither.
 */
int masq_parse_grh(const struct ibv_grh *grh, struct masq_grh_info *out);

/* The rest return 0 or a positive errno value. */

/* Admit `virt` (virtual dgid and sgid index): the physical attributes
 * for the provider, and the admission's id for masq_bind_ah. */
int masq_create_ah_admit(struct masq_session *s, const struct ibv_ah_attr *virt,
			 struct ibv_ah_attr *phys, uint32_t *ah_id);
/* The provider made admission ah_id's AH, kernel handle `handle`, from
 * the app's `virt` (remembered, to name the AH again after a restart). */
int masq_bind_ah(struct masq_session *s, uint32_t ah_id, uint32_t handle,
		 const struct ibv_ah_attr *virt);
void masq_destroy_ah(struct masq_session *s, uint32_t handle);
/* The sender of a received packet: its virtual GID, and the index of this
 * endpoint's virtual GID it was sent to. */
int masq_resolve_grh(struct masq_session *s, uint32_t src_qp, const struct masq_grh_info *g,
		     uint8_t vsgid[16], uint8_t *vindex);

/* struct ibv_ah_attr <-> the wire (the global route flattened in). */
void masq_ah_attr_to_wire(struct masq_ah_attr *w, const struct ibv_ah_attr *ah);
void masq_ah_attr_from_wire(struct ibv_ah_attr *ah, const struct masq_ah_attr *w);

/* Remember the AH of kernel handle `handle`, made from `virt` (for
 * RESYNC_AH), or forget it. ENOMEM, or 0. */
int masq_session_remember_ah(struct masq_session *s, uint32_t handle,
			     const struct ibv_ah_attr *virt);
void masq_session_forget_ah(struct masq_session *s, uint32_t handle);

#endif
