/*
 * What the files of src/cm share and nothing else uses: the id, channel and
 * event structs, the tables and their locks, and the calls between files.
 *
 * The RDMA CM for tenants: libmasq defines librdmacm's entry points itself.
 *
 * In a tenant the kernel's RDMA CM cannot resolve a virtual IP, and
 * librdmacm's kernel device cannot be faked, so the preloaded libmasq's
 * rdma_* definitions win over librdmacm's and carry each "ucma command" to
 * masqd as a CM_* request, on one dedicated connection per process. Each
 * event channel is a socket masqd hands over (SCM_RIGHTS) and pushes
 * CM_EVENT notices on; rdma_get_cm_event turns them into struct
 * rdma_cm_event, doing on the way what librdmacm does in user space (the
 * active side's RTR/RTS/ESTABLISH, new ids for connection requests).
 *
 * QP transitions go through ibv_modify_qp, i.e. libmasq's own: RTR (and any
 * change with an address) to masqd, the others on the app's fd, posted.
 * Only IPv4, RDMA_PS_TCP (RC) and RDMA_PS_UDP (UD: one SIDR exchange that
 * tells the active side the listener's QP) are served; other port spaces,
 * multicast, SRQs and ECE answer ENOSYS, so the stock librdmacm never sees
 * a libmasq id.
 *
 * libibverbs is not linked: the verbs the CM needs and libmasq does not
 * define are looked up at run time (device.c), like libmasq.c does.
 *
 * Errors: the rdma_* entry points fail as librdmacm's do, -1 (or NULL)
 * with errno set (rdma_getaddrinfo: an EAI_* code, or -1 with errno), and
 * so does every function of these files that can fail, the helpers
 * declared here and the static ones alike (fail() sets errno), so an entry
 * point returns a helper's failure as it is. A transport call's -errno and
 * a verb's positive errno (ibv_modify_qp, cmd/) become errno where they
 * arrive; a caller that cleans up before failing keeps errno in a local.
 */
#ifndef MASQ_CM_INTERNAL_H
#define MASQ_CM_INTERNAL_H

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "cm.h"
#include "cmd/ah.h"
#include "cmd/qp.h"
#include "libmasq.h"
#include "masq_proto.h"
#include "transport/transport.h"

#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

_Static_assert(MASQ_CM_PS_TCP == RDMA_PS_TCP, "port space");
_Static_assert(MASQ_CM_PS_UDP == RDMA_PS_UDP, "port space");
_Static_assert(MASQ_CM_UDP_QKEY == RDMA_UDP_QKEY, "UD Q_Key");
_Static_assert(MASQ_CM_EVENT_TIMEWAIT_EXIT == RDMA_CM_EVENT_TIMEWAIT_EXIT, "event numbers");
_Static_assert(MASQ_CM_EVENT_DISCONNECTED == RDMA_CM_EVENT_DISCONNECTED, "event numbers");

static inline int fail(int err)
{
	errno = err;
	return -1;
}

/* What masq does not serve: fail with err, the app's call named in one
 * log line per process and call site (an app may retry in a loop), with
 * err's text. */
#define UNSERVED(err, ...)                                                  \
	({                                                                  \
		static int said_;                                           \
		if (!__atomic_exchange_n(&said_, 1, __ATOMIC_RELAXED)) {    \
			char what_[160];                                    \
			snprintf(what_, sizeof(what_), __VA_ARGS__);        \
			masq_log("%s: %s", what_, strerror(err));           \
		}                                                           \
		fail(err);                                                  \
	})

/* ------------------------------------------------------------ verbs (device.c) */

/* The verbs the CM needs and libmasq does not define, looked up at run time. */
struct masq_cm_verbs {
	struct ibv_pd *(*alloc_pd)(struct ibv_context *);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *);
	int (*destroy_comp_channel)(struct ibv_comp_channel *);
	struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *,
				    int);
	int (*destroy_cq)(struct ibv_cq *);
	struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
	void (*free_device_list)(struct ibv_device **);
	int ok;
};
extern struct masq_cm_verbs masq_cm_vb;

/* Look the verbs up (once): 0, or -1 with errno ENOSYS. */
int masq_cm_have_verbs(void);
struct ibv_qp *masq_cm_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *attr);

/* ------------------------------------------------------------ device (device.c) */

extern pthread_mutex_t masq_cm_dev_lock;
/* The device whose GID table holds IPv4 address addr (network order);
 * device 0 for INADDR_ANY or an address none holds. NULL, with errno set,
 * when no device opens. */
