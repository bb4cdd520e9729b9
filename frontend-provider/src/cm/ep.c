/* Endpoints and the rest of librdmacm's API: create_ep, getaddrinfo, the
 * device list, event names, options, ports, and the ENOSYS stubs. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "internal.h"

/* ------------------------------------------------------------ endpoints */

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct cm_id *c;
	int err;

	if (!id || !res)
		return fail(EINVAL);
	if (masq_cm_create_id(NULL, &cm_id, NULL,
		      res->ai_port_space ? (enum rdma_port_space)res->ai_port_space : RDMA_PS_TCP,
		      res->ai_qp_type ? (enum ibv_qp_type)res->ai_qp_type : IBV_QPT_RC))
		return -1;
	c = cm_of(cm_id);
	if (res->ai_flags & RAI_PASSIVE) {
		if (!res->ai_src_addr) {
			errno = EINVAL;
			goto err;
		}
		if (rdma_bind_addr(cm_id, res->ai_src_addr))
			goto err;
		if (pd)
			cm_id->pd = pd;
		if (qp_init_attr) {
			/* For each rdma_get_request's QP. */
			c->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!c->qp_init_attr) {
				errno = ENOMEM;
				goto err;
			}
			*c->qp_init_attr = *qp_init_attr;
			c->qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
		}
	} else {
		if (rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000) ||
		    rdma_resolve_route(cm_id, 2000))
			goto err;
		if (qp_init_attr) {
			qp_init_attr->qp_type = (enum ibv_qp_type)res->ai_qp_type;
			if (rdma_create_qp(cm_id, pd, qp_init_attr))
				goto err;
		}
	}
	*id = cm_id;
	return 0;
err:
	err = errno;
	rdma_destroy_ep(cm_id);
	return fail(err);
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (!id)
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	rdma_destroy_id(id);
}

/* ------------------------------------------------------------ addrinfo */

static int copy_sockaddr(struct sockaddr **dst, socklen_t *dst_len, const struct sockaddr *src,
			 socklen_t len)
{
	*dst = malloc(len);
	if (!*dst)
		return fail(ENOMEM);
	memcpy(*dst, src, len);
	*dst_len = len;
	return 0;
}

/*
 * IPv4 only, on top of getaddrinfo(3). Like librdmacm, a resolver failure
 * is returned as getaddrinfo's EAI_* code (for gai_strerror), and other
 * failures as -1 with errno.
 */
int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	static const struct rdma_addrinfo none;
	struct rdma_addrinfo *rai;
	struct addrinfo ai_hints, *ai = NULL, *a;
	int ret;

	if (!res || (!node && !service && !hints))
		return fail(EINVAL);
	if (!hints)
		hints = &none;
	if (hints->ai_family != AF_UNSPEC && hints->ai_family != AF_INET)
		return EAI_FAMILY;
	rai = calloc(1, sizeof(*rai));
	if (!rai)
		return fail(ENOMEM);
	rai->ai_flags = hints->ai_flags & RAI_PASSIVE;
	rai->ai_family = AF_INET;
	rai->ai_port_space = hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	rai->ai_qp_type = hints->ai_qp_type	       ? hints->ai_qp_type
			  : rai->ai_port_space == RDMA_PS_UDP ? IBV_QPT_UD
							       : IBV_QPT_RC;

	if (node || service) {
		memset(&ai_hints, 0, sizeof(ai_hints));
		ai_hints.ai_family = AF_INET;
		ai_hints.ai_socktype = SOCK_STREAM;
		ai_hints.ai_protocol = IPPROTO_TCP;
		if (hints->ai_flags & RAI_PASSIVE)
			ai_hints.ai_flags |= AI_PASSIVE;
		if (hints->ai_flags & RAI_NUMERICHOST)
			ai_hints.ai_flags |= AI_NUMERICHOST;
		ret = getaddrinfo(node, service, &ai_hints, &ai);
		if (ret) {
			free(rai);
			return ret;
		}
		for (a = ai; a && a->ai_family != AF_INET; a = a->ai_next)
			;
		if (!a) {
			freeaddrinfo(ai);
			free(rai);
			return EAI_FAMILY;
		}
		ret = rai->ai_flags & RAI_PASSIVE
			      ? copy_sockaddr(&rai->ai_src_addr, &rai->ai_src_len, a->ai_addr,
					      a->ai_addrlen)
			      : copy_sockaddr(&rai->ai_dst_addr, &rai->ai_dst_len, a->ai_addr,
					      a->ai_addrlen);
		if (!ret && a->ai_canonname) {
			char **name = rai->ai_flags & RAI_PASSIVE ? &rai->ai_src_canonname
								  : &rai->ai_dst_canonname;

			*name = strdup(a->ai_canonname);
		}
		freeaddrinfo(ai);
		if (ret)
			goto err;
	} else if (hints->ai_dst_addr && hints->ai_dst_len) {
		if (hints->ai_dst_addr->sa_family != AF_INET) {
			rdma_freeaddrinfo(rai);
			return EAI_FAMILY;
		}
		if (copy_sockaddr(&rai->ai_dst_addr, &rai->ai_dst_len, hints->ai_dst_addr,
				  hints->ai_dst_len))
			goto err;
	}
	if (!rai->ai_src_addr && hints->ai_src_addr && hints->ai_src_len) {
		if (hints->ai_src_addr->sa_family != AF_INET) {
			rdma_freeaddrinfo(rai);
			return EAI_FAMILY;
		}
		if (copy_sockaddr(&rai->ai_src_addr, &rai->ai_src_len, hints->ai_src_addr,
				  hints->ai_src_len))
			goto err;
	}
	*res = rai;
	return 0;
