// SPDX-License-Identifier: GPL-2.0
/*
 * raceblk's SCSI backend (backend=scsi): a low-level driver with one host,
 * one target and one LUN served from the same in-memory image.  sd_mod
 * owns the disk (/dev/sdX); opening it takes a reference on this module
 * through scsi_device_get(), which is the 2003 SCSI case: the LLD is
 * still COMING while its init scans the host and sd scans the partitions.
 *
 * The scan is made deterministic: scsi_scan_target() scans target 0 in
 * this thread, and wait_for_device_probe() then waits for sd's
 * asynchronous probe (PROBE_PREFER_ASYNCHRONOUS), which adds the disk and
 * scans its partitions, so both are over when init goes on.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/hrtimer.h>
#include <linux/version.h>
#include <scsi/scsi.h>
#include <scsi/scsi_cmnd.h>
#include <scsi/scsi_common.h>
#include <scsi/scsi_device.h>
#include <scsi/scsi_host.h>
#include <scsi/scsi_proto.h>
/* 6.12 moved it to linux/. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 12, 0)
#include <linux/unaligned.h>
#else
#include <asm/unaligned.h>
#endif

#include "internal.h"

/* Before 7.x ->queuecommand returned an int, the SCSI_MLQUEUE_* macros. */
#ifdef SCSI_MLQUEUE_HOST_BUSY
typedef int raceblk_qc_status_t;
#else
typedef enum scsi_qc_status raceblk_qc_status_t;
#endif

struct raceblk_scsi_cmd {
	struct hrtimer timer;
	struct scsi_cmnd *scmd;
};

static struct raceblk_dev *raceblk_scsi_dev(struct scsi_cmnd *scmd)
{
	return *(struct raceblk_dev **)shost_priv(scmd->device->host);
}

/* Copy @len bytes of @buf to the command's data buffer; set the residue. */
static void raceblk_scsi_reply(struct scsi_cmnd *scmd, const void *buf, size_t len)
{
	size_t copied = scsi_sg_copy_from_buffer(scmd, buf, min_t(size_t, len, scsi_bufflen(scmd)));

	scsi_set_resid(scmd, scsi_bufflen(scmd) - copied);
}

static void raceblk_scsi_inquiry(struct scsi_cmnd *scmd)
{
	u8 data[36] = {
		[0] = TYPE_DISK,
		[2] = 5,		/* SPC-3 */
		[3] = 2,		/* response data format */
		[4] = sizeof(data) - 5,	/* additional length */
	};

	/* No vital product data pages: sd copes without them. */
	if (scmd->cmnd[1] & 1) {
		scsi_build_sense(scmd, 0, ILLEGAL_REQUEST, 0x24, 0);
		return;
	}
	memcpy(&data[8], "raceblk ", 8);
	memcpy(&data[16], "init race disk  ", 16);
	memcpy(&data[32], "6.1 ", 4);
	raceblk_scsi_reply(scmd, data, sizeof(data));
}

static void raceblk_scsi_capacity(struct scsi_cmnd *scmd, sector_t capacity, bool sixteen)
{
	u8 data[32] = {};

	if (sixteen) {
		put_unaligned_be64(capacity - 1, &data[0]);
		put_unaligned_be32(SECTOR_SIZE, &data[8]);
		raceblk_scsi_reply(scmd, data, 32);
	} else {
		put_unaligned_be32(min_t(sector_t, capacity - 1, U32_MAX), &data[0]);
		put_unaligned_be32(SECTOR_SIZE, &data[4]);
		raceblk_scsi_reply(scmd, data, 8);
	}
}

/* A mode parameter header and no page: no write protection, no cache page. */
static void raceblk_scsi_mode_sense(struct scsi_cmnd *scmd, bool ten)
{
	u8 data[8] = {};

	if (ten) {
		put_unaligned_be16(6, &data[0]);
		raceblk_scsi_reply(scmd, data, 8);
	} else {
		data[0] = 3;
		raceblk_scsi_reply(scmd, data, 4);
	}
}