struct ibv_context *masq_cm_device(in_addr_t addr);
/* A uverbs fd of device 0 (the one the CM connection's HELLO names):
 * its context's if the CM opened the devices, else a file of the device
 * opened on its own (the devices stay unopened until an id needs one, so
 * a child forked after the first CM call opens its own). What masqd gets
 * with the CM connection's OPEN_DEVICE, as it serves the CM only to a
 * process that opened a device. -1 with errno set when none opens. */
int masq_cm_device_fd(void);
/* Every device, in order, at most max: how many. */
int masq_cm_devices(struct ibv_context **out, int max);
/* ctx's default PD, for ids and QPs given none; NULL with errno set. */
struct ibv_pd *masq_cm_default_pd(struct ibv_context *ctx);
/* ctx's depth limits (1 for a context that is not a CM device). */
void masq_cm_device_limits(const struct ibv_context *ctx, uint8_t *rd_atom,
			   uint8_t *init_rd_atom);

/* ------------------------------------------------------------ masqd (conn.c) */

/* Send req, get its reply into buf: the reply's length, or -1 with errno. */
ssize_t masq_cm_roundtrip(void *req, size_t len, uint8_t buf[MASQ_MAX_MESSAGE], int *got_fd);
/* The connection of generation lost_generation failed: 0 once a masqd has
 * every channel and id again, or -1 with errno (EAGAIN: not back yet). */
int masq_cm_recover(unsigned int lost_generation);
unsigned int masq_cm_generation(void);
void masq_cm_nap_ms(long ms);

/* One request of kind KIND: 0, or -1 with errno (masqd's status, or why
 * masqd could not be asked). */
#define CM_CALL(KIND, req, rep, got_fd)                                                   \
	({                                                                                \
		uint8_t buf_[MASQ_MAX_MESSAGE];                                           \
		ssize_t n_ = masq_cm_roundtrip(&(req), sizeof(req), buf_, (got_fd));      \
		int e_ = n_ < 0 ? 0 : masq_msg_##KIND##_reply_decode(buf_, (size_t)n_, &(rep)); \
		n_ < 0 ? -1 : e_ ? fail(-e_) : 0;                                        \
	})

/* The same, for the requests that name an id and have no reply body. */
#define CM_ID_CALL(KIND, handle)                                 \
	({                                                       \
		struct masq_msg_##KIND##_req r_;                 \
		struct masq_msg_##KIND##_reply p_;               \
		masq_msg_##KIND##_req_init(&r_);                 \
		r_.body.id = (handle);                           \
		CM_CALL(KIND, r_, p_, NULL);                     \
	})

/* ------------------------------------------------------------ channels, ids */

struct cm_channel {
	struct rdma_event_channel ch; /* what the app holds */
	uint32_t handle;
	uint64_t serial; /* process-unique, never reused */
	unsigned int generation; /* of the masqd connection that serves it */
	struct cm_channel *next;
};

/*
 * An id begins as librdmacm's own struct cma_id_private does (its cma.h,
 * the same from rdma-core v15 to v64), for rsockets: rsocket.c lives inside
 * librdmacm and hands the ids it made through libmasq's rdma_create_id to
 * librdmacm's internal helpers, which libmasq cannot replace and which
 * read the struct behind the id. ucma_complete reads sync (and, for a
 * sync id, waits through the public rdma_get_cm_event, i.e. libmasq's);
 * ucma_max_qpsize reads cma_dev and, when NULL, asks librdmacm's own
 * device list, which it builds with the public verbs (libmasq's virtual
 * device). Nothing else there reads an id's private state
 * (docs/apps.md, "rsockets").
 */
