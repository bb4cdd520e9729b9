/*
 * A session's watcher: waits for masqd to hang up, reconnects with backoff
 * and names the session's QPs and AHs again (RESYNC_QP, RESYNC_AH).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "masq_proto.h"

void masq_wake_watcher(struct masq_session *s)
{
	uint64_t one = 1;

	if (s->wake_fd >= 0 && write(s->wake_fd, &one, sizeof(one)) < 0) {
		/* The counter is already non-zero: the watcher will wake. */
	}
}

/*
 * Call under s->lock, on a new session socket not yet published: name every
 * known QP again. masqd checks each against the kernel and the policy; a
 * refusal concerns that QP only. 0, or -errno if the connection failed.
 */
static int resync_all(struct masq_session *s, int sock, uint32_t *next_id, unsigned int *tracked)
{
	struct masq_msg_resync_qp_req req;
	struct masq_msg_resync_qp_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	size_t i;
	int sent, err;

	*tracked = 0;
	for (i = 0; i < s->nqps; i++) {
		const struct masq_qp_info *q = &s->qps[i];

		masq_msg_resync_qp_req_init(&req);
		req.body.qp_handle = q->handle;
		req.body.qp_num = q->qpn;
		req.body.qp_type = q->qp_type;
		req.body.sgid_index = q->sgid_index;
		req.body.has_route = q->has_route;
		memcpy(req.body.dgid, q->dgid, sizeof(req.body.dgid));
		if (masq_resync_qp_req_validate(&req.body))
			continue;
		n = masq_roundtrip(sock, next_id, &req, sizeof(req), -1, buf, &sent, NULL);
		if (n < 0)
			return (int)n; /* the new connection failed too: retry */
		err = masq_msg_resync_qp_reply_decode(buf, (size_t)n, &rep);
		if (!err && rep.body.result == MASQ_RESYNC_TRACKED)
			(*tracked)++;
		if (masq_debug_on())
			masq_log("QP %#x re-registered: %s", q->qpn,
				err ? strerror(-err)
				    : rep.body.result == MASQ_RESYNC_TRACKED ? "tracked"
				    : rep.body.result == MASQ_RESYNC_RESET   ? "reset by masqd"
									     : "not connected");
	}
	return 0;
}

/*
 * Call under s->lock, after resync_all on the same socket: name every
 * address handle again. masqd admits each as it was first, or destroys it
 * (the policy no longer allows it: the app's sends with it then fail, as
 * after a reset). 0, or -errno if the connection failed.
 */
static int resync_ahs(struct masq_session *s, int sock, uint32_t *next_id)
{
	struct masq_msg_resync_ah_req req;
	struct masq_msg_resync_ah_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	size_t i;
	int sent, err;

	for (i = 0; i < s->nahs; i++) {
		masq_msg_resync_ah_req_init(&req);
		req.body.ah_handle = s->ahs[i].handle;
		req.body.ah_attr = s->ahs[i].virt;
		n = masq_roundtrip(sock, next_id, &req, sizeof(req), -1, buf, &sent, NULL);
		if (n < 0)
			return (int)n;
		err = masq_msg_resync_ah_reply_decode(buf, (size_t)n, &rep);
		if (err || rep.body.result != MASQ_RESYNC_TRACKED || masq_debug_on())
			masq_log("address handle %u re-registered: %s", s->ahs[i].handle,
				 err ? strerror(-err)
				 : rep.body.result == MASQ_RESYNC_TRACKED ? "tracked"
									  : "destroyed by masqd");
	}
	return 0;
}

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Run after a session is back on a restarted masqd (its QPs tracked
 * again): the RDMA CM's ids follow them (cm/conn.c). */
static void (*_Atomic reconnect_hook)(void);

void masq_set_reconnect_hook(void (*hook)(void))
{
	reconnect_hook = hook;
}

/* Sleep up to ms, or until woken; drains the wake counter. */
static void nap(struct masq_session *s, int ms)
{
	struct pollfd p = { .fd = s->wake_fd, .events = POLLIN };
	uint64_t v;

	if (poll(&p, 1, ms) > 0 && read(s->wake_fd, &v, sizeof(v)) < 0) {
		/* nothing to drain */
	}
}

static void *watcher_main(void *arg)
{
	struct masq_session *s = arg;
	unsigned int tracked;
	double lost_at = 0;
	int backoff = 0, sock;
	uint32_t next_id, sid, features = 0;
	uint8_t port;

	pthread_mutex_lock(&s->lock);
	while (!s->closing) {
		if (s->fd >= 0 && !s->broken) {
			struct pollfd p[2] = {
				{ .fd = s->fd, .events = POLLRDHUP },
				{ .fd = s->wake_fd, .events = POLLIN },
			};
			uint64_t v;

			pthread_mutex_unlock(&s->lock);
			/* Readiness only: replies are read by the callers. */
			while (poll(p, 2, -1) < 0 && errno == EINTR)
				;
			if ((p[1].revents & POLLIN) && read(s->wake_fd, &v, sizeof(v)) < 0) {
				/* already drained */
			}
			pthread_mutex_lock(&s->lock);
			if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR))
				s->broken = 1;
			continue;
		}
		if (s->fd >= 0) {
			close(s->fd);
			s->fd = -1;
			s->broken = 0;
			lost_at = now_s();
			if (masq_debug_on())
				masq_log("masqd went away; reconnecting");
		}
		pthread_mutex_unlock(&s->lock);
		if (backoff)
			nap(s, backoff);
		/* s->vdev: the same device, which the uverbs fd is of. */
		sock = masq_open_session(s->path, s->cmd_fd, s->vdev, &next_id, &sid, &port,
					 &features);
		pthread_mutex_lock(&s->lock);
		if (s->closing) {
			if (sock >= 0)
				close(sock);
			break;
		}
		if (sock >= 0 && (resync_all(s, sock, &next_id, &tracked) != 0 ||
				  resync_ahs(s, sock, &next_id) != 0)) {
			close(sock);
			sock = -1;
		}
		if (sock < 0) {
			backoff = backoff ? (backoff * 2 > 1000 ? 1000 : backoff * 2) : 10;
			continue;
		}
		s->fd = sock;
		s->next_request = next_id;
		s->session_id = sid;
		s->posted = (features & MASQ_FEATURE_POSTED) != 0;
		(void)port; /* the device's port: unchanged, and read without the lock */
		s->reconnects++;
		backoff = 0;
		pthread_cond_broadcast(&s->cond);
		if (masq_debug_on())
			masq_log("reconnected to masqd (session %u) after %.3f s; "
				 "%u of %zu QP(s) tracked again",
				sid, now_s() - lost_at, tracked, s->nqps);
		if (reconnect_hook) {
			void (*hook)(void) = reconnect_hook;

			pthread_mutex_unlock(&s->lock);
			hook();
			pthread_mutex_lock(&s->lock);
		}
	}
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

int masq_start_watcher(struct masq_session *s)
{
	sigset_t all, old;
	int err;

	s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (s->wake_fd < 0)
		return -errno;
	/* The app's signals (perftest's SIGALRM...) are for its own threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&s->watcher, NULL, watcher_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		close(s->wake_fd);
		s->wake_fd = -1;
		return -err;
	}
	s->has_watcher = 1;
	return 0;
}
