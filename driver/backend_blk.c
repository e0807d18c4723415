// SPDX-License-Identifier: GPL-2.0
/*
 * raceblk's blk-mq backend (backend=blk, the default): a disk of its own
 * (raceblk0) served from the in-memory image.  add_disk() makes it
 * visible and scans its partitions, so the block layer calls into the
 * module from there on, while its init still runs.  free_disk=1 gives the
 * disk a ->free_disk, as sd and loop have: the disk's last put frees the
 * driver's data then, and checks that whoever put it still held the
 * driver.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/file.h>
#include <linux/highmem.h>
#include <linux/hrtimer.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/version.h>

#include "internal.h"

/* Per request: completed by a timer when io_delay_ms is set. */
struct raceblk_cmd {
	struct hrtimer timer;
	blk_status_t status;
};

static blk_status_t raceblk_transfer(struct raceblk_dev *dev, struct request *rq)
{
	loff_t pos = (loff_t)blk_rq_pos(rq) << SECTOR_SHIFT;
	struct req_iterator iter;
	struct bio_vec bvec;

	if (raceblk_past_end(dev, rq->q->disk->disk_name, blk_op_str(req_op(rq)),
			     blk_rq_pos(rq), blk_rq_sectors(rq)))
		return BLK_STS_IOERR;

	switch (req_op(rq)) {
	case REQ_OP_READ:
	case REQ_OP_WRITE:
		break;
	case REQ_OP_FLUSH:
		return BLK_STS_OK;
	default:
		return BLK_STS_NOTSUPP;
	}

	rq_for_each_segment(bvec, rq, iter) {
		if (req_op(rq) == REQ_OP_WRITE)
			memcpy_from_page(dev->data + pos, bvec.bv_page,
					 bvec.bv_offset, bvec.bv_len);
		else
			memcpy_to_page(bvec.bv_page, bvec.bv_offset,
				       dev->data + pos, bvec.bv_len);
		pos += bvec.bv_len;
	}
	return BLK_STS_OK;
}

static enum hrtimer_restart raceblk_cmd_timer_expired(struct hrtimer *timer)
{
	struct raceblk_cmd *cmd = container_of(timer, struct raceblk_cmd, timer);

	blk_mq_end_request(blk_mq_rq_from_pdu(cmd), cmd->status);
	return HRTIMER_NORESTART;
}

/*
 * Data moves when the request is queued; with io_delay_ms only its
 * completion waits, so the request stays in flight for that long.
 */
static blk_status_t raceblk_queue_rq(struct blk_mq_hw_ctx *hctx,
				     const struct blk_mq_queue_data *bd)
{
	struct raceblk_dev *dev = hctx->queue->queuedata;
	struct request *rq = bd->rq;
	struct raceblk_cmd *cmd = blk_mq_rq_to_pdu(rq);

	blk_mq_start_request(rq);
	cmd->status = raceblk_transfer(dev, rq);
	if (!g_io_delay_ms) {
		blk_mq_end_request(rq, cmd->status);
		return BLK_STS_OK;
	}
	/*
	 * Set up here rather than in ->init_request, whose numa_node
	 * argument changed type in 7.x (and may in a stable tree): the
	 * timer is idle, since the last use of the request ended in its
	 * callback, which the timer core no longer tracks as active.
	 */
	hrtimer_setup(&cmd->timer, raceblk_cmd_timer_expired, CLOCK_MONOTONIC,
		      HRTIMER_MODE_REL);
	hrtimer_start(&cmd->timer, ms_to_ktime(g_io_delay_ms), HRTIMER_MODE_REL);
	return BLK_STS_OK;
}

static const struct blk_mq_ops raceblk_mq_ops = {
	.queue_rq	= raceblk_queue_rq,
};

static const struct block_device_operations raceblk_fops = {
	.owner		= THIS_MODULE,
};

/* Set while raceblk itself may drop its disk's last reference. */
static bool g_putting_own_disk;
/* free_disk=1 and the disk was added: its ->free_disk frees the raceblk_dev. */
static bool g_disk_owns_dev;