static void raceblk_scsi_report_luns(struct scsi_cmnd *scmd)
{
	u8 data[16] = {};

	put_unaligned_be32(8, &data[0]);	/* one LUN: 0 */
	raceblk_scsi_reply(scmd, data, sizeof(data));
}

static void raceblk_scsi_rw(struct scsi_cmnd *scmd, u64 lba, u32 blocks, bool write)
{
	struct raceblk_dev *dev = raceblk_scsi_dev(scmd);
	size_t len = (size_t)blocks << SECTOR_SHIFT;
	void *at = dev->data + (lba << SECTOR_SHIFT);
	size_t done;

	if (raceblk_past_end(dev, dev_name(&scmd->device->sdev_gendev),
			     write ? "WRITE" : "READ", lba, blocks)) {
		scsi_build_sense(scmd, 0, ILLEGAL_REQUEST, 0x21, 0);	/* LBA out of range */
		return;
	}
	if (write)
		done = sg_copy_to_buffer(scsi_sglist(scmd), scsi_sg_count(scmd), at, len);
	else
		done = sg_copy_from_buffer(scsi_sglist(scmd), scsi_sg_count(scmd), at, len);
	scsi_set_resid(scmd, scsi_bufflen(scmd) - done);
}

/* Carry out @scmd at once; set its result and sense. */
static void raceblk_scsi_execute(struct scsi_cmnd *scmd)
{
	const u8 *cdb = scmd->cmnd;
	struct raceblk_dev *dev = raceblk_scsi_dev(scmd);

	scmd->result = SAM_STAT_GOOD;
	switch (cdb[0]) {
	case TEST_UNIT_READY:
	case SYNCHRONIZE_CACHE:
		break;
	case INQUIRY:
		raceblk_scsi_inquiry(scmd);
		break;
	case READ_CAPACITY:
		raceblk_scsi_capacity(scmd, dev->capacity, false);
		break;
	case SERVICE_ACTION_IN_16:
		if ((cdb[1] & 0x1f) == SAI_READ_CAPACITY_16)
			raceblk_scsi_capacity(scmd, dev->capacity, true);
		else
			scsi_build_sense(scmd, 0, ILLEGAL_REQUEST, 0x24, 0);
		break;
	case MODE_SENSE:
	case MODE_SENSE_10:
		raceblk_scsi_mode_sense(scmd, cdb[0] == MODE_SENSE_10);
		break;
	case REPORT_LUNS:
		raceblk_scsi_report_luns(scmd);
		break;
	case READ_10:
	case WRITE_10:
		raceblk_scsi_rw(scmd, get_unaligned_be32(&cdb[2]), get_unaligned_be16(&cdb[7]),
				cdb[0] == WRITE_10);
		break;
	case READ_16:
	case WRITE_16:
		raceblk_scsi_rw(scmd, get_unaligned_be64(&cdb[2]), get_unaligned_be32(&cdb[10]),
				cdb[0] == WRITE_16);
		break;
	default:
		scsi_build_sense(scmd, 0, ILLEGAL_REQUEST, 0x20, 0);	/* invalid opcode */
	}
}

static enum hrtimer_restart raceblk_scsi_timer_expired(struct hrtimer *timer)
{
	struct raceblk_scsi_cmd *cmd = container_of(timer, struct raceblk_scsi_cmd, timer);

	scsi_done(cmd->scmd);
	return HRTIMER_NORESTART;
}

static bool raceblk_scsi_is_rw(const u8 *cdb)
{
	return cdb[0] == READ_10 || cdb[0] == WRITE_10 || cdb[0] == READ_16 || cdb[0] == WRITE_16;
}

/*
 * As the blk-mq backend: data moves at once, io_delay_ms delays the
 * completion of reads and writes (not the scan's commands).
 */
static raceblk_qc_status_t raceblk_scsi_queuecommand(struct Scsi_Host *shost,
						     struct scsi_cmnd *scmd)
{
	struct raceblk_scsi_cmd *cmd = scsi_cmd_priv(scmd);

