/* SPDX-License-Identifier: GPL-2.0 */
#ifndef RACEBLK_H
#define RACEBLK_H

/* The point raceblk's init has reached, by its fail_at= name. */
const char *raceblk_stage_point(void);

#endif
