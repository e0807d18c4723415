// SPDX-License-Identifier: GPL-2.0
/*
 * raceblk: a blk-mq ram disk whose module init fails on purpose.
 *
 * add_disk() makes a disk visible and scans its partitions, so the block
 * layer calls into this module while its init is still running.  If init
 * then fails, the module is freed while the disk may still be in use.
 * raceblk fails its init at a point chosen with fail_at=, and can wait at a
 * point chosen with hold= until the harness writes the release parameter,
 * so a test can open the disk at exactly that moment.
 *
 * The disk's contents come from an image file read from /lib/firmware/IMAGE
 * (image=, size-checked before it is read) and live in memory.  io_delay_ms=
 * completes each request that long after it was queued, so that I/O can be
 * outstanding on purpose.
 *
 * backend=blk (the default) is a blk-mq disk of its own (raceblk0);
 * backend=scsi a SCSI low-level driver whose disk belongs to sd (scsi.c).
 * free_disk=1 gives the blk disk a ->free_disk, as sd and loop have: the
 * disk's last put frees the driver's data then, and checks that whoever
 * put it still held the driver.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/blk-mq.h>
#include <linux/blkdev.h>
#include <linux/completion.h>
#include <linux/file.h>
#include <linux/highmem.h>
#include <linux/hrtimer.h>
#include <linux/kernel_read_file.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>
#include <linux/version.h>

#include "raceblk.h"
#include "internal.h"

#define RACEBLK_POINT_NAME(id, name, blk, scsi)	[RACEBLK_##id] = #name,
static const char * const raceblk_point_names[RACEBLK_NR_POINTS] = {
	RACEBLK_POINTS(RACEBLK_POINT_NAME)
};

#undef RACEBLK_POINT_NAME

enum raceblk_backend {
	RACEBLK_BACKEND_BLK,
	RACEBLK_BACKEND_SCSI,
};

static const char * const raceblk_backend_names[] = {
	[RACEBLK_BACKEND_BLK]	= "blk",
	[RACEBLK_BACKEND_SCSI]	= "scsi",
};

/*
 * Whether each backend reaches each point, { blk, scsi } in enum
 * raceblk_backend's order: fail_at= and hold= name one of them.
 */
#define RACEBLK_POINT_ON(id, name, blk, scsi)	{ blk, scsi },
static const bool raceblk_point_on[RACEBLK_NR_POINTS][2] = {
	RACEBLK_POINTS(RACEBLK_POINT_ON)
};

#undef RACEBLK_POINT_ON

/*
 * "backend=blk: none alloc ...; backend=scsi: ...": the points of each
 * backend, for the descriptions of fail_at= and hold= (modinfo).
 */
#define RACEBLK_IF_1(s)	s
#define RACEBLK_IF_0(s)
#define RACEBLK_BLK_WORD(id, name, blk, scsi)	RACEBLK_IF_##blk(" " #name)
#define RACEBLK_SCSI_WORD(id, name, blk, scsi)	RACEBLK_IF_##scsi(" " #name)
#define RACEBLK_POINT_LISTS						\
	"backend=blk:" RACEBLK_POINTS(RACEBLK_BLK_WORD)			\
	"; backend=scsi:" RACEBLK_POINTS(RACEBLK_SCSI_WORD)

/* What init does on failure once the disk was added. */
enum raceblk_unwind {
	RACEBLK_UNWIND_CLEAN,	/* del_gendisk(), put_disk(), free the tag set */
	RACEBLK_UNWIND_LEAK,	/* a buggy driver: return, leave the disk */
};

static const char * const raceblk_unwind_names[] = {
	[RACEBLK_UNWIND_CLEAN]	= "clean",
	[RACEBLK_UNWIND_LEAK]	= "leak",
};

#define RACEBLK_MAX_DELAY_MS	10000
#define RACEBLK_MAX_HOLD_MS	600000
/* The disk lives in vmalloc'd memory; the harness's guests have 256 MiB. */
#define RACEBLK_MAX_IMAGE_MIB	32

static char *g_fail_at = "none";
module_param_named(fail_at, g_fail_at, charp, 0444);
MODULE_PARM_DESC(fail_at,
		 "Point where init fails; " RACEBLK_POINT_LISTS ". Default: none");

