/*
 * A session on masqd (see transport.h): open, close, and its requests,
 * which wait for a masqd that went away. The socket is conn.c's, the
 * watcher that reconnects reconnect.c's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "masq_proto.h"

/* Call under s->lock: wait until the connection is usable. 0, -EAGAIN
 * after `deadline`, or -ENOTCONN when there will be none. */
static int wait_connected(struct masq_session *s, const struct timespec *deadline)
{
	while (s->fd < 0 || s->broken) {
		if (s->closing || !s->has_watcher)
			return -ENOTCONN;
		if (pthread_cond_timedwait(&s->cond, &s->lock, deadline) == ETIMEDOUT &&
		    (s->fd < 0 || s->broken))
			return -EAGAIN;
	}
	return 0;
}

/*
 * Call under s->lock; returns the reply length or -errno. When masqd goes
 * away, a request that never left is sent again on the next connection;
 * one that left is sent again only if `idempotent`, else the caller gets
 * -ECONNRESET and decides (masqd may have acted on it).
 */
ssize_t masq_session_call(struct masq_session *s, void *req, size_t len, int pass_fd,
			  uint8_t buf[MASQ_MAX_MESSAGE], int idempotent)
{
	struct timespec deadline;
	long ms = masq_reconnect_wait_ms();
	ssize_t n;
	int sent, err;

	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += ms / 1000;
	deadline.tv_nsec += (ms % 1000) * 1000000L;
	if (deadline.tv_nsec >= 1000000000L) {
		deadline.tv_sec++;
		deadline.tv_nsec -= 1000000000L;
	}
	for (;;) {
		err = wait_connected(s, &deadline);
		if (err)
			return err;
		n = masq_roundtrip(s->fd, &s->next_request, req, len, pass_fd, buf, &sent, NULL);
		if (n >= 0 || !masq_lost(n))
			return n;
		/* Only the watcher closes the socket (it may be polling it). */
		s->broken = 1;
		masq_wake_watcher(s);
		if (sent && !idempotent)
			return -ECONNRESET;
	}
}

int masq_session_open(struct masq_session *s, int cmd_fd, uint8_t vdev, int watch)
{
	const char *path = masq_socket_path();
	uint32_t features = 0;
	int sock, err;

	memset(s, 0, sizeof(*s));
	s->fd = -1;
	s->wake_fd = -1;
	s->cmd_fd = cmd_fd;
	s->vdev = vdev;
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->cond, NULL);
	if (strlen(path) >= sizeof(s->path))
		return -ENAMETOOLONG;
	strcpy(s->path, path);
	sock = masq_open_session(s->path, cmd_fd, vdev, &s->next_request, &s->session_id,
				 &s->port, &features);
	if (sock < 0)
		return sock;
	s->fd = sock;
	s->posted = (features & MASQ_FEATURE_POSTED) != 0;
	if (watch && (err = masq_start_watcher(s)) != 0 && masq_debug_on())
		masq_log("no reconnection watcher: %s", strerror(-err));
	return 0;
}

void masq_session_close(struct masq_session *s)
{
	pthread_mutex_lock(&s->lock);
	s->closing = 1;
	pthread_cond_broadcast(&s->cond);
	pthread_mutex_unlock(&s->lock);
	if (s->has_watcher) {
		masq_wake_watcher(s);
		pthread_join(s->watcher, NULL);
		s->has_watcher = 0;
	}
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	s->wake_fd = -1;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
	free(s->qps);
	s->qps = NULL;
	s->nqps = s->cap_qps = 0;
	free(s->ahs);
	s->ahs = NULL;
	s->nahs = s->cap_ahs = 0;
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->lock);
}

int masq_query_gid_table(struct masq_session *s, struct masq_gid *gids, unsigned int *n_out)
{
	struct masq_msg_query_gid_table_req req;
	struct masq_msg_query_gid_table_reply rep;
	uint8_t buf[MASQ_MAX_MESSAGE];
	unsigned int i;
	ssize_t n;
	int err;

	masq_msg_query_gid_table_req_init(&req);
	pthread_mutex_lock(&s->lock);
	req.body.port = s->port;
	n = masq_session_call(s, &req, sizeof(req), -1, buf, 1);
	pthread_mutex_unlock(&s->lock);
	if (n < 0)
		return (int)n;
	err = masq_msg_query_gid_table_reply_decode(buf, (size_t)n, &rep);
	if (err)
		return err;
	for (i = 0; i < rep.body.count && i < MASQ_MAX_GIDS; i++) {
		gids[i].index = rep.body.entries[i].index;
		gids[i].type = rep.body.entries[i].gid_type;
		memcpy(gids[i].gid, rep.body.entries[i].gid, sizeof(gids[i].gid));
	}
	*n_out = i;
	return 0;
}

ssize_t masq_session_request(struct masq_session *s, void *req, size_t len,
			     uint8_t buf[MASQ_MAX_MESSAGE], int idempotent)
{
	ssize_t n;

	pthread_mutex_lock(&s->lock);
	n = masq_session_call(s, req, len, -1, buf, idempotent);
	pthread_mutex_unlock(&s->lock);
	return n;
}

/*
 * Call under s->lock: send a posted request (no reply comes). A lost
 * connection is the watcher's to replace; the next masqd learns the QP's
 * state from the kernel when it is named again (RESYNC_QP).
 */
void masq_session_post(struct masq_session *s, void *req, size_t len)
{
	int err;

	if (s->fd < 0 || s->broken)
		return;
	masq_hdr_set_request_id(req, ++s->next_request);
	err = masq_send_msg(s->fd, req, len, -1);
	if (err && masq_lost(err)) {
		s->broken = 1;
		masq_wake_watcher(s);
	}
}
