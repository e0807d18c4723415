// SPDX-License-Identifier: GPL-2.0
/*
 * raceblk: a blk-mq ram disk whose module init fails on purpose.
 *
 * add_disk() makes a disk visible and scans its partitions, so the block
 * layer calls into this module while its init is still running.  If init
 * then fails, the module is freed while the disk may still be in use.
 * raceblk fails its init at a point chosen with fail_at=, so a harness can
 * show what each kernel does about that.
 *
 * The disk's contents come from an image file loaded with request_firmware()
 * (image=, relative to /lib/firmware) and live in memory.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/blk-mq.h>
#include <linux/firmware.h>
#include <linux/highmem.h>
#include <linux/vmalloc.h>

/*
 * The points where init can fail, in the order init reaches them.  The names
 * are the values of fail_at= and of the read-only stage parameter.
 */
enum raceblk_point {
	RACEBLK_NONE,		/* never reached: init runs to the end */
	RACEBLK_ALLOC,
	RACEBLK_BEFORE_ADD_DISK,
	RACEBLK_AFTER_ADD_DISK,
	RACEBLK_LATE,
	RACEBLK_NR_POINTS,
};

static const char * const raceblk_point_names[RACEBLK_NR_POINTS] = {
	[RACEBLK_NONE]			= "none",
	[RACEBLK_ALLOC]			= "alloc",
	[RACEBLK_BEFORE_ADD_DISK]	= "before_add_disk",
	[RACEBLK_AFTER_ADD_DISK]	= "after_add_disk",
	[RACEBLK_LATE]			= "late",
};

static char *g_fail_at = "none";
module_param_named(fail_at, g_fail_at, charp, 0444);
MODULE_PARM_DESC(fail_at, "Point where init fails: none, alloc, before_add_disk, after_add_disk, late. Default: none");

static int g_fail_errno = EIO;
module_param_named(fail_errno, g_fail_errno, int, 0444);
MODULE_PARM_DESC(fail_errno, "Positive errno init fails with at fail_at. Default: 5 (EIO)");

static char *g_image = "raceblk/mbr-primary.img";
module_param_named(image, g_image, charp, 0444);
MODULE_PARM_DESC(image, "Disk image, a firmware path under /lib/firmware. Default: raceblk/mbr-primary.img");

static enum raceblk_point g_fail_point;
/* A failure point's name, or "loading" before the first, "live" after init. */
static const char *g_stage = "loading";

static int raceblk_stage_get(char *buffer, const struct kernel_param *kp)
{
	return sysfs_emit(buffer, "%s\n", READ_ONCE(g_stage));
}

static const struct kernel_param_ops raceblk_stage_ops = {
	.get = raceblk_stage_get,
};
module_param_cb(stage, &raceblk_stage_ops, NULL, 0444);
MODULE_PARM_DESC(stage, "Read-only: the last failure point init reached, or loading, or live");

struct raceblk_dev {
	void *data;		/* the disk's contents */
	sector_t capacity;	/* in 512-byte sectors */
	struct blk_mq_tag_set tag_set;
	struct gendisk *disk;
};

static struct raceblk_dev *g_dev;

/*
 * Record that init reached @point and return the error to fail with there,
 * or 0 to go on.
 */
static int raceblk_reach(enum raceblk_point point)
{
	WRITE_ONCE(g_stage, raceblk_point_names[point]);
	if (point != g_fail_point)
		return 0;
	pr_info("failing init at %s with %pe\n", raceblk_point_names[point],
		ERR_PTR(-g_fail_errno));
	return -g_fail_errno;
}

static int raceblk_parse_params(void)
{
	int point;

	point = match_string(raceblk_point_names, RACEBLK_NR_POINTS, g_fail_at);
	if (point < 0) {
		pr_err("fail_at=%s: unknown failure point\n", g_fail_at);
		return -EINVAL;
	}
	g_fail_point = point;

	if (g_fail_errno <= 0 || g_fail_errno > MAX_ERRNO) {
		pr_err("fail_errno=%d: must be a positive errno\n", g_fail_errno);
		return -EINVAL;
	}
	return 0;
}

static void raceblk_transfer(struct raceblk_dev *dev, struct request *rq)
{
	loff_t pos = (loff_t)blk_rq_pos(rq) << SECTOR_SHIFT;
	struct req_iterator iter;
	struct bio_vec bvec;

	rq_for_each_segment(bvec, rq, iter) {
		if (rq_data_dir(rq) == WRITE)
			memcpy_from_page(dev->data + pos, bvec.bv_page,
					 bvec.bv_offset, bvec.bv_len);
		else
			memcpy_to_page(bvec.bv_page, bvec.bv_offset,
				       dev->data + pos, bvec.bv_len);
		pos += bvec.bv_len;
	}
}

