/* SPDX-License-Identifier: GPL-2.0 */
/*
 * raceblk is written against the newest tree it builds on (7.3); these
 * give the older ones (6.1, 6.12) the interfaces it uses.
 */
#ifndef RACEBLK_COMPAT_H
#define RACEBLK_COMPAT_H

#include <linux/blk-mq.h>
#include <linux/hrtimer.h>
#include <linux/timer.h>
#include <linux/version.h>

/* 6.13 added hrtimer_setup(), and a later tree removed hrtimer_init(). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 13, 0)
static inline void hrtimer_setup(struct hrtimer *timer,
				 enum hrtimer_restart (*function)(struct hrtimer *),
				 clockid_t clock_id, enum hrtimer_mode mode)
{
	hrtimer_init(timer, clock_id, mode);
	timer->function = function;
}
#endif

/* 6.16 renamed from_timer(). */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 16, 0)
#define timer_container_of(var, callback_timer, timer_fieldname) \
	from_timer(var, callback_timer, timer_fieldname)
#endif

/* Requests are merged unless a queue says otherwise since 6.14. */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 14, 0)
#define RACEBLK_TAG_SET_FLAGS	BLK_MQ_F_SHOULD_MERGE
#else
#define RACEBLK_TAG_SET_FLAGS	0
#endif

#endif /* RACEBLK_COMPAT_H */
