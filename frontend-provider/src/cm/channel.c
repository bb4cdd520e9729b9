/* Event channels: the list of live ones, create/destroy, and
 * rdma_get_cm_event, which reads masqd's CM_EVENT notices off them. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

/*
 * The channels not destroyed yet. The kernel never wakes a thread blocked
 * reading a channel another thread destroys (rping's CM thread sits there
 * until exit), but masqd closing its end of a destroyed channel wakes ours:
 * a reader that wakes to a closed channel checks here whether the app
 * destroyed it (then it blocks like the kernel's) or masqd went away.
 */
pthread_mutex_t masq_cm_channels_lock = PTHREAD_MUTEX_INITIALIZER;
struct cm_channel *masq_cm_channels;
static uint64_t next_channel_serial = 1;

int masq_cm_channel_live(uint64_t serial)
{
	struct cm_channel *c;

	pthread_mutex_lock(&masq_cm_channels_lock);
	for (c = masq_cm_channels; c && c->serial != serial; c = c->next)
		;
	pthread_mutex_unlock(&masq_cm_channels_lock);
	return c != NULL;
}

/* The generation of the connection serving the channel (0: none). */
unsigned int masq_cm_channel_generation(uint64_t serial, unsigned int set)
{
	struct cm_channel *c;
	unsigned int g = 0;

	pthread_mutex_lock(&masq_cm_channels_lock);
	for (c = masq_cm_channels; c && c->serial != serial; c = c->next)
		;
	if (c && set)
		c->generation = set;
	if (c)
		g = c->generation;
	pthread_mutex_unlock(&masq_cm_channels_lock);
	return g;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct masq_msg_cm_create_channel_req req;
	struct masq_msg_cm_create_channel_reply rep;
	struct cm_channel *c;
	int err, fd;

	c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	masq_msg_cm_create_channel_req_init(&req);
	err = CM_CALL(cm_create_channel, req, rep, &fd);
	if (!err && fd < 0)
		err = -EPROTO; /* no event socket came with the reply */
	if (err) {
		if (fd >= 0)
			close(fd);
		free(c);
		errno = -err;
		return NULL;
	}
	c->handle = rep.body.channel;
	c->ch.fd = fd;
	c->generation = masq_cm_generation();
	pthread_mutex_lock(&masq_cm_channels_lock);
	c->serial = next_channel_serial++;
	c->next = masq_cm_channels;
	masq_cm_channels = c;
	pthread_mutex_unlock(&masq_cm_channels_lock);
	return &c->ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct masq_msg_cm_destroy_channel_req req;
	struct masq_msg_cm_destroy_channel_reply rep;
	struct cm_channel *c, **pp;

	if (!channel)
		return;
	c = container_of(channel, struct cm_channel, ch);
	pthread_mutex_lock(&masq_cm_channels_lock);
	for (pp = &masq_cm_channels; *pp; pp = &(*pp)->next)
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	pthread_mutex_unlock(&masq_cm_channels_lock);
	masq_msg_cm_destroy_channel_req_init(&req);
	req.body.channel = c->handle;
	(void)CM_CALL(cm_destroy_channel, req, rep, NULL);
	close(c->ch.fd);
	free(c);
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct masq_msg_cm_event_notice m;
	uint8_t buf[MASQ_MAX_MESSAGE];
	struct cm_event *e;
	uint64_t serial;
	ssize_t n;
	int err, fd;

	if (!channel || !event)
		return fail(EINVAL);
	/* channel may be freed while recv blocks: only these are used after. */
	serial = container_of(channel, struct cm_channel, ch)->serial;
	fd = channel->fd;
	for (;;) {
		unsigned int gen = masq_cm_generation();

		/* Blocks unless the app made the fd non-blocking: then EAGAIN. */
		n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0)
			return -1;
		if (n == 0) {
			if (!masq_cm_channel_live(serial)) {
				for (;;)
					pause(); /* destroyed under us: no event ever comes */
			}
			/* masqd went away: once a new one has the channel and
			 * its ids again, fd is its new event socket. Blocks
			 * until masqd is back, as the kernel's would. */
			while ((err = masq_cm_recover(gen)) == EAGAIN)
				masq_cm_nap_ms(100);
			if (err || masq_cm_channel_generation(serial, 0) != masq_cm_generation())
				return fail(ECONNRESET);
			continue;
		}
		err = masq_msg_cm_event_notice_decode(buf, (size_t)n, &m);
		if (err) {
			masq_log("dropping a malformed CM event notice: %s", strerror(-err));
			continue;
		}
		e = calloc(1, sizeof(*e));
		if (!e)
			return fail(ENOMEM);
		if (masq_cm_process_event(&m.body, e)) {
			*event = &e->ev;
			return 0;
		}
		free(e);
	}
}

/* A sync id's call waits for its outcome, kept in id->event until the
 * next call or rdma_destroy_id (as librdmacm's ucma_complete). */
int masq_cm_complete(struct cm_id *c, enum rdma_cm_event_type want, enum rdma_cm_event_type or)
{
	struct rdma_cm_event *ev;

	if (!c->sync)
		return 0;
	if (c->id.event) {
		rdma_ack_cm_event(c->id.event);
		c->id.event = NULL;
	}
	if (rdma_get_cm_event(c->id.channel, &c->id.event))
		return -1;
	ev = c->id.event;
	if (ev->event == RDMA_CM_EVENT_REJECTED)
		return fail(ECONNREFUSED);
	if (ev->status)
		return fail(ev->status < 0 ? -ev->status : ev->status);
	if (ev->event == want || ev->event == or)
		return 0;
	return fail(ev->event == RDMA_CM_EVENT_DISCONNECTED ? ECONNRESET : EPROTO);
}