static blk_status_t raceblk_queue_rq(struct blk_mq_hw_ctx *hctx,
				     const struct blk_mq_queue_data *bd)
{
	struct raceblk_dev *dev = hctx->queue->queuedata;
	struct request *rq = bd->rq;

	blk_mq_start_request(rq);
	if (blk_rq_pos(rq) + blk_rq_sectors(rq) > dev->capacity) {
		blk_mq_end_request(rq, BLK_STS_IOERR);
		return BLK_STS_OK;
	}
	switch (req_op(rq)) {
	case REQ_OP_READ:
	case REQ_OP_WRITE:
		raceblk_transfer(dev, rq);
		break;
	case REQ_OP_FLUSH:
		break;
	default:
		blk_mq_end_request(rq, BLK_STS_NOTSUPP);
		return BLK_STS_OK;
	}
	blk_mq_end_request(rq, BLK_STS_OK);
	return BLK_STS_OK;
}

static const struct blk_mq_ops raceblk_mq_ops = {
	.queue_rq	= raceblk_queue_rq,
};

static const struct block_device_operations raceblk_fops = {
	.owner		= THIS_MODULE,
};

/* Copy the image into memory the disk can write to. */
static int raceblk_load_image(struct raceblk_dev *dev)
{
	const struct firmware *fw;
	int err;

	err = request_firmware(&fw, g_image, NULL);
	if (err) {
		pr_err("image=%s: cannot load: %pe\n", g_image, ERR_PTR(err));
		return err;
	}
	if (!fw->size || fw->size % SECTOR_SIZE) {
		pr_err("image=%s: size %zu is not a whole number of sectors\n",
		       g_image, fw->size);
		err = -EINVAL;
		goto out_release;
	}
	dev->data = vmalloc(fw->size);
	if (!dev->data) {
		err = -ENOMEM;
		goto out_release;
	}
	memcpy(dev->data, fw->data, fw->size);
	dev->capacity = fw->size >> SECTOR_SHIFT;
out_release:
	release_firmware(fw);
	return err;
}

static int raceblk_alloc_disk(struct raceblk_dev *dev)
{
	struct gendisk *disk;
	int err;

	dev->tag_set.ops = &raceblk_mq_ops;
	dev->tag_set.nr_hw_queues = 1;
	dev->tag_set.queue_depth = 64;
	dev->tag_set.numa_node = NUMA_NO_NODE;
	dev->tag_set.flags = BLK_MQ_F_SHOULD_MERGE;
	err = blk_mq_alloc_tag_set(&dev->tag_set);
	if (err)
		return err;

	disk = blk_mq_alloc_disk(&dev->tag_set, dev);
	if (IS_ERR(disk)) {
		blk_mq_free_tag_set(&dev->tag_set);
		return PTR_ERR(disk);
	}
	/* No major: add_disk() takes the disk and its partitions' numbers
	 * from the extended dev_t space.
	 */
	disk->fops = &raceblk_fops;
	disk->private_data = dev;
	strscpy(disk->disk_name, "raceblk0", DISK_NAME_LEN);
	set_capacity(disk, dev->capacity);
	dev->disk = disk;
	return 0;
}

static void raceblk_free_disk(struct raceblk_dev *dev)
{
	put_disk(dev->disk);
	blk_mq_free_tag_set(&dev->tag_set);
}

static int __init raceblk_init(void)
{
	struct raceblk_dev *dev;
	int err;

	err = raceblk_parse_params();
	if (err)
		return err;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	err = raceblk_load_image(dev);
	if (err)
		goto out_free_dev;
	err = raceblk_reach(RACEBLK_ALLOC);
	if (err)
		goto out_free_data;

	err = raceblk_alloc_disk(dev);
	if (err)
		goto out_free_data;
	err = raceblk_reach(RACEBLK_BEFORE_ADD_DISK);
	if (err)
		goto out_free_disk;

	/* Scans the partitions: the block layer calls into us from here on. */
	err = add_disk(dev->disk);
	if (err)
		goto out_free_disk;
	pr_info("%s: %llu sectors from image %s\n", dev->disk->disk_name,
		(unsigned long long)dev->capacity, g_image);
	err = raceblk_reach(RACEBLK_AFTER_ADD_DISK);
	if (err)
		goto out_del_disk;

	err = raceblk_reach(RACEBLK_LATE);
	if (err)
		goto out_del_disk;

	g_dev = dev;
	WRITE_ONCE(g_stage, "live");
	return 0;

out_del_disk:
	del_gendisk(dev->disk);
out_free_disk:
	raceblk_free_disk(dev);
out_free_data:
	vfree(dev->data);
out_free_dev:
	kfree(dev);
	return err;
}

static void __exit raceblk_exit(void)
{
	del_gendisk(g_dev->disk);
	raceblk_free_disk(g_dev);
	vfree(g_dev->data);
	kfree(g_dev);
}

module_init(raceblk_init);
module_exit(raceblk_exit);

MODULE_DESCRIPTION("blk-mq ram disk whose init fails on purpose, for module init race tests");
MODULE_LICENSE("GPL");
