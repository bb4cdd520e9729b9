/* Event channels: create and destroy. The list of live ones is table.c's;
 * rdma_get_cm_event, which reads masqd's CM_EVENT notices off them,
 * event.c's. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static uint64_t next_channel_serial = 1;

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
	if (CM_CALL(cm_create_channel, req, rep, &fd))
		err = errno;
	else
		err = fd < 0 ? EPROTO : 0; /* no event socket came with the reply */
	if (err) {
		if (fd >= 0)
			close(fd);
		free(c);
		errno = err;
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
