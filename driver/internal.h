/* SPDX-License-Identifier: GPL-2.0 */
/* What raceblk's backends (main.c: blk-mq, scsi.c: SCSI) share. */
#ifndef RACEBLK_INTERNAL_H
#define RACEBLK_INTERNAL_H

#include <linux/blk-mq.h>

#include "compat.h"

/*
 * The points where init can fail or wait, in the order init reaches them,
 * and whether backend=blk and backend=scsi reach them (a literal 1 or 0:
 * main.c pastes it into a macro name).  The names are the values of
 * fail_at= and hold=; modinfo lists them per backend.
 */
#define RACEBLK_POINTS(X)						\
	/* never reached: init runs to the end */			\
	X(NONE,			none,			1, 1)		\
	/* image loaded, nothing visible yet */				\
	X(ALLOC,		alloc,			1, 1)		\
	/* blk: before add_disk(); scsi: before the host is added */	\
	X(BEFORE_ADD_DISK,	before_add_disk,	1, 1)		\
	/* blk: disk and partitions visible */				\
	X(AFTER_ADD_DISK,	after_add_disk,		1, 0)		\
	/* scsi: sd attached, partitions scanned */			\
	X(AFTER_SCAN,		after_scan,		0, 1)		\
	/* blk: init has read its own disk */				\
	X(AFTER_SCAN_IO,	after_scan_io,		1, 0)		\
	/* everything done, about to return */				\
	X(LATE,			late,			1, 1)

#define RACEBLK_POINT_ENUM(id, name, blk, scsi)	RACEBLK_##id,
enum raceblk_point {
	RACEBLK_POINTS(RACEBLK_POINT_ENUM)
	RACEBLK_NR_POINTS,
};

#undef RACEBLK_POINT_ENUM

struct Scsi_Host;

struct raceblk_dev {
	void *data;		/* the disk's contents */
	sector_t capacity;	/* in 512-byte sectors */
	struct blk_mq_tag_set tag_set;	/* blk */
	struct gendisk *disk;		/* blk */
	struct Scsi_Host *shost;	/* scsi */
};

extern int g_io_delay_ms;

bool raceblk_past_end(const struct raceblk_dev *dev, const char *name,
		      const char *op, u64 sector, u64 sectors);

int raceblk_scsi_alloc(struct raceblk_dev *dev);
int raceblk_scsi_scan(struct raceblk_dev *dev);
void raceblk_scsi_remove(struct raceblk_dev *dev);
void raceblk_scsi_put(struct raceblk_dev *dev);

#endif