/*
 * Integer parameters, as null_blk takes them: base 10 only ("010" is ten,
 * "0x10" is refused), within bounds, or the load fails with EINVAL and a
 * pr_err naming the parameter.
 */
struct raceblk_int_param {
	int *value;
	int min, max;
};

static int raceblk_int_set(const char *val, const struct kernel_param *kp)
{
	const struct raceblk_int_param *p = kp->arg;
	int v;

	if (kstrtoint(val, 10, &v) || v < p->min || v > p->max) {
		pr_err("%s=%s: must be %d..%d, in base 10\n", kp->name, val, p->min, p->max);
		return -EINVAL;
	}
	*p->value = v;
	return 0;
}

static int raceblk_int_get(char *buffer, const struct kernel_param *kp)
{
	const struct raceblk_int_param *p = kp->arg;

	return sysfs_emit(buffer, "%d\n", *p->value);
}

static const struct kernel_param_ops raceblk_int_ops = {
	.set = raceblk_int_set,
	.get = raceblk_int_get,
};

#define raceblk_int_param(name, var, min, max)					\
	static struct raceblk_int_param raceblk_##name##_param = {		\
		&(var), (min), (max)						\
	};									\
	module_param_cb(name, &raceblk_int_ops, &raceblk_##name##_param, 0444)

static int g_fail_errno = EIO;
/* Errnos userspace can see: the kernel's own (ERESTARTSYS...) are 512 up. */
raceblk_int_param(fail_errno, g_fail_errno, 1, EHWPOISON);
MODULE_PARM_DESC(fail_errno, "Positive errno init fails with at fail_at, 1..133 (EHWPOISON). Default: 5 (EIO)");

static char *g_hold = "none";
module_param_named(hold, g_hold, charp, 0444);
MODULE_PARM_DESC(hold,
		 "Point where init waits for the release parameter; " RACEBLK_POINT_LISTS
		 ". Default: none");

static int g_hold_timeout_ms = 30000;
raceblk_int_param(hold_timeout_ms, g_hold_timeout_ms, 1, RACEBLK_MAX_HOLD_MS);
MODULE_PARM_DESC(hold_timeout_ms, "How long init waits at hold before going on, 1..600000. Default: 30000");

int g_io_delay_ms;
raceblk_int_param(io_delay_ms, g_io_delay_ms, 0, RACEBLK_MAX_DELAY_MS);
MODULE_PARM_DESC(io_delay_ms, "Complete each request this long after it is queued, 0..10000. Default: 0");

static char *g_unwind = "clean";
module_param_named(unwind, g_unwind, charp, 0444);
MODULE_PARM_DESC(unwind, "Error path once the disk was added: clean (del_gendisk) or leak (leave the disk). Default: clean");

static char *g_backend = "blk";
module_param_named(backend, g_backend, charp, 0444);
MODULE_PARM_DESC(backend, "blk (default): a blk-mq disk; scsi: a SCSI host whose disk sd owns");

static bool g_free_disk;

/*
 * A bool, 0 or 1 and nothing else (kstrtobool() would take "010" for 0 and
 * "yes" for 1), or EINVAL naming the parameter.
 */
static int raceblk_bool_set(const char *val, const struct kernel_param *kp)
{
	if (strcmp(val, "0") && strcmp(val, "1")) {
		pr_err("%s=%s: must be 0 or 1\n", kp->name, val);
		return -EINVAL;
	}
	*(bool *)kp->arg = val[0] == '1';
	return 0;
}

static const struct kernel_param_ops raceblk_bool_ops = {
	.set = raceblk_bool_set,
	.get = param_get_bool,
};

module_param_cb(free_disk, &raceblk_bool_ops, &g_free_disk, 0444);
MODULE_PARM_DESC(free_disk, "backend=blk: the disk's last put frees the driver's data through ->free_disk, as sd and loop do. Default: 0");

static char *g_image = "raceblk/mbr-primary.img";
module_param_named(image, g_image, charp, 0444);
MODULE_PARM_DESC(image, "Disk image, a firmware path under /lib/firmware, at most 32 MiB. Default: raceblk/mbr-primary.img");

static enum raceblk_point g_fail_point;
static enum raceblk_point g_hold_point;
static enum raceblk_unwind g_unwind_mode;
static enum raceblk_backend g_backend_kind;
/* unwind=leak left something in use that still points at the image. */
static bool g_leaked;
static DECLARE_COMPLETION(raceblk_released);

/* Where init is, for the read-only stage parameter. */
enum raceblk_stage {
	RACEBLK_STAGE_LOADING,	/* before the first point */
	RACEBLK_STAGE_AT,	/* passed g_stage_point */
	RACEBLK_STAGE_HELD,	/* waiting at g_stage_point for release */
	RACEBLK_STAGE_FAILED,	/* init failed at g_stage_point */
	RACEBLK_STAGE_LIVE,	/* init succeeded */
};

static enum raceblk_stage g_stage;
static enum raceblk_point g_stage_point;

static void raceblk_set_stage(enum raceblk_stage stage, enum raceblk_point point)
{
	WRITE_ONCE(g_stage_point, point);
	WRITE_ONCE(g_stage, stage);
}

static int raceblk_stage_get(char *buffer, const struct kernel_param *kp)
{
	const char *point = raceblk_point_names[READ_ONCE(g_stage_point)];

	switch (READ_ONCE(g_stage)) {
	case RACEBLK_STAGE_LOADING:
		return sysfs_emit(buffer, "loading\n");
	case RACEBLK_STAGE_AT:
		return sysfs_emit(buffer, "%s\n", point);
	case RACEBLK_STAGE_HELD:
		return sysfs_emit(buffer, "held at %s\n", point);
	case RACEBLK_STAGE_FAILED:
		return sysfs_emit(buffer, "failed at %s\n", point);
	case RACEBLK_STAGE_LIVE:
		return sysfs_emit(buffer, "live\n");
	}
	return -EINVAL;
}

/*
 * Read-only, yet it needs a set: parse_args() calls ->set of any parameter
 * named at load time without looking, so "stage=x" without one is a call
 * through NULL (6.1, every kernel here: fuzz_stage).
 */
static int raceblk_stage_set(const char *val, const struct kernel_param *kp)
{
	pr_err("stage=%s: read-only, init sets it\n", val);
	return -EINVAL;
}

static const struct kernel_param_ops raceblk_stage_ops = {
	.set = raceblk_stage_set,
	.get = raceblk_stage_get,
};
module_param_cb(stage, &raceblk_stage_ops, NULL, 0444);
MODULE_PARM_DESC(stage, "Read-only: loading, a point name, \"held at <point>\", \"failed at <point>\" or live");

/*
 * Where init is, for raceblk_user: a module that uses a symbol of this one
 * shows what each kernel does with a dependant loaded during our init.
 */
const char *raceblk_stage_point(void)
{
	return raceblk_point_names[READ_ONCE(g_stage_point)];
}
#ifndef RACEBLK_INSTANCE
EXPORT_SYMBOL_GPL(raceblk_stage_point);
#endif

static int raceblk_release_set(const char *val, const struct kernel_param *kp)
{
	complete_all(&raceblk_released);
	return 0;
}

static const struct kernel_param_ops raceblk_release_ops = {
	.set = raceblk_release_set,
};
module_param_cb(release, &raceblk_release_ops, NULL, 0200);
MODULE_PARM_DESC(release, "Write anything to let init go on from hold");

/* Per request: completed by a timer when io_delay_ms is set. */
struct raceblk_cmd {
	struct hrtimer timer;
	blk_status_t status;
};

static struct raceblk_dev *g_dev;

/*
 * Wait at @point until release is written (at once if it was written
 * before init got here: a completion remembers), for hold_timeout_ms at
 * most.  The loading process can be killed meanwhile: init then fails
 * there with -EINTR (a fatal signal: nobody sees the restart errno).
 */
static int raceblk_hold(enum raceblk_point point)
{
	long left;

	raceblk_set_stage(RACEBLK_STAGE_HELD, point);
	pr_info("init held at %s until release is written\n",
		raceblk_point_names[point]);
	left = wait_for_completion_killable_timeout(&raceblk_released,
						    msecs_to_jiffies(g_hold_timeout_ms));
	raceblk_set_stage(RACEBLK_STAGE_AT, point);
	if (left < 0) {
		pr_info("hold at %s interrupted by a fatal signal: failing init\n",
			raceblk_point_names[point]);
		return -EINTR;
	}
	if (left)
		pr_info("init released at %s\n", raceblk_point_names[point]);
	else
		pr_warn("hold at %s timed out after %d ms, going on\n",
			raceblk_point_names[point], g_hold_timeout_ms);
	return 0;
}

/*
 * Record that init reached @point, wait there if hold= names it, and return
 * the error to fail with there, or 0 to go on.
 */
static int raceblk_reach(enum raceblk_point point)
{
	int err;

	raceblk_set_stage(RACEBLK_STAGE_AT, point);
	if (point == g_hold_point) {
		err = raceblk_hold(point);
		if (err) {
			raceblk_set_stage(RACEBLK_STAGE_FAILED, point);
			return err;
		}
	}
	if (point != g_fail_point)
		return 0;
	raceblk_set_stage(RACEBLK_STAGE_FAILED, point);
	pr_info("failing init at %s with %pe\n", raceblk_point_names[point],
		ERR_PTR(-g_fail_errno));
	return -g_fail_errno;
}

/* The index of @value in @names, or -EINVAL with a pr_err naming @param. */
static int raceblk_parse_name(const char *param, const char *value,
			      const char * const *names, size_t nr_names)
{
	int i = match_string(names, nr_names, value);

	if (i < 0)
		pr_err("%s=%s: unknown value\n", param, value);
	return i;
}

static int raceblk_check_point(const char *param, enum raceblk_point point)
{
	if (raceblk_point_on[point][g_backend_kind])
		return 0;
	pr_err("%s=%s: not a point of backend=%s\n", param,
	       raceblk_point_names[point], raceblk_backend_names[g_backend_kind]);
	return -EINVAL;
}

static int raceblk_parse_params(void)
{
	int i;

	i = raceblk_parse_name("fail_at", g_fail_at, raceblk_point_names,
			       RACEBLK_NR_POINTS);
	if (i < 0)
		return -EINVAL;
	g_fail_point = i;

	i = raceblk_parse_name("hold", g_hold, raceblk_point_names,
			       RACEBLK_NR_POINTS);
	if (i < 0)
		return -EINVAL;
	g_hold_point = i;

	i = raceblk_parse_name("unwind", g_unwind, raceblk_unwind_names,
			       ARRAY_SIZE(raceblk_unwind_names));
	if (i < 0)
		return -EINVAL;
	g_unwind_mode = i;

	i = raceblk_parse_name("backend", g_backend, raceblk_backend_names,
			       ARRAY_SIZE(raceblk_backend_names));
	if (i < 0)
		return -EINVAL;
	g_backend_kind = i;
	if (raceblk_check_point("fail_at", g_fail_point) ||
	    raceblk_check_point("hold", g_hold_point))
		return -EINVAL;
	if (g_free_disk && g_backend_kind != RACEBLK_BACKEND_BLK) {
		pr_err("free_disk=1: only with backend=blk (sd frees its own disk)\n");
		return -EINVAL;
	}
	return 0;
}

/*
 * A request for sectors the disk does not have is refused, and said, never
 * served: the block layer checks a request against its partition, and a
 * partition the kernel made past the end of the disk lets one through
 * (gpt-end-before-start).  Written so that no sum can wrap.
 */
bool raceblk_past_end(const struct raceblk_dev *dev, const char *name,
		      const char *op, u64 sector, u64 sectors)
{
	if (sector <= dev->capacity && sectors <= dev->capacity - sector)
		return false;
	pr_warn_ratelimited("%s: refused %s of %llu sectors at sector %llu: past the end (%llu sectors)\n",
			    name, op, sectors, sector, (u64)dev->capacity);
	return true;
}

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

/*
 * Read the image into memory the disk can write to.  Not request_firmware():
 * it reads a file of any size before anyone can look at that size, so an
 * image larger than the guest's memory ends in the OOM killer.
 * kernel_read_file() checks the size first (EFBIG over the limit, EINVAL
 * for an empty file) and allocates exactly that much.
 */
static int raceblk_load_image(struct raceblk_dev *dev)
{
	const size_t limit = (size_t)RACEBLK_MAX_IMAGE_MIB << 20;
	void *data = NULL;
	ssize_t size;
	char *path;

	path = kasprintf(GFP_KERNEL, "/lib/firmware/%s", g_image);
	if (!path)
		return -ENOMEM;
	size = kernel_read_file_from_path_initns(path, 0, &data, limit, NULL,
						 READING_FIRMWARE);
	kfree(path);
	if (size == -EFBIG) {
		pr_err("image=%s: more than the %d MiB the ram backend holds\n",
		       g_image, RACEBLK_MAX_IMAGE_MIB);
		return size;
	}
	if (size < 0) {
		pr_err("image=%s: cannot load: %pe\n", g_image, ERR_PTR(size));
		return size;
	}
	if (size % SECTOR_SIZE) {
		pr_err("image=%s: size %zd is not a whole number of sectors\n",
		       g_image, size);
		vfree(data);
		return -EINVAL;
	}
	dev->data = data;
	dev->capacity = size >> SECTOR_SHIFT;
	return 0;
}

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

/* The blk-mq backend, from its disk's allocation to its last point. */
static int raceblk_init_blk(struct raceblk_dev *dev)
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
	g_disk_owns_dev = g_free_disk;
	pr_info("%s: %llu sectors from image %s\n", dev->disk->disk_name,
		(unsigned long long)dev->capacity, g_image);
	err = raceblk_reach(RACEBLK_AFTER_ADD_DISK);
	if (err)
		goto out_del_disk;

	/*
	 * Only a test aiming at after_scan_io reads the disk from init: on a
	 * kernel that isolates modules during init, the read fails.
	 */
	if (g_fail_point == RACEBLK_AFTER_SCAN_IO ||
	    g_hold_point == RACEBLK_AFTER_SCAN_IO) {
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
	if (g_unwind_mode == RACEBLK_UNWIND_LEAK) {
		pr_warn("unwind=leak: returning %pe, leaving %s behind\n",
			ERR_PTR(err), dev->disk->disk_name);
		g_leaked = true;
		return err;
	}
	del_gendisk(dev->disk);
out_free_disk:
	raceblk_free_disk(dev);
	return err;
}

/*
 * The SCSI backend: a host whose scan makes sd add the disk and scan its
 * partitions (after_scan); a failure unwinds as a low-level driver does.
 */
static int raceblk_init_scsi(struct raceblk_dev *dev)
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
	if (g_unwind_mode == RACEBLK_UNWIND_LEAK) {
		pr_warn("unwind=leak: returning %pe, leaving the SCSI host behind\n",
			ERR_PTR(err));
		g_leaked = true;
		return err;
	}
	raceblk_scsi_remove(dev);
out_put_host:
	raceblk_scsi_put(dev);
	return err;
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

	if (g_backend_kind == RACEBLK_BACKEND_SCSI)
		err = raceblk_init_scsi(dev);
	else
		err = raceblk_init_blk(dev);
	if (err) {
		/*
		 * unwind=leak left the disk or host, and its memory, in use;
		 * with free_disk=1 the disk's last put frees them.
		 */
		if (g_leaked || g_disk_owns_dev)
			return err;
		goto out_free_data;
	}

	g_dev = dev;
	raceblk_set_stage(RACEBLK_STAGE_LIVE, RACEBLK_NONE);
	return 0;

out_free_data:
	vfree(dev->data);
out_free_dev:
	kfree(dev);
	return err;
}

static void __exit raceblk_exit(void)
{
	if (g_backend_kind == RACEBLK_BACKEND_SCSI) {
		raceblk_scsi_remove(g_dev);
		raceblk_scsi_put(g_dev);
	} else {
		del_gendisk(g_dev->disk);
		raceblk_free_disk(g_dev);
		if (g_disk_owns_dev)
			return;
	}
	vfree(g_dev->data);
	kfree(g_dev);
}

module_init(raceblk_init);
module_exit(raceblk_exit);

MODULE_DESCRIPTION("blk-mq ram disk whose init fails on purpose, for module init race tests");
MODULE_LICENSE("GPL");