/*
 * free_disk=1: the disk owns the driver's data and frees it at its last
 * put.  The block layer calls this from disk_release(), in this module:
 * unless raceblk put the disk itself (from its init's error path or its
 * exit), whoever put it last must still hold a reference on raceblk, or
 * the module may be gone under this very call.  Then nothing that follows
 * is safe, returning included: the task stops here.  BUG(), not WARN():
 * a module being freed may already be off the list that report_bug()
 * searches, and the WARN would become an "invalid opcode" oops or not
 * depending on timing; the message before it is what a test looks for.
 */
static void raceblk_disk_free(struct gendisk *disk)
{
	struct raceblk_dev *dev = disk->private_data;

	if (!READ_ONCE(g_putting_own_disk) && module_refcount(THIS_MODULE) < 1) {
		pr_err("%s: ->free_disk called by one who no longer holds %s\n",
		       disk->disk_name, KBUILD_MODNAME);
		BUG();
	}
	pr_info("%s: ->free_disk: freeing the driver's data\n", disk->disk_name);
	vfree(dev->data);
	kfree(dev);
}

static const struct block_device_operations raceblk_fops_free_disk = {
	.owner		= THIS_MODULE,
	.free_disk	= raceblk_disk_free,
};

static int raceblk_alloc_disk(struct raceblk_dev *dev)
{
	struct gendisk *disk;
	int err;

	dev->tag_set.ops = &raceblk_mq_ops;
	dev->tag_set.nr_hw_queues = 1;
	dev->tag_set.queue_depth = 64;
	dev->tag_set.numa_node = NUMA_NO_NODE;
	dev->tag_set.cmd_size = sizeof(struct raceblk_cmd);
	dev->tag_set.flags = RACEBLK_TAG_SET_FLAGS;
	err = blk_mq_alloc_tag_set(&dev->tag_set);
	if (err)
		return err;

	/* 6.9 takes the queue limits here: NULL for the defaults. */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 9, 0)
	disk = blk_mq_alloc_disk(&dev->tag_set, NULL, dev);
#else
	disk = blk_mq_alloc_disk(&dev->tag_set, dev);
#endif
	if (IS_ERR(disk)) {
		blk_mq_free_tag_set(&dev->tag_set);
		return PTR_ERR(disk);
	}
	/*
	 * No major: add_disk() takes the disk's and its partitions' numbers
	 * from the extended dev_t space.
	 */
	disk->fops = g_free_disk ? &raceblk_fops_free_disk : &raceblk_fops;
	disk->private_data = dev;
	/* raceblk0; make soak's instances raceblk_s0... have raceblk_s00... */
	strscpy(disk->disk_name, KBUILD_MODNAME "0", DISK_NAME_LEN);
	set_capacity(disk, dev->capacity);
	dev->disk = disk;
	return 0;
}

/*
 * Put the disk and free the tag set.  With free_disk=1, once the disk was
 * added it owns @dev (g_disk_owns_dev), and this put may free it through
 * ->free_disk: the tag set goes first, which a deleted disk allows (see
 * disk_release()); a disk never added still needs it to exit its queue.
 */
static void raceblk_free_disk(struct raceblk_dev *dev)
{
	struct gendisk *disk = dev->disk;

	WRITE_ONCE(g_putting_own_disk, true);
	if (g_disk_owns_dev) {
		blk_mq_free_tag_set(&dev->tag_set);
		put_disk(disk);
	} else {
		put_disk(disk);
		blk_mq_free_tag_set(&dev->tag_set);
	}
	WRITE_ONCE(g_putting_own_disk, false);
}

/*
 * Open the disk for reading as any opener does, through the block layer
 * (which takes a reference on the disk's module).  6.9 opens block
 * devices as files.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 9, 0)
struct raceblk_opened {
	struct file *file;
};

static struct block_device *raceblk_open_disk(struct gendisk *disk,
					      struct raceblk_opened *opened)
{
	opened->file = bdev_file_open_by_dev(disk_devt(disk), BLK_OPEN_READ,
					     NULL, NULL);
	if (IS_ERR(opened->file))
		return ERR_CAST(opened->file);
	return file_bdev(opened->file);
}

/*
 * Release the open now, not at the loader's return from finit_module() as
 * fput() would from a task: by then a failed init has been decided, and
 * the pending release's module reference would count as a holder (fixed
 * keeps the module) or run after the module is freed (vanilla).  The
 * partition scan's fix, the first patch of kernel-patches/6.12/block/,
 * does the same.
 */