	raceblk_scsi_execute(scmd);
	if (!g_io_delay_ms || !raceblk_scsi_is_rw(scmd->cmnd)) {
		scsi_done(scmd);
		return 0;
	}
	cmd->scmd = scmd;
	hrtimer_setup(&cmd->timer, raceblk_scsi_timer_expired, CLOCK_MONOTONIC,
		      HRTIMER_MODE_REL);
	hrtimer_start(&cmd->timer, ms_to_ktime(g_io_delay_ms), HRTIMER_MODE_REL);
	return 0;
}

static struct scsi_host_template raceblk_sht = {
	.module		= THIS_MODULE,
	.name		= "raceblk",
	.proc_name	= "raceblk",
	.queuecommand	= raceblk_scsi_queuecommand,
	.can_queue	= 64,
	.this_id	= -1,
	.sg_tablesize	= SG_ALL,
	.max_sectors	= 1024,
	.cmd_per_lun	= 64,
	.cmd_size	= sizeof(struct raceblk_scsi_cmd),
};

static int raceblk_scsi_alloc(struct raceblk_dev *dev)
{
	struct Scsi_Host *shost;

	shost = scsi_host_alloc(&raceblk_sht, sizeof(dev));
	if (!shost)
		return -ENOMEM;
	*(struct raceblk_dev **)shost_priv(shost) = dev;
	shost->max_channel = 0;
	shost->max_id = 1;
	shost->max_lun = 1;
	dev->shost = shost;
	return 0;
}

/*
 * Whether sd has bound to our LUN.  No scsi_device_get(): it takes a
 * reference on this module, which a kernel isolating modules in init
 * refuses.
 */
static bool raceblk_scsi_sd_bound(struct raceblk_dev *dev)
{
	struct scsi_device *sdev;
	unsigned long flags;
	bool bound;

	spin_lock_irqsave(dev->shost->host_lock, flags);
	sdev = __scsi_device_lookup(dev->shost, 0, 0, 0);
	bound = sdev && READ_ONCE(sdev->sdev_gendev.driver);
	spin_unlock_irqrestore(dev->shost->host_lock, flags);
	return bound;
}

/*
 * Add the host and scan it; return once sd has attached to the LUN and
 * scanned its partitions (see the top of this file).
 */
static int raceblk_scsi_scan(struct raceblk_dev *dev)
{
	int err;

	err = scsi_add_host(dev->shost, NULL);
	if (err) {
		pr_err("scsi_add_host: %pe\n", ERR_PTR(err));
		return err;
	}
	scsi_scan_target(&dev->shost->shost_gendev, 0, 0, 0, SCSI_SCAN_INITIAL);
	wait_for_device_probe();
	pr_info("host%u: scanned, sd %s\n", dev->shost->host_no,
		raceblk_scsi_sd_bound(dev) ? "attached" : "did not attach");
	return 0;
}

/*
 * From the host's allocation to the backend's last point: the scan makes
 * sd add the disk and scan its partitions (after_scan); a failure unwinds
 * as a low-level driver does.
 */
static int raceblk_scsi_init(struct raceblk_dev *dev)
{
	int err;

	err = raceblk_scsi_alloc(dev);
	if (err)
		return err;
	err = raceblk_reach(RACEBLK_BEFORE_ADD_DISK);
	if (err)
		goto out_put_host;
	err = raceblk_scsi_scan(dev);
	if (err)
		goto out_put_host;
	err = raceblk_reach(RACEBLK_AFTER_SCAN);
	if (err)
		goto out_remove_host;
	err = raceblk_reach(RACEBLK_LATE);
	if (err)
		goto out_remove_host;
	return 0;

out_remove_host:
	if (raceblk_unwind_leaks(err, "the SCSI host"))
		return err;
	scsi_remove_host(dev->shost);
out_put_host:
	scsi_host_put(dev->shost);
	return err;
}

static bool raceblk_scsi_exit(struct raceblk_dev *dev)
{
	scsi_remove_host(dev->shost);
	scsi_host_put(dev->shost);
	return false;
}

const struct raceblk_backend raceblk_scsi_backend = {
	.init	= raceblk_scsi_init,
	.exit	= raceblk_scsi_exit,
};