err:
	ret = errno;
	rdma_freeaddrinfo(rai);
	return fail(ret);
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	struct rdma_addrinfo *next;

	for (; res; res = next) {
		next = res->ai_next;
		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
	}
}

/* ------------------------------------------------------------ the rest */

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list = calloc(MASQ_MAX_VDEVS + 1, sizeof(*list));
	int n;

	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	n = masq_cm_devices(list, MASQ_MAX_VDEVS);
	if (num_devices)
		*num_devices = n;
	return list;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list); /* the devices themselves stay open for the process */
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};

	if ((unsigned int)event < sizeof(names) / sizeof(names[0]) && names[event])
		return names[event];
	return "UNKNOWN EVENT";
}

/* The kernel's options and their sizes (ucma_set_option_id): the ACK
 * timeout and TOS are kept for the id's QP attributes; address reuse and
 * IPv6-only binding are accepted (masqd binds the vIP of the endpoint). */
int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen)
{
	struct cm_id *c;

	if (!id)
		return fail(EINVAL);
	if (level != RDMA_OPTION_ID)
		return UNSERVED(ENOSYS, "rdma_set_option: level %d is not served by masq",
				level);
	c = cm_of(id);
	switch (optname) {
	case RDMA_OPTION_ID_TOS:
	case RDMA_OPTION_ID_ACK_TIMEOUT:
		if (!optval || optlen != sizeof(uint8_t))
			return fail(EINVAL);
		pthread_mutex_lock(&masq_cm_ids_lock);
		if (optname == RDMA_OPTION_ID_TOS) {
			c->tos = *(const uint8_t *)optval;
			c->tos_set = 1;
		} else {
			c->ack_timeout = *(const uint8_t *)optval;
			c->ack_timeout_set = 1;
		}
		pthread_mutex_unlock(&masq_cm_ids_lock);
		return 0;
	case RDMA_OPTION_ID_REUSEADDR:
	case RDMA_OPTION_ID_AFONLY:
		if (!optval || optlen != sizeof(int))
			return fail(EINVAL);
		return 0;
	default:
		return UNSERVED(ENOSYS, "rdma_set_option: option %d is not served by masq",
				optname);
	}
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	return id ? 0 : fail(EINVAL);
}

static __be16 port_of(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return ((const struct sockaddr_in *)sa)->sin_port;
	if (sa->sa_family == AF_INET6)
		return ((const struct sockaddr_in6 *)sa)->sin6_port;
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	return port_of(&id->route.addr.src_addr);
}

__be16 rdma_get_dst_port(struct rdma_cm_id *id)
{
	return port_of(&id->route.addr.dst_addr);
}

/* Not served by masq; defined so that a libmasq id never reaches the stock
 * librdmacm. */

int rdma_join_multicast(struct rdma_cm_id *id, struct sockaddr *addr, void *context)
{
	(void)id;
	(void)addr;
	(void)context;
	return UNSERVED(ENOSYS, "rdma_join_multicast: multicast is not served by masq");
}

int rdma_join_multicast_ex(struct rdma_cm_id *id, struct rdma_cm_join_mc_attr_ex *mc_join_attr,
			   void *context)
{
	(void)id;
	(void)mc_join_attr;
	(void)context;
	return UNSERVED(ENOSYS, "rdma_join_multicast_ex: multicast is not served by masq");
}

int rdma_leave_multicast(struct rdma_cm_id *id, struct sockaddr *addr)
{
	(void)id;
	(void)addr;
	return UNSERVED(ENOSYS, "rdma_leave_multicast: multicast is not served by masq");
}

int rdma_create_srq(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	(void)id;
	(void)pd;
	(void)attr;
	return UNSERVED(ENOSYS, "rdma_create_srq: CM SRQs are not served by masq");
}

int rdma_create_srq_ex(struct rdma_cm_id *id, struct ibv_srq_init_attr_ex *attr)
{
	(void)id;
	(void)attr;
	return UNSERVED(ENOSYS, "rdma_create_srq_ex: CM SRQs are not served by masq");
}

void rdma_destroy_srq(struct rdma_cm_id *id)
{
	(void)id; /* there is never one */
}

int rdma_reject_ece(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	(void)id;
	(void)private_data;
	(void)private_data_len;
	return UNSERVED(ENOSYS, "rdma_reject_ece: ECE is not served by masq");
}

/* ECE (enhanced connection establishment) is not carried between the
 * masqds: the peer's is all zeros, as from a device without ECE, and the
 * app's own is accepted and not sent. librdmacm's rules: only for an id
 * whose QP the app made itself. */
int rdma_set_local_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return fail(EINVAL);
	return 0;
}

int rdma_get_remote_ece(struct rdma_cm_id *id, struct ibv_ece *ece)
{
	if (!id || id->qp || !ece)
		return fail(EINVAL);
	memset(ece, 0, sizeof(*ece));
	return 0;
}
