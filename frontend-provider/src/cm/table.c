/* The live channels and ids, each list under its lock: what the CM's calls,
 * its events and its restore after a restart (conn.c) look up. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>

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

/* handle -> id; the lock also covers every unacked count and ids_cond
 * signals acks. */
pthread_mutex_t masq_cm_ids_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t masq_cm_ids_cond = PTHREAD_COND_INITIALIZER;
struct cm_id *masq_cm_ids;

struct cm_id *masq_cm_lookup_id(uint32_t handle)
{
	struct cm_id *c;

	for (c = masq_cm_ids; c && c->handle != handle; c = c->next)
		;
	return c;
}

void masq_cm_insert_id(struct cm_id *c)
{
	pthread_mutex_lock(&masq_cm_ids_lock);
	c->next = masq_cm_ids;
	masq_cm_ids = c;
	pthread_mutex_unlock(&masq_cm_ids_lock);
}
