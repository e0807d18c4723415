/* SPDX-License-Identifier: GPL-2.0 */
/* What raceblk's core (main.c) and its backends (backend_*.c) share. */
#ifndef RACEBLK_INTERNAL_H
#define RACEBLK_INTERNAL_H

#include <linux/blk-mq.h>

#include "compat.h"

/*
 * The points where init can fail or wait, in the order init reaches them.
 * The names are the values of fail_at= and hold=; modinfo lists them per
 * backend (RACEBLK_BACKENDS).
 */
#define RACEBLK_POINTS(X)						\
	/* never reached: init runs to the end */			\
	X(NONE,			none)					\
	/* image loaded, nothing visible yet */				\
	X(ALLOC,		alloc)					\
	/* blk: before add_disk(); scsi: before the host is added */	\
	X(BEFORE_ADD_DISK,	before_add_disk)			\
	/* blk: disk and partitions visible */				\
	X(AFTER_ADD_DISK,	after_add_disk)				\
	/* scsi: sd attached, partitions scanned */			\
	X(AFTER_SCAN,		after_scan)				\
	/* blk: init has read its own disk */				\
	X(AFTER_SCAN_IO,	after_scan_io)				\
	/* everything done, about to return */				\
	X(LATE,			late)

#define RACEBLK_POINT_ENUM(id, name)	RACEBLK_##id,
enum raceblk_point {
	RACEBLK_POINTS(RACEBLK_POINT_ENUM)
	RACEBLK_NR_POINTS,
};

#undef RACEBLK_POINT_ENUM

/*
 * The backends, a line each: backend=NAME (the first is the default),
 * what it makes, and the points its init reaches, in order.  NAME's code
 * is backend_NAME.c, whose raceblk_NAME_backend are its operations.  A
 * new backend is a line here and its file.
 */
#define RACEBLK_BACKENDS(X)						\
	X(blk, "a blk-mq disk",						\
	  none alloc before_add_disk after_add_disk after_scan_io late)	\
	X(scsi, "a SCSI host whose disk sd owns",			\
	  none alloc before_add_disk after_scan late)

struct Scsi_Host;

struct raceblk_dev {
	void *data;		/* the disk's contents */
	sector_t capacity;	/* in 512-byte sectors */
	const char *image;	/* the file they came from (image=) */
	struct blk_mq_tag_set tag_set;	/* blk */
	struct gendisk *disk;		/* blk */
	struct Scsi_Host *shost;	/* scsi */
};

struct raceblk_backend {
	/*
	 * Make the disk visible, reaching the backend's points in turn with
	 * raceblk_reach(); on failure, undo it (raceblk_unwind_leaks() says
	 * whether to) and return the error.  Once something else owns @dev
	 * (the disk's ->free_disk), say so with raceblk_give_away_dev().
	 */
	int (*init)(struct raceblk_dev *dev);
	/* Take it away again; true when the disk's last put freed @dev. */
	bool (*exit)(struct raceblk_dev *dev);
	/* free_disk=1 is the backend's: the disk's ->free_disk. */
	bool has_free_disk;
};

#define RACEBLK_BACKEND_OPS(name, what, points)				\
	extern const struct raceblk_backend raceblk_##name##_backend;
RACEBLK_BACKENDS(RACEBLK_BACKEND_OPS)
#undef RACEBLK_BACKEND_OPS

extern int g_io_delay_ms;
extern bool g_free_disk;

int raceblk_reach(enum raceblk_point point);
bool raceblk_point_chosen(enum raceblk_point point);
bool raceblk_unwind_leaks(int err, const char *what);
void raceblk_give_away_dev(void);
bool raceblk_past_end(const struct raceblk_dev *dev, const char *name,
		      const char *op, u64 sector, u64 sectors);

#endif
