/* The process's one CM connection to masqd: requests on it, its
 * generations, what a restarted masqd is told again, and fork(). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* The process's one CM connection, opened on first use; requests are
 * serialized on it. conn_generation counts the connections opened: one
 * after the first means masqd went away and came back (cm_recover). */
static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static struct masq_conn conn = { .fd = -1 };
static unsigned int conn_generation;
/* Held by the thread that restores what a restarted masqd forgot. */
static pthread_mutex_t recover_lock = PTHREAD_MUTEX_INITIALIZER;

/* One request on the connection of generation *gen (opened if there is
 * none yet): the reply's length, or -1 with errno. *gen is the generation
 * used. Device 0's file is found first, as the connection opens device 0 with
 * masqd before its first request (taken before conn_lock: finding it
 * talks to masqd, and a fork takes the device lock first). */
static ssize_t cm_call_once(void *req, size_t len, uint8_t buf[MASQ_MAX_MESSAGE], int *got_fd,
			    unsigned int *gen)
{
	int dev_fd = masq_cm_device_fd(), dev_err = errno;
	ssize_t n;
	int err;

	pthread_mutex_lock(&conn_lock);
	if (conn.fd < 0 && conn_generation == 0) {
		if (dev_fd < 0) {
			pthread_mutex_unlock(&conn_lock);
			masq_log("RDMA CM: no device to open with masqd: %s", strerror(dev_err));
			return fail(dev_err);
		}
		if ((err = masq_conn_open(&conn, dev_fd)) != 0) {
			pthread_mutex_unlock(&conn_lock);
			masq_log("cannot reach masqd at %s: %s", masq_socket_path(),
				 strerror(-err));
			return fail(-err);
		}
		conn_generation = 1;
	}
	*gen = conn_generation;
	n = conn.fd < 0 ? -ECONNRESET : masq_conn_call(&conn, req, len, buf, got_fd);
	pthread_mutex_unlock(&conn_lock);
	return n < 0 ? fail((int)-n) : n;
}

/* Send req, get its reply into buf: the reply's length, or -1 with errno.
 * A masqd that went away is reconnected to and told every channel and id
 * again first; the request then goes to it (the old one took whatever
 * it had done of the request with it). */
ssize_t masq_cm_roundtrip(void *req, size_t len, uint8_t buf[MASQ_MAX_MESSAGE], int *got_fd)
{
	unsigned int gen;
	ssize_t n;

	if (got_fd)
		*got_fd = -1;
	n = cm_call_once(req, len, buf, got_fd, &gen);
	if (n >= 0 || errno != ECONNRESET)
		return n;
	if (masq_cm_recover(gen) != 0)
		return fail(ECONNRESET);
	return cm_call_once(req, len, buf, got_fd, &gen);
}

/*
 * masqd went away (it was restarted): its channels' sockets and the CM
 * connection closed. As libmasq's session watchers do for QPs, the first
 * thread to notice reconnects and names every channel and id again, under
 * their old numbers; masqd checks each claim (a connected id must be the
 * connection it tracks again for the app's own QP). A channel's new event
 * socket takes the old one's fd number (dup2, with the app's flags), so an
 * app polling or blocked on channel->fd carries on. A handshake in flight
 * is lost: its id gets CONNECT_ERROR.
 */
struct channel_snap {
	uint32_t handle;
	uint64_t serial;
	int fd;
};

struct id_snap {
	struct masq_cm_restore_id_req req;
	uint32_t handle;
};

