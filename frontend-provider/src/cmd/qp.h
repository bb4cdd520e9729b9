/*
 * QP commands (cmd/qp.c): ibv_qp_attr on the wire, modify/query/destroy
 * through masqd or posted (QP_MOVED), and the CM's accept/establish.
 *
 * Errors in cmd/ (qp.c, ah.c, and their static helpers): 0 or a positive
 * errno value, as ibv_modify_qp and ibv_query_qp return, never errno; a
 * transport call's -errno is negated where it arrives.
 */
#ifndef MASQ_CMD_QP_H
#define MASQ_CMD_QP_H

#include <infiniband/verbs.h>
#include <stdint.h>

#include "masq_proto.h"
#include "transport/transport.h"

/* struct ibv_qp_attr <-> the wire: to_wire copies only the fields of mask
 * and zeroes the rest; from_wire fills every field the wire carries except
 * the capabilities, en_sqd_async_notify, rate_limit and the alternate path. */
void masq_qp_attr_to_wire(struct masq_qp_attr *w, const struct ibv_qp_attr *a, int mask);
void masq_qp_attr_from_wire(struct ibv_qp_attr *a, const struct masq_qp_attr *w);

/* These return 0 or a positive errno value. */
int masq_modify_qp(struct masq_session *s, struct ibv_qp *qp, const struct ibv_qp_attr *attr,
		   int attr_mask);
int masq_query_qp(struct masq_session *s, struct ibv_qp *qp, struct ibv_qp_attr *attr,
		  int attr_mask);
void masq_destroy_qp(struct masq_session *s, uint32_t qp_handle, uint32_t qp_num);

/*
 * Whether this ibv_modify_qp carries no address, so the app runs it on its
 * own fd and masqd only hears of it (masq_qp_moved): no AV, alternate path,
 * path migration or destination QPN, no other port than the served one, no
 * privileged Q_Key, only attributes masqd knows, and not a move to RTR.
 */
int masq_modify_is_local(const struct masq_session *s, const struct ibv_qp_attr *attr,
			 int attr_mask);

/* After such a change succeeded: remember the QP (for RESYNC_QP) and post
 * QP_MOVED, without waiting. */
void masq_qp_moved(struct masq_session *s, struct ibv_qp *qp, const struct ibv_qp_attr *attr,
		   int attr_mask);

/*
 * CM_ACCEPT_QP (accept: the app's connection parameters) or, with accept
 * NULL, CM_ESTABLISH_QP for CM id `id`: masqd moves qp to RTR and RTS with
 * the id's attributes and accepts or establishes, in one round trip. rtr is
 * what the id's event said RTR would be (remembered for RESYNC_QP, as a
 * MODIFY_QP's address is). Not sent again once masqd may have seen it.
 */
int masq_cm_move_qp(struct masq_session *s, struct ibv_qp *qp, uint32_t id,
		    const struct masq_cm_conn_param *accept, const struct masq_cm_qp_attr *rtr);

#endif
