// SPDX-License-Identifier: GPL-2.0
/*
 * initref: a module whose init takes a reference on itself through one of
 * the interfaces that do so legitimately on 6.1.
 *
 * A kernel that refuses try_module_get() until a module's init has
 * succeeded (the 2003 isolated loader, and Rusty Russell's proposal, which
 * lets only add_disk() through) fails each of these inits; today's kernel
 * and one that keeps a failed module only while it is held load them all.
 * ref= picks the interface:
 *
 *   self              try_module_get(THIS_MODULE) from init, as
 *                     klp_enable_patch() does for a livepatch module and
 *                     sk_alloc() for a protocol module's kernel socket
 *   firmware_nowait   request_firmware_nowait(THIS_MODULE, ...) from init,
 *                     as some 50 drivers do from a probe run in their init
 *   misc_open         open the misc device init has just registered, as a
 *                     driver whose device node is opened during its init
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/completion.h>
#include <linux/firmware.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/moduleparam.h>

static char *g_ref = "self";
module_param_named(ref, g_ref, charp, 0444);
MODULE_PARM_DESC(ref, "How init takes a reference on its own module: self, firmware_nowait, misc_open. Default: self");

static char *g_firmware = "raceblk/mbr-primary.img";
module_param_named(firmware, g_firmware, charp, 0444);
MODULE_PARM_DESC(firmware, "File ref=firmware_nowait requests. Default: raceblk/mbr-primary.img");

static const struct file_operations initref_fops = {
	.owner	= THIS_MODULE,
};

static struct miscdevice initref_misc = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "initref",
	.fops	= &initref_fops,
};

static DECLARE_COMPLETION(initref_firmware_done);

/* As klp_enable_patch() takes its patch module. */
static int initref_self(void)
{
	if (!try_module_get(THIS_MODULE))
		return -ENODEV;
	module_put(THIS_MODULE);
	return 0;
}

static void initref_firmware_loaded(const struct firmware *fw, void *context)
{
	pr_info("request_firmware_nowait(%s) callback: %s\n", g_firmware,
		fw ? "loaded" : "not found");
	release_firmware(fw);
	complete(&initref_firmware_done);
}

/* As a probe run from init does; wait for the callback before returning. */
static int initref_firmware_nowait(void)
{
	int err;

	err = request_firmware_nowait(THIS_MODULE, FW_ACTION_UEVENT, g_firmware,
				      initref_misc.this_device, GFP_KERNEL,
				      NULL, initref_firmware_loaded);
	if (err)
		return err;
	wait_for_completion(&initref_firmware_done);
	return 0;
}

static int initref_misc_open(void)
{
	struct file *file;

	file = filp_open("/dev/initref", O_RDONLY, 0);
	if (IS_ERR(file))
		return PTR_ERR(file);
	return filp_close(file, NULL);
}

/* The cases, by the name ref= gives. */
static const struct {
	const char *name;
	int (*take)(void);
} initref_cases[] = {
	{ "self",		initref_self },
	{ "firmware_nowait",	initref_firmware_nowait },
	{ "misc_open",		initref_misc_open },
};

static int __init initref_init(void)
{
	int i, err;

	for (i = 0; i < ARRAY_SIZE(initref_cases); i++)
		if (!strcmp(g_ref, initref_cases[i].name))
			break;
	if (i == ARRAY_SIZE(initref_cases)) {
		pr_err("ref=%s: unknown value\n", g_ref);
		return -EINVAL;
	}

	err = misc_register(&initref_misc);
	if (err)
		return err;
	err = initref_cases[i].take();
	if (err) {
		pr_err("ref=%s during init: %pe\n", g_ref, ERR_PTR(err));
		misc_deregister(&initref_misc);
		return err;
	}
	pr_info("ref=%s during init: OK\n", g_ref);
	return 0;
}

static void __exit initref_exit(void)
{
	misc_deregister(&initref_misc);
}

module_init(initref_init);
module_exit(initref_exit);

MODULE_DESCRIPTION("Takes a reference on itself during init, as livepatch, firmware and misc users do");
MODULE_LICENSE("GPL");
