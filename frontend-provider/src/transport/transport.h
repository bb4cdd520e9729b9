/*
 * src/transport: the frontend's side of the masq protocol: one SOCK_SEQPACKET connection
 * to masqd per opened device context (a session), synchronous request /
 * reply, messages as defined in include/masq_proto.h.
 *
 * Recovery: a watcher thread per session waits (poll, no reads) for masqd
 * to hang up, then reconnects with backoff, redoes HELLO + OPEN_DEVICE with
 * the same uverbs fd and names every QP it has seen again (RESYNC_QP),
 * then every address handle (RESYNC_AH), before requests may use the new
 * connection. Only the calling threads
 * ever read the socket, one at a time under `lock`, so replies cannot be
 * taken by the watcher. Control verbs that need masqd while it is away
 * wait for the reconnection up to MASQ_RECONNECT_WAIT_MS (default 10000),
 * then fail with EAGAIN; posting and polling never involve masqd.
 *
 * Errors: every function here that can fail returns 0 (or a length, a
 * count, a descriptor) or a negative errno value, and none of them reports
 * through errno; the verbs-facing callers (libmasq.c, cmd/, cm/) turn that
 * into what their verb returns.
 *
 * QP changes that carry no address (to INIT, RTS, SQD, ERROR, RESET...)
 * run on the app's own fd and are posted to masqd (QP_MOVED), as are
 * destroys (QP_DESTROYED): masqd sends no reply to posted requests and
 * learns the QP's state from the kernel.
 */
#ifndef MASQ_TRANSPORT_H
#define MASQ_TRANSPORT_H

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include "masq_proto.h"

#define MASQ_MAX_GIDS 16
#define MASQ_DEFAULT_SOCKET "/run/masq/masq.sock"
/* Virtual devices (rails) libmasq shows at most; masqd may count more. */
#define MASQ_MAX_VDEVS 8

/* What masqd says about one of the endpoint's virtual devices. */
struct masq_device {
	char vdev_name[64];
	char phys_dev_name[64];
	uint64_t node_guid;
	uint64_t sys_image_guid;
	uint8_t phys_port;
	uint8_t gid_count;
	uint8_t vdev;	    /* its index, the N of vrdmaN: what HELLO names */
	uint8_t vdev_count; /* the endpoint's devices: 1 from an older masqd */
};

struct masq_gid {
	uint32_t index;
	uint32_t type; /* enum ibv_gid_type */
	uint8_t gid[16];
};

/* What the frontend remembers of a QP, to name it again after a restart. */
struct masq_qp_info {
	uint32_t handle;
	uint32_t qpn;
	uint32_t qp_type;
	uint8_t sgid_index; /* virtual, as the app set it */
	uint8_t has_route;
	uint8_t dgid[16]; /* virtual, as the app set it */
};

/* What the frontend remembers of an address handle, to name it again. */
struct masq_ah_info {
	uint32_t handle;
	struct masq_ah_attr virt; /* as the app created it */
};

struct masq_session {
	int fd;		/* -1 while masqd is away */
	int broken;	/* fd hung up; the watcher replaces it */
	int closing;
	int cmd_fd;	/* the context's uverbs fd, passed again on reconnection */
	int wake_fd;	/* eventfd: wakes the watcher */
	int has_watcher;
	pthread_t watcher;
	char path[108];
	uint8_t port;
	uint8_t vdev;	/* the virtual device served, named in every HELLO */
	int posted;	/* masqd takes posted requests (FEATURE_POSTED) */
	uint32_t session_id;
	uint32_t next_request;
	unsigned long reconnects;
	struct masq_qp_info *qps;
	size_t nqps, cap_qps;
	struct masq_ah_info *ahs;
	size_t nahs, cap_ahs;
	pthread_mutex_t lock; /* everything above; held across a request */
	pthread_cond_t cond;  /* signalled when fd is usable again or closing */
};

/* $MASQ_SOCKET, or MASQ_DEFAULT_SOCKET. */
const char *masq_socket_path(void);

/* One line on stderr, prefixed "libmasq: ". */
void masq_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* MASQ_DEBUG is set: log what recovers without the app noticing. */
int masq_debug_on(void);
/* How long calls wait for a masqd that went away (MASQ_RECONNECT_WAIT_MS). */
long masq_reconnect_wait_ms(void);
/* hook runs on a session's watcher each time it is back on a restarted
 * masqd, after its QPs are registered again (NULL: none). */
void masq_set_reconnect_hook(void (*hook)(void));

/*
 * The endpoint's virtual devices, each described by a HELLO on a
 * short-lived connection: device 0 first, then the others it counts (at
 * most max, >= 1); an older masqd counts one and never hears another
 * named. How many are in out, in vdev order (one masqd refuses is left
 * out), or -errno when device 0 could not be described.
 */
int masq_describe_devices(struct masq_device *out, unsigned int max);

/*
 * A plain connection: HELLO, OPEN_DEVICE and then the caller's requests
 * (the RDMA CM's), no watcher, no reconnection. The caller serializes
 * calls.
 */
struct masq_conn {
	int fd; /* -1 when closed */
	uint32_t next_request;
};

/* Connect, HELLO naming device 0 and OPEN_DEVICE with cmd_fd, the uverbs
 * fd of a context of device 0 the process opened. 0 or -errno. */
int masq_conn_open(struct masq_conn *c, int cmd_fd);
void masq_conn_close(struct masq_conn *c);

/*
 * Send req and receive its reply into buf: the reply's length (to check
 * with its masq_msg_*_decode), or -errno; -ECONNRESET once masqd is gone,
 * after which the connection is closed. got_fd (may be NULL) receives a
 * descriptor the reply carried, or -1.
 */
ssize_t masq_conn_call(struct masq_conn *c, void *req, size_t len, uint8_t buf[MASQ_MAX_MESSAGE],
		       int *got_fd);

/* Connect, HELLO naming virtual device vdev, and hand masqd the context's
 * uverbs fd (that device's physical one); start the watcher unless `watch`
 * is 0. 0 or -errno. */
int masq_session_open(struct masq_session *s, int cmd_fd, uint8_t vdev, int watch);
void masq_session_close(struct masq_session *s);

/* 0 or -errno. */
int masq_query_gid_table(struct masq_session *s, struct masq_gid *gids, unsigned int *n);

/* One request on the session (under its lock): the reply's length in buf,
 * or -errno, as masq_conn_call. A request that is not `idempotent` is not
 * sent again once masqd may have seen it. */
ssize_t masq_session_request(struct masq_session *s, void *req, size_t len,
			     uint8_t buf[MASQ_MAX_MESSAGE], int idempotent);

/* For the command files (src/cmd), which hold s->lock across more than one
 * request: masq_session_request without the locking (pass_fd -1 or a
 * descriptor to pass), and a posted request, which gets no reply. */
ssize_t masq_session_call(struct masq_session *s, void *req, size_t len, int pass_fd,
			  uint8_t buf[MASQ_MAX_MESSAGE], int idempotent);
void masq_session_post(struct masq_session *s, void *req, size_t len);

#endif