static void raceblk_close_disk(struct raceblk_opened *opened)
{
	__fput_sync(opened->file);
}
#else
struct raceblk_opened {
	struct block_device *bdev;
};

static struct block_device *raceblk_open_disk(struct gendisk *disk,
					      struct raceblk_opened *opened)
{
	opened->bdev = blkdev_get_by_dev(disk_devt(disk), FMODE_READ, NULL);
	return opened->bdev;
}

static void raceblk_close_disk(struct raceblk_opened *opened)
{
	blkdev_put(opened->bdev, FMODE_READ);
}
#endif

/*
 * Read the first sector through the block layer, as a driver checking its
 * own disk during init would, and compare it with the image.
 */
static int raceblk_scan_io(struct raceblk_dev *dev)
{
	struct raceblk_opened opened;
	struct block_device *bdev;
	struct bio_vec bvec;
	struct page *page;
	struct bio bio;
	int err;

	bdev = raceblk_open_disk(dev->disk, &opened);
	if (IS_ERR(bdev)) {
		pr_err("cannot open %s during init: %pe\n",
		       dev->disk->disk_name, bdev);
		return PTR_ERR(bdev);
	}
	page = alloc_page(GFP_KERNEL);
	if (!page) {
		err = -ENOMEM;
		goto out_put_bdev;
	}
	bio_init(&bio, bdev, &bvec, 1, REQ_OP_READ);
	bio.bi_iter.bi_sector = 0;
	__bio_add_page(&bio, page, SECTOR_SIZE, 0);
	err = submit_bio_wait(&bio);
	if (!err && memcmp(page_address(page), dev->data, SECTOR_SIZE))
		err = -EIO;
	pr_info("%s: read sector 0 during init: %pe\n", dev->disk->disk_name,
		ERR_PTR(err));
	__free_page(page);
out_put_bdev:
	raceblk_close_disk(&opened);
	return err;
}

/* From the disk's allocation to the backend's last point. */
static int raceblk_blk_init(struct raceblk_dev *dev)
{
	int err;

	err = raceblk_alloc_disk(dev);
	if (err)
		return err;
	err = raceblk_reach(RACEBLK_BEFORE_ADD_DISK);
	if (err)
		goto out_free_disk;

	/* Scans the partitions: the block layer calls into us from here on. */
	err = add_disk(dev->disk);
	if (err)
		goto out_free_disk;
	if (g_free_disk) {
		g_disk_owns_dev = true;
		raceblk_give_away_dev();
	}
	pr_info("%s: %llu sectors from image %s\n", dev->disk->disk_name,
		(unsigned long long)dev->capacity, dev->image);
	err = raceblk_reach(RACEBLK_AFTER_ADD_DISK);
	if (err)
		goto out_del_disk;

	/*
	 * Only a test aiming at after_scan_io reads the disk from init: on a
	 * kernel that isolates modules during init, the read fails.
	 */
	if (raceblk_point_chosen(RACEBLK_AFTER_SCAN_IO)) {
		err = raceblk_scan_io(dev);
		if (err)
			goto out_del_disk;
	}
	err = raceblk_reach(RACEBLK_AFTER_SCAN_IO);
	if (err)
		goto out_del_disk;
	err = raceblk_reach(RACEBLK_LATE);
	if (err)
		goto out_del_disk;
	return 0;

out_del_disk:
	if (raceblk_unwind_leaks(err, dev->disk->disk_name))
		return err;
	del_gendisk(dev->disk);
out_free_disk:
	raceblk_free_disk(dev);
	return err;
}

/* Whether the disk's last put freed @dev (free_disk=1). */
static bool raceblk_blk_exit(struct raceblk_dev *dev)
{
	del_gendisk(dev->disk);
	raceblk_free_disk(dev);
	return g_disk_owns_dev;
}

const struct raceblk_backend raceblk_blk_backend = {
	.init		= raceblk_blk_init,
	.exit		= raceblk_blk_exit,
	.has_free_disk	= true,
};