unsigned int masq_cm_generation(void)
{
	unsigned int g;

	pthread_mutex_lock(&conn_lock);
	g = conn_generation;
	pthread_mutex_unlock(&conn_lock);
	return g;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void masq_cm_nap_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Restore one channel on the new connection (conn_lock held): 0, or -1
 * with errno. */
static int restore_channel(const struct channel_snap *c)
{
	struct masq_msg_cm_restore_channel_req req;
	struct masq_msg_cm_restore_channel_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	int fd = -1, err, fl, fdfl;
	ssize_t n;

	masq_msg_cm_restore_channel_req_init(&req);
	req.body.channel = c->handle;
	n = masq_conn_call(&conn, &req, sizeof(req), buf, &fd);
	err = n < 0 ? (int)n : masq_msg_cm_restore_channel_reply_decode(buf, (size_t)n, &rep);
	if (!err && fd < 0)
		err = -EPROTO;
	/* A channel the app destroys meanwhile waits for conn_lock before it
	 * closes its fd: if it is still listed, its fd is still its own. */
	if (!err && masq_cm_channel_live(c->serial)) {
		fl = fcntl(c->fd, F_GETFL);
		fdfl = fcntl(c->fd, F_GETFD);
		if (dup2(fd, c->fd) < 0)
			err = -errno;
		else if ((fl >= 0 && fcntl(c->fd, F_SETFL, fl) < 0) ||
			 (fdfl >= 0 && fcntl(c->fd, F_SETFD, fdfl) < 0))
			err = -errno;
		else
			(void)masq_cm_channel_generation(c->serial, conn_generation);
	}
	if (fd >= 0)
		close(fd);
	return err ? fail(-err) : 0;
}

/* Restore one id (conn_lock held), retrying while masqd does not track
 * its QP yet (the session watcher re-registers it): 0, or -1 with errno. */
static int restore_id(struct id_snap *s, double deadline)
{
	struct masq_msg_cm_restore_id_req req;
	struct masq_msg_cm_restore_id_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	ssize_t n;
	int err;

	for (;;) {
		masq_msg_cm_restore_id_req_init(&req);
		req.body = s->req;
		n = masq_conn_call(&conn, &req, sizeof(req), buf, NULL);
		err = n < 0 ? (int)n : masq_msg_cm_restore_id_reply_decode(buf, (size_t)n, &rep);
		if (err != -EAGAIN || now_s() > deadline)
			return err ? fail(-err) : 0;
		masq_cm_nap_ms(50);
	}
}

/* What a restarted masqd is told of: 0, or -1 with errno ENOMEM. */
static int snapshot(struct channel_snap **chans, size_t *nch, struct id_snap **snaps, size_t *nid)
{
	struct cm_channel *ch;
	struct cm_id *c;
	size_t n = 0;

	pthread_mutex_lock(&masq_cm_channels_lock);
	for (ch = masq_cm_channels; ch; ch = ch->next)
		n++;
	*chans = calloc(n ? n : 1, sizeof(**chans));
	for (ch = masq_cm_channels, n = 0; *chans && ch; ch = ch->next, n++)
		(*chans)[n] = (struct channel_snap){ ch->handle, ch->serial, ch->ch.fd };
	*nch = n;
	pthread_mutex_unlock(&masq_cm_channels_lock);

	pthread_mutex_lock(&masq_cm_ids_lock);
	for (c = masq_cm_ids, n = 0; c; c = c->next)
		n++;
	*snaps = calloc(n ? n : 1, sizeof(**snaps));
	for (c = masq_cm_ids, n = 0; *snaps && c; c = c->next, n++) {
		struct masq_cm_restore_id_req *r = &(*snaps)[n].req;

		(*snaps)[n].handle = c->handle;
		r->id = c->handle;
		r->channel = channel_handle(c->id.channel);
		r->port_space = is_ud(c) ? MASQ_CM_PS_UDP : MASQ_CM_PS_TCP;
		r->state = c->restore ? c->restore : MASQ_CM_RESTORE_BOUND;
		if (r->state == MASQ_CM_RESTORE_CONNECTED && !c->id.qp)
			r->state = MASQ_CM_RESTORE_BOUND; /* its QP is gone */
		r->active = c->active ? 1 : 0;
		r->backlog = c->backlog;
		r->qp_num = c->id.qp ? c->id.qp->qp_num & 0xffffff : 0;
		r->remote_qpn = c->remote_qpn & 0xffffff;
		if (c->restore)
			masq_cm_addr_to_wire(&r->addrs.src, &c->id.route.addr.src_sin);
		/* An answered UD request holds nothing: its port is its listener's. */
		if (is_ud(c) && !c->active && r->state == MASQ_CM_RESTORE_BOUND)
			r->addrs.src.port = 0;
		if (r->state == MASQ_CM_RESTORE_CONNECTED)
			masq_cm_addr_to_wire(&r->addrs.dst, &c->id.route.addr.dst_sin);
	}
	*nid = n;
	pthread_mutex_unlock(&masq_cm_ids_lock);
	if (!*chans || !*snaps) {
		free(*chans);
		free(*snaps);
		return fail(ENOMEM);
	}
	return 0;
}

/* Whether the CM connection is gone (conn_lock held): masqd exited. A
 * channel closed by a masqd that is still there is not a restart, and
 * reconnecting would make it close every id of this process. An exiting
 * masqd's fds close one by one: the channel's EOF can wake us before the
 * connection's, so it gets CONN_HANGUP_WAIT_MS to follow. */
#define CONN_HANGUP_WAIT_MS 2000
static int conn_dead(void)
{
	struct pollfd p = { .fd = conn.fd, .events = POLLRDHUP };
	double deadline = now_s() + CONN_HANGUP_WAIT_MS / 1000.0;
	int n;

	if (conn.fd < 0)
		return 1;
	do {
		double left_ms = (deadline - now_s()) * 1000;

		n = poll(&p, 1, left_ms > 0 ? (int)left_ms : 0);
	} while (n < 0 && errno == EINTR);
	return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The connection of generation `lost` failed: 0 once a masqd has every
 * channel and id again (by this thread or another), or -1 with errno. */
int masq_cm_recover(unsigned int lost)
{
	struct channel_snap *chans = NULL;
	struct id_snap *snaps = NULL;
	size_t nch = 0, nid = 0, i, restored = 0;
	double started = now_s(), deadline = started + (double)masq_reconnect_wait_ms() / 1000;
	int err = 0, dev_fd;

	pthread_mutex_lock(&recover_lock);
	if (masq_cm_generation() != lost)
		goto out; /* another thread did it */
	/* The new masqd opens the device again before any restore. */
	if ((dev_fd = masq_cm_device_fd()) < 0) {
		err = errno;
		goto out;
	}
	if (snapshot(&chans, &nch, &snaps, &nid) != 0) {
		err = errno;
		goto out;
	}
	pthread_mutex_lock(&conn_lock);
	if (!conn_dead()) {
		pthread_mutex_unlock(&conn_lock);
		err = ECONNRESET;
		goto out;
	}
	masq_conn_close(&conn);
	while ((err = masq_conn_open(&conn, dev_fd)) != 0 && now_s() < deadline)
		masq_cm_nap_ms(50);
	if (err) {
		pthread_mutex_unlock(&conn_lock);
		if (masq_debug_on())
			masq_log("CM: masqd went away and is not back yet: %s", strerror(-err));
		err = EAGAIN; /* the conn stays dead: a later call tries again */
		goto out;
	}
	conn_generation++;
	/* The ids' QPs come back with the session watchers, which start only
	 * now that masqd answers: their wait starts now too, not when masqd
	 * went away (a slow restart left them no time at all). */
	deadline = now_s() + (double)masq_reconnect_wait_ms() / 1000;
	for (i = 0; i < nch; i++)
		if (restore_channel(&chans[i]) != 0)
			masq_log("CM channel %u not restored: %s", chans[i].handle, strerror(errno));
	for (i = 0; i < nid; i++) {
		if (restore_id(&snaps[i], deadline) != 0)
			masq_log("CM id %u not restored: %s", snaps[i].handle, strerror(errno));
		else
			restored++;
	}
	pthread_mutex_unlock(&conn_lock);
	if (masq_debug_on())
		masq_log("CM: masqd back after %.3f s; %zu channel(s), %zu of %zu id(s) restored",
			 now_s() - started, nch, restored, nid);
out:
	pthread_mutex_unlock(&recover_lock);
	free(chans);
	free(snaps);
	return err ? fail(err) : 0;
}

/*
 * fork(): masqd knows a process by its CM connection (ids, channels and
 * ports belong to it), while the kernel's CM knows each event channel by
 * its own rdma_cm file. A child that kept the parent's connection would
 * share it with the parent and its siblings: their replies cross (each
 * process holds its own copy of conn_lock), and the ids a child creates
 * would outlive it, holding their ports until the parent exits. So the
 * child drops its copy and opens a connection of its own on its first CM
 * call, as a fresh rdma_cm file would be. The locks are taken across
 * fork() so the child never inherits one held by a thread it does not
 * have (masqd answers each request at once, so none is held for long).
 */
static void fork_prepare(void)
{
	pthread_mutex_lock(&recover_lock);
	pthread_mutex_lock(&masq_cm_dev_lock);
	pthread_mutex_lock(&masq_cm_channels_lock);
	pthread_mutex_lock(&masq_cm_ids_lock);
	pthread_mutex_lock(&conn_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&conn_lock);
	pthread_mutex_unlock(&masq_cm_ids_lock);
	pthread_mutex_unlock(&masq_cm_channels_lock);
	pthread_mutex_unlock(&masq_cm_dev_lock);
	pthread_mutex_unlock(&recover_lock);
}

static void fork_child(void)
{
	masq_conn_close(&conn); /* the parent's stays open */
	conn_generation = 0;	/* a connection of its own, not a restart */
	fork_parent();
}

/* A session's watcher is back on a restarted masqd, its QPs tracked
 * again: restore the ids now, not at the app's next CM call (an app idle
 * in the CM would miss its peer's DISCONNECTED meanwhile). */
static void after_reconnect(void)
{
	unsigned int gen = masq_cm_generation();

	if (gen)
		(void)masq_cm_recover(gen);
}

__attribute__((constructor)) static void register_fork_handlers(void)
{
	pthread_atfork(fork_prepare, fork_parent, fork_child);
	masq_set_reconnect_hook(after_reconnect);
}
