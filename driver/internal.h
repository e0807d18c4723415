/* SPDX-License-Identifier: GPL-2.0 */
/* What raceblk's backends (main.c: blk-mq, scsi.c: SCSI) share. */
#ifndef RACEBLK_INTERNAL_H
#define RACEBLK_INTERNAL_H

#include <linux/blk-mq.h>

/*
 * The points where init can fail or wait, in the order init reaches them.
 * The names are the values of fail_at= and hold=.
 */
enum raceblk_point {
	RACEBLK_NONE,		/* never reached: init runs to the end */
	RACEBLK_ALLOC,		/* image loaded, nothing visible yet */
	RACEBLK_BEFORE_ADD_DISK,	/* scsi: before the host is added */
	RACEBLK_AFTER_ADD_DISK,	/* blk: disk and partitions visible */
	RACEBLK_AFTER_SCAN,	/* scsi: sd attached, partitions scanned */
	RACEBLK_AFTER_SCAN_IO,	/* blk: init has read its own disk */
	RACEBLK_LATE,		/* everything done, about to return */
	RACEBLK_NR_POINTS,
};

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