struct cm_id {
	struct rdma_cm_id id; /* what the app holds */
	void *ucma_dev;	      /* cma_id_private.cma_dev: always NULL */
	void *ucma_connect;   /* .connect, .connect_len, .events_completed: unused */
	size_t ucma_connect_len;
	int ucma_events_completed;
	int connect_error; /* the later REJECTED/DISCONNECTED are ours, not the app's */
	int sync;	   /* private channel; calls wait for their event */
	uint32_t handle;
	/* Bound to a loopback address (rdma_bind_addr): held here only, as
	 * masqd serves the endpoint's vIPs; listening or resolving from it
	 * is refused. */
	int loopback;
	unsigned int unacked; /* events reported for this id and not acked yet */
	uint8_t responder_resources, initiator_depth; /* from the connection request */
	struct ibv_qp_init_attr *qp_init_attr;	       /* rdma_create_ep, passive */
	struct ibv_sa_path_rec path;
	/* What a restarted masqd is told of the id (cm_recover), under
	 * ids_lock: MASQ_CM_RESTORE_*, 0 while it holds no port. */
	uint32_t restore, backlog, remote_qpn;
	int active;
	/* INIT, RTR and RTS attributes as the last event carried them
	 * (attr_mask 0: not known), under ids_lock: rdma_init_qp_attr answers
	 * from them without asking masqd. */
	struct masq_cm_qp_attr qp_attrs[3];
	/* rdma_set_option's ACK timeout and type of service, as the kernel's
	 * CM keeps them per id: rdma_init_qp_attr puts them in the RTS
	 * (timeout) and RTR (traffic class) attributes. Under ids_lock. */
	uint8_t ack_timeout, tos;
	uint8_t ack_timeout_set, tos_set;
	/* Held to move id.qp and to destroy it: an event (DISCONNECTED) moves
	 * the QP to ERROR from the thread reading events while another may be
	 * in rdma_destroy_qp, which the kernel's CM makes safe. */
	pthread_mutex_t qp_lock;
	struct cm_id *next;
};

struct cm_event {
	struct rdma_cm_event ev; /* what the app holds */
	struct cm_id *owner;	 /* whose unacked count it is in */
	uint8_t private_data[MASQ_CM_MAX_PRIVATE_DATA];
};

/* librdmacm's struct cma_id_private up to the last field its helpers read
 * of an id libmasq made. */
struct ucma_id_head {
	struct rdma_cm_id id;
	void *cma_dev;
	void *connect;
	size_t connect_len;
	int events_completed;
	int connect_error;
	int sync;
};
_Static_assert(offsetof(struct cm_id, id) == offsetof(struct ucma_id_head, id), "rsockets");
_Static_assert(offsetof(struct cm_id, ucma_dev) == offsetof(struct ucma_id_head, cma_dev),
	       "rsockets: ucma_max_qpsize reads cma_dev");
_Static_assert(offsetof(struct cm_id, sync) == offsetof(struct ucma_id_head, sync),
	       "rsockets: ucma_complete reads sync");

static inline struct cm_id *cm_of(struct rdma_cm_id *id)
{
	return container_of(id, struct cm_id, id);
}

/* An RDMA_PS_UDP id: its "connection" is one SIDR exchange. */
static inline int is_ud(const struct cm_id *c)
{
	return c->id.ps == RDMA_PS_UDP;
}

static inline uint32_t channel_handle(struct rdma_event_channel *ch)
{
	return container_of(ch, struct cm_channel, ch)->handle;
}

/* The channels and ids not destroyed yet (table.c), each under its lock;
 * fork_prepare (conn.c) takes every lock in a fixed order. */
extern pthread_mutex_t masq_cm_channels_lock;
extern struct cm_channel *masq_cm_channels;
extern pthread_mutex_t masq_cm_ids_lock;
extern pthread_cond_t masq_cm_ids_cond;
extern struct cm_id *masq_cm_ids;

/* table.c */
int masq_cm_channel_live(uint64_t serial);
unsigned int masq_cm_channel_generation(uint64_t serial, unsigned int set);
struct cm_id *masq_cm_lookup_id(uint32_t handle);
void masq_cm_insert_id(struct cm_id *c);

/* id.c */
void masq_cm_set_restore(struct cm_id *c, uint32_t state);
void masq_cm_attach_device(struct cm_id *c);
struct cm_id *masq_cm_alloc_id(struct rdma_event_channel *channel, void *context,
			       enum rdma_port_space ps, enum ibv_qp_type qp_type);
int masq_cm_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		      enum rdma_port_space ps, enum ibv_qp_type qp_type);

/* event.c */
int masq_cm_process_event(const struct masq_cm_event *n, struct cm_event *e);
int masq_cm_complete(struct cm_id *c, enum rdma_cm_event_type want, enum rdma_cm_event_type or);

/* qp.c */
void masq_cm_keep_qp_attrs(struct cm_id *c, const struct masq_cm_event *n);
int masq_cm_modify_qp(struct rdma_cm_id *id, enum ibv_qp_state state, uint8_t depth);
int masq_cm_qp_to_error(struct rdma_cm_id *id);
int masq_cm_id_move_qp(struct cm_id *c, const struct masq_cm_conn_param *accept);

#endif
