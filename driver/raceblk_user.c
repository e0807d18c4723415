// SPDX-License-Identifier: GPL-2.0
/*
 * raceblk_user: a module that uses a symbol raceblk exports.
 *
 * Loaded while raceblk's init is held after add_disk(), it shows how each
 * kernel links a dependant to a module whose init may still fail: the
 * loader waits for that init to finish (resolve_symbol_wait()), or links at
 * once to a module made live early, which then holds on to a module that
 * fails.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>

#include "raceblk.h"

static int __init raceblk_user_init(void)
{
	pr_info("linked to raceblk, whose init is at %s\n", raceblk_stage_point());
	return 0;
}

static void __exit raceblk_user_exit(void)
{
}

module_init(raceblk_user_init);
module_exit(raceblk_user_exit);

MODULE_DESCRIPTION("Uses a symbol of raceblk, to test linking while raceblk's init runs");
MODULE_LICENSE("GPL");
