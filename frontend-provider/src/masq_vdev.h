/*
 * The virtual devices libmasq shows: one per rail the endpoint is attached
 * to (vrdma0, vrdma1, ...), each the physical device backing it under the
 * virtual name. Kept by vdev index, looked up by physical device, since
 * verbs name a device by its struct.
 */
#ifndef MASQ_VDEV_H
#define MASQ_VDEV_H

#include <infiniband/verbs.h>

#include "transport/transport.h"

/*
 * Ask masqd for the endpoint's devices and keep those of list[0..n) that
 * back one: rename each to its virtual name and put them, in vdev order,
 * at the front of list, NULL after them. Every other device goes to others
 * (room for n + 1, NULL-terminated). How many were kept.
 */
int masq_vdev_select(struct ibv_device **list, int n, struct ibv_device **others);

/* The virtual device phys is shown as: 0 and *out, or -1 when none. */
int masq_vdev_lookup(const struct ibv_device *phys, struct masq_device *out);

#endif
