# Other drivers: the SCSI midlayer's (scsi_debug, ata_piix, sd), the
# in-tree null_blk, and the module posting's selftest.

# scsi_scan:sync|async: the SCSI midlayer's scan order for the hosts added
# from now on (scsi_mod.scan, writable at run time).
act_scsi_scan() {
	echo "$1" > /sys/module/scsi_mod/parameters/scan || return 1
	echo "scsi_mod.scan: $(cat /sys/module/scsi_mod/parameters/scan)"
}

# scsi_debug: load the in-tree scsi_debug, one 4 MiB disk with 4
# partitions (it writes their MBR itself).  The disk is sda.  The loader
# runs async_synchronize_full() before it returns (scsi_debug does not ask
# for async probing), so sd's probe is over then.
act_scsi_debug() {
	# shellcheck disable=SC2034 # disk.sh's globals (see select_disk)
	DISK=sda PART="" SCAN=sda
	modctl_obs scsi_debug load /lib/modules/scsi_debug.ko num_parts=4 dev_size_mb=4
}

# ata_piix: load libata's PIIX driver (QEMU's pc machine has the case's
# image as its IDE disk, machine=pc-ide).  The disk is sda.  libata probes
# its ports asynchronously; the loader waits for that before it returns.
act_ata_piix() {
	# shellcheck disable=SC2034 # disk.sh's globals (see select_disk)
	DISK=sda PART="" SCAN=sda
	modctl_obs ata_piix load /lib/modules/ata_piix.ko
}

# The line of sd's partition scan of sda that read the table.
SD_SCANNED='^\[[ 0-9.]*\]  sda: sda1'
sd_scanned() {
	dmesg | grep -q "$SD_SCANNED"
}

# sd_partitions: how many partitions of sda sd shows.
act_sd_partitions() {
	grep ' sda' /proc/partitions
	obs sd_partitions "$(found_partitions | wc -l)"
}

# sd_scan:MODULE: when sd's partition scan of sda read the table, against
# MODULE's notifier events (the notifier action logs them): in_init
# (before MODULE went LIVE), after_init, or none (no scan read it: the
# open was refused); "no LIVE" when MODULE never went live.  A scan after
# init may still be reading when the load returns (isolate's, once in
# about forty runs): none only after 5 s without one.
act_sd_scan() {
	local scan live when

	poll 5 sd_scanned || true
	scan=$(dmesg | grep -n "$SD_SCANNED" | head -n 1)
	live=$(dmesg | grep -n "modnotify: $1 LIVE" | head -n 1)
	echo "scan: ${scan:-none}"
	echo "live: ${live:-none}"
	when=none
	[ -z "$scan" ] || when=after_init
	[ -z "$scan" ] || [ "${scan%%:*}" -gt "${live%%:*}" ] || when=in_init
	[ -n "$live" ] || when="no LIVE"
	obs sd_scan "$when"
}

# sd_attached: raceblk backend=scsi scanned its host during init: whether
# sd bound to its LUN before init went on, as raceblk logs it (yes, or its
# line, or "no scan line").
# expects: sd_attached=yes
act_sd_attached() {
	local line

	line=$(dmesg | grep -E 'raceblk: host[0-9]+: scanned, sd ' | head -n 1)
	echo "${line:-no scan line from raceblk}"
	case $line in
	*"sd attached") obs sd_attached yes ;;
	"") obs sd_attached "no scan line" ;;
	*) obs sd_attached "${line##*scanned, }" ;;
	esac
}

# --- null_blk: the race with an upstream driver --------------------------

NULLB_KO=/lib/modules/null_blk.ko
# Two devices, a queue each, whose I/O a timer completes 0.2 s after it
# was queued: the partition scan in add_disk() keeps nullb0 busy long
# enough for a holder to open it before the second device fails.
NULLB_PARAMS="nr_devices=2 submit_queues=1 poll_queues=0 irqmode=2 completion_nsec=200000000"
# A load whose failure the holder must catch may miss it: load_held tries
# this many loads.
HELD_TRIES=40

# catch_load KO DISK PARAMS...: one load of KO with PARAMS while a new
# blkhold opens /dev/DISK the moment it appears: LOAD is the load's
# answer, HELD blkhold's ("await OK": it holds DISK).
catch_load() {
	local ko=$1 disk=$2

	shift 2
	rm -f /tmp/catch.loaded
	holder_start
	holder_send await "/dev/$disk" 30000 /tmp/catch.loaded
	LOAD=$(or_died modctl "$(modctl load "$ko" "$@")")
	: > /tmp/catch.loaded
	HELD=$(holder_answer)
}

# load_needed KO [PARAMS...]: load a module an action needs before the
# one it tries; one already loaded will do.  False, saying why, if it
# does not load.
load_needed() {
	local answer

	answer=$(modctl load "$@")
	case $answer in OK | EEXIST) return 0 ;; esac
	echo "cannot load ${1##*/}: $answer"
	return 1
}

# load_held TRIES KO NAME DISK PARAMS...: catch_load until a load failed
# with DISK held, up to TRIES loads: a load the holder did not catch so
# (the failure came before DISK, the teardown came first, or init did not
# fail) is tried again.  A loader that died, a holder that died or hung, a
# module a failed load left behind with nothing held (rusty keeps it for
# good), or a disk that came and whose opens its module refused during
# init (isolate) ends the tries.  LOAD and HELD are the last load's.
load_held() {
	local tries=$1 ko=$2 name=$3 disk=$4 n=0

	shift 4
	while [ "$n" -lt "$tries" ]; do
		n=$((n + 1))
		${CATCH:-catch_load} "$ko" "$disk" "$@"
		echo "load $n: $LOAD; blkhold: $HELD"
		[ "$LOAD" != died ] || break
		case $HELD in died | hung*) break ;; esac
		# catch_fault: its fault hit while the holder held DEV.
		[ -z "${CATCH_DONE:-}" ] || break
		if [ "$LOAD" = OK ]; then
			holder_stop
			HELD=
			[ "$(modctl unload "$name")" = OK ] || { echo "cannot unload $name"; return 1; }
			continue
		fi
		[ "$HELD" != "await OK" ] || break
		# fixed frees a module kept after its failure from a work
		# item once its holders let go: give it time.  One still there
		# is kept for good (rusty): no load can follow.
		poll 2 module_gone "$name" || break
		# isolate: the disk came, and its module refused every open
		# while its init ran: no load can catch it.
		[ "$HELD" != "await ENXIO" ] || ! dmesg | grep -q "$name: try_module_get() from" || break
	done
	echo "load $n of at most $tries"
}

# close_held KEY: the holder load_held or own_open left holding a disk
# (HELD "await OK" or "open OK") closes it: OK, an errno or its fate, or
# "unheld" when it holds nothing; reported as KEY.
close_held() {
	if [ "$HELD" = "await OK" ] || [ "$HELD" = "open OK" ]; then
		holder_obs "$1" close "$(holder_ask close)"
		HELD=
	else
		obs "$1" unheld
	fi
}

# nullb_held:FAULT: load the in-tree null_blk with two devices and its
# init_hctx= fault injection set to FAULT (null_blk's commas) while a
# holder opens nullb0 the moment it appears and keeps it open: the second
# device fails, and null_init() fails and tears nullb0 down under the
# holder.  Loads the holder did not catch so are tried again (load_held),
# up to HELD_TRIES: 6.12 draws the failing device at random (a load fails
# on nullb1 alone one time in four).  Then the holder closes nullb0.
# load: the last load's answer (died: an oops killed the loader); close:
# the close's answer or fate, or "unheld" when the teardown took
# nullb0's open_mutex before the holder (6.12's vanilla loader dies at its
# return, whether or not nullb0 was held, and ends the tries so).
act_nullb_held() {
	# null_blk needs configfs: built in (6.12: FAULT_INJECTION_CONFIGFS
	# selects it) or a module.
	grep -qw configfs /proc/filesystems || [ "$(modctl load /lib/modules/configfs.ko)" = OK ] ||
		{ echo "no configfs"; return 1; }
	# shellcheck disable=SC2086 # NULLB_PARAMS is a word list
	load_held "$HELD_TRIES" "$NULLB_KO" null_blk nullb0 $NULLB_PARAMS "init_hctx=$1" || return 1
	obs load "$LOAD"
	close_held close
}

# ubi_held: load the in-tree ubi with two mtd= parameters, mtdram's mtd0
# and one that does not exist, while a holder opens /dev/ubi_ctrl, which
# ubi's init registers first, the moment it appears: the init attaches
# mtd0 (ubi0), fails to open the second, detaches ubi0 and fails with
# ENOENT.  Loads the holder did not catch so are tried again (load_held).
# Then the holder closes /dev/ubi_ctrl.  load: the last load's answer;
# close: the close's answer or fate, or "unheld".
act_ubi_held() {
	load_needed /lib/modules/mtd.ko || return 1
	load_needed /lib/modules/mtdram.ko "total_size=$UBI_MTD_KIB" erase_size=128 || return 1
	load_held "$HELD_TRIES" /lib/modules/ubi.ko ubi ubi_ctrl mtd=0 mtd=absent || return 1
	obs load "$LOAD"
	close_held close
}

# mtd0's size: attaching it (a scan of every eraseblock) is the moment
# the holder has to open /dev/ubi_ctrl.
UBI_MTD_KIB=16384

# --- in-tree drivers failed by the kernel's fault injection ----------------

# fault_driver NAME: set FD_DEPS (modules it needs, in load order), FD_KO,
# FD_DEV (what its init publishes first, under /dev) and FD_PARAMS for an
# in-tree module whose init can fail after it published something (make
# survey lists them); false for another name.
fault_driver() {
	FD_DEPS='' FD_PARAMS=''
	case $1 in
	# Eight disks, one by one: zram0 is there long before the last.  Its
	# compressor is built in on 6.1 (CRYPTO_LZO), a module on 7.3.
	zram)
		FD_DEPS="/lib/modules/zsmalloc.ko /lib/modules/lzo_compress.ko"
		FD_DEV=zram0 FD_PARAMS=num_devices=8
		;;
	# /dev/loop-control, then the loop major.
	loop) FD_DEV=loop-control ;;
	# /dev/fuse, then fuse's sysfs directory and control filesystem.
	fuse) FD_DEV=fuse ;;
	*) return 1 ;;
	esac
	FD_KO=/lib/modules/$1.ko
}

# fault_setup: failslab may fail allocations that can sleep (a module's
# init makes mostly those), and logs each failure it injects in a line.
fault_setup() {
	local f=/sys/kernel/debug/failslab

	[ -d $f ] || { echo "no $f (CONFIG_FAILSLAB, CONFIG_FAULT_INJECTION_DEBUG_FS)"; return 1; }
	echo N > $f/ignore-gfp-wait && echo 1 > $f/verbose
}

# Far enough that no load reaches it: the count of a load that fails nothing.
FAULT_FAR=1000000
# Loads fault_held tries: a window of 25 sites, twice, a few of them
# several times.
FAULT_TRIES=100

# catch_fault KO DEV PARAMS...: catch_load, the loader with the kernel's
# fault injection armed at its FAULT_NTH-th site (modctl MODCTL_FAIL_NTH:
# FAULT_FIRED is whether that site failed), the holder spinning on
# /dev/DEV (blkhold catch) and recording in /tmp/loader.nth how many
# sites the loader had to go when DEV appeared and when the holder had it
# open.  A site that failed while the holder held DEV and that the init
# tolerated (the load is OK) is kept in FAULT_TOLERATED: the scenario
# ends there (CATCH_DONE) only when the rounds of the window found no
# site whose failure failed the init while DEV was held.  Then the next
# site to try (see fault_next).
catch_fault() {
	local ko=$1 dev=$2 out

	shift 2
	rm -f /tmp/catch.loaded /tmp/loader.nth /tmp/loader.pid
	holder_start
	holder_send catch "/dev/$dev" 30000 /tmp/catch.loaded /tmp/loader.pid /tmp/loader.nth
	# The holder looks before the loader starts: an init may publish early.
	poll 10 test -e /tmp/loader.nth || echo "blkhold never started looking"
	out=$(MODCTL_FAIL_NTH=$FAULT_NTH MODCTL_PIDFILE=/tmp/loader.pid \
		modctl load "$ko" "$@" 5>&- 6<&-)
	LOAD=$(or_died modctl "$(echo "$out" | sed -n 1p)")
	FAULT_FIRED=$(echo "$out" | sed -n 2p)
	: > /tmp/catch.loaded
	HELD=$(holder_answer)
	case $HELD in
	"catch "*) HELD="await ${HELD#catch }" ;;
	esac
	echo "fault at site $FAULT_NTH: ${FAULT_FIRED:-?}"
	CATCH_DONE=
	if [ "$LOAD" = OK ] && [ "$FAULT_FIRED" = "fault fired" ] && [ "$HELD" = "await OK" ]; then
		[ -z "$FAULT_FINAL" ] || { CATCH_DONE=yes; return; }
		[ -n "$FAULT_TOLERATED" ] || FAULT_TOLERATED=$FAULT_NTH
	fi
	fault_next
}

# fault_next: the site the next try fails (FAULT_NTH): the next one, or
# the same again (up to FAULT_RETRIES tries) when it failed the init but
# DEV was gone before the holder's open got it (ENOENT, ENODEV): a misc
# device is there only from its registration to its deregistration, a
# moment.  Past FAULT_LAST, round again from FAULT_FIRST when a site of
# the round failed the init with DEV not held (FAULT_LOST: the holder
# lost the race for it), up to FAULT_ROUNDS rounds; else end with
# FAULT_TOLERATED once more, when there is one (FAULT_FINAL).
FAULT_RETRIES=3
FAULT_ROUNDS=2
fault_next() {
	case $LOAD:$HELD in
	OK:* | died:* | *:"await OK" | *:"await ENXIO") ;;
	*)
		if [ "$FAULT_FIRED" = "fault fired" ]; then
			FAULT_LOST=$((FAULT_LOST + 1))
			if [ "$FAULT_TRIED" -lt "$FAULT_RETRIES" ]; then
				FAULT_TRIED=$((FAULT_TRIED + 1))
				return
			fi
		fi
		;;
	esac
	FAULT_TRIED=1
	FAULT_NTH=$((FAULT_NTH + 1))
	[ "$FAULT_NTH" -gt "$FAULT_LAST" ] || return 0
	FAULT_NTH=$FAULT_FIRST
	if [ -n "$FAULT_TOLERATED" ] && { [ "$FAULT_LOST" -eq 0 ] || [ "$FAULT_ROUND" -ge "$FAULT_ROUNDS" ]; }; then
		FAULT_NTH=$FAULT_TOLERATED FAULT_FINAL=yes
	fi
	FAULT_ROUND=$((FAULT_ROUND + 1)) FAULT_LOST=0
}

# fault_window KO DEV PARAMS...: load KO with fault injection armed out of
# reach while a holder catches /dev/DEV, then unload it, up to
# FAULT_CALIBRATIONS times until the holder saw DEV while the loader ran
# (a quick init may be over first): the sites to try, "FIRST LAST" (nothing
# when it never did, or the module would not unload), from FAULT_MARGIN
# before to twice that after the one the loader had passed when the
# holder had DEV open (the one it had passed when the holder saw DEV,
# when the loader was gone by the time the open returned).  Sites before
# FIRST fail the init before the holder can have DEV.
FAULT_MARGIN=8
FAULT_CALIBRATIONS=8

# fault_start FIRST LAST: the tries of catch_fault begin, at site FIRST.
fault_start() {
	FAULT_FIRST=$1 FAULT_LAST=$2 FAULT_NTH=$1 FAULT_TRIED=1 FAULT_ROUND=1 FAULT_LOST=0
	FAULT_TOLERATED='' FAULT_FINAL=''
}

fault_window() {
	local ko=$1 dev=$2 name seen='' opened first tries=0

	shift 2
	name=${ko##*/}
	while [ -z "$seen" ] && [ "$tries" -lt "$FAULT_CALIBRATIONS" ]; do
		tries=$((tries + 1))
		fault_start "$FAULT_FAR" "$FAULT_FAR"
		catch_fault "$ko" "$dev" "$@" > /dev/null
		holder_stop
		# 0: the loader was done, and disarmed its count.
		seen=$(sed -n '1{/^[1-9][0-9]*$/p}' /tmp/loader.nth 2> /dev/null)
		opened=$(sed -n '2{/^[1-9][0-9]*$/p}' /tmp/loader.nth 2> /dev/null)
		echo "calibration load: $LOAD; blkhold: $HELD; fail-nth left: ${seen:-?}, ${opened:-?}" \
			"(read: $(tr '\n' ' ' < /tmp/loader.nth 2> /dev/null))" >&2
		[ "$LOAD" != OK ] || [ "$(modctl unload "${name%.ko}")" = OK ] ||
			{ echo "cannot unload ${name%.ko} after the calibration load" >&2; return 0; }
	done
	[ -n "$seen" ] || return 0
	opened=$((FAULT_FAR - ${opened:-$seen}))
	first=$((opened - FAULT_MARGIN))
	[ "$first" -ge 1 ] || first=1
	echo "$first" $((opened + 2 * FAULT_MARGIN))
}

# fault_held:NAME: the in-tree driver NAME (see fault_driver) loaded while
# a holder opens what its init publishes first the moment it appears, and
# a fault-injection site of the loader's failed (failslab, through its
# fail-nth) from a little before the holder had it open in a load that
# failed nothing (fault_window): a site each load, until one failed the
# init while the holder held it, or else one whose failure the init went
# on without (catch_fault; load_held, up to FAULT_TRIES loads).  Then the
# holder closes it, and a module that loaded is unloaded.  load: the last
# load's answer: OK, died or failed (the errno depends on the site);
# close: the close's answer or fate, or "unheld"; unload: rmmod's answer,
# when the load was OK; left: NAME's disks and DEV still there after its
# module went (none, or their names): a driver whose failed init leaves a
# device behind.
act_fault_held() {
	local dep window

	fault_driver "$1" || { echo "fault_held: no driver $1"; return 1; }
	fault_setup || return 1
	for dep in $FD_DEPS; do
		[ -e "$dep" ] || continue
		load_needed "$dep" || return 1
	done
	# shellcheck disable=SC2086 # FD_PARAMS is a word list
	window=$(fault_window "$FD_KO" "$FD_DEV" $FD_PARAMS)
	[ -n "$window" ] || { echo "no sites to try: see the calibration loads"; return 1; }
	fault_start "${window% *}" "${window#* }"
	echo "fault-injection sites to try: $FAULT_FIRST to $FAULT_LAST"
	CATCH=catch_fault
	# shellcheck disable=SC2086 # FD_PARAMS is a word list
	load_held "$FAULT_TRIES" "$FD_KO" "$1" "$FD_DEV" $FD_PARAMS || { CATCH=''; return 1; }
	CATCH='' CATCH_DONE=''
	echo "load: $LOAD"
	obs load "$(own_answer "$LOAD")"
	close_held close
	[ "$LOAD" != OK ] || obs unload "$(modctl unload "$1")"
	poll 10 module_gone "$1" || true
	obs left "$(fault_leftovers "$1")"
}

# fault_leftovers NAME: NAME's block devices and /dev files still there
# (none).
fault_leftovers() {
	local left='' f

	for f in /sys/block/"$1"* /dev/"$FD_DEV"; do
		[ ! -e "$f" ] || case " $left " in
		*" ${f##*/} "*) ;;
		*) left="$left ${f##*/}" ;;
		esac
	done
	echo "${left# }" | grep . || echo none
}

# --- harness/run --module: the user's own driver ---------------------------

# The module, as the host sent it in the scenario's archive
# (harness/session.py, own_archive): OWN_NAME, OWN_KO, OWN_DEPS (modules
# it needs, in load order), OWN_DISK, OWN_PARAMS (every load's) and
# OWN_FAIL (what makes its init fail after OWN_DISK is added).
OWN_CONF=/lib/raceblk/own.conf

# own_conf: read OWN_CONF and load OWN_DEPS, once; false without it, or
# when a module it needs does not load (the user's would fail for that).
own_conf() {
	local dep

	[ -z "$OWN_NAME" ] || return 0
	[ -f "$OWN_CONF" ] || { echo "no $OWN_CONF: harness/run --module sends it"; return 1; }
	# shellcheck source=/dev/null
	. "$OWN_CONF"
	for dep in $OWN_DEPS; do
		load_needed "$dep" || { OWN_NAME=; return 1; }
	done
}

# own_answer ANSWER: an answer of a load or unload as the cases see a
# driver they do not know: OK, died, or "failed" (the errno is logged).
own_answer() {
	case $1 in
	OK | died) echo "$1" ;;
	*) echo failed ;;
	esac
}

# own_held: load the user's module with OWN_PARAMS and OWN_FAIL while a
# holder opens OWN_DISK the moment it appears and keeps it open, until a
# load fails with the disk held (load_held, up to HELD_TRIES loads).
# load: OK (init never failed: OWN_FAIL does not fail it), failed or
# died; held: yes when the holder has the disk.  rusty keeps the module
# of the first failed load, caught or not: it has one try.
act_own_held() {
	own_conf || return 1
	# shellcheck disable=SC2086 # word lists
	load_held "$HELD_TRIES" "$OWN_KO" "$OWN_NAME" "$OWN_DISK" $OWN_PARAMS $OWN_FAIL || return 1
	[ "$LOAD" != OK ] || echo "init did not fail in $HELD_TRIES loads: OWN_FAIL ($OWN_FAIL) does not fail it"
	obs load "$(own_answer "$LOAD")"
	obs held "$([ "$HELD" = "await OK" ] && echo yes || echo no)"
}

# own_close: the holder of own_held or own_open closes the disk: OK, an
# errno or its fate, or unheld.
act_own_close() {
	close_held own_close
}

# own_load: load the user's module with OWN_PARAMS alone: OK, died, or
# an errno.
act_own_load() {
	own_conf || return 1
	# shellcheck disable=SC2086 # a word list
	modctl_obs own_load load "$OWN_KO" $OWN_PARAMS
}

# own_open: a holder opens OWN_DISK and keeps it open: OK, an errno or
# its fate.
act_own_open() {
	own_conf || return 1
	holder_start
	HELD=$(holder_ask open "/dev/$OWN_DISK")
	holder_obs own_open open "$HELD"
}

# own_unload: delete_module() of the user's module (rmmod): OK, or an
# errno (ENOENT: it is gone, EAGAIN: in use, EBUSY: it cannot go).
act_own_unload() {
	own_conf || return 1
	modctl_obs own_unload unload "$OWN_NAME"
}

# own_module: whether the user's module is in /proc/modules: present or
# absent.
act_own_module() {
	own_conf || return 1
	grep "^$OWN_NAME " /proc/modules
	obs own_module "$(module_gone "$OWN_NAME" && echo absent || echo present)"
}

# own_kept: mod_kept for the user's module.
# expects: as mod_kept
act_own_kept() {
	own_conf || return 1
	act_mod_kept "$OWN_NAME"
}

# own_stuck: stuck for the user's module (rusty keeps it for good).
# expects: as stuck
act_own_stuck() {
	own_conf || return 1
	act_stuck "$OWN_NAME"
}

# own_reaped: mod_reaped for the user's module.
# expects: as mod_reaped
act_own_reaped() {
	own_conf || return 1
	act_mod_reaped "$OWN_NAME"
}

# --- the module posting's selftest -------------------------------------------

# kselftest:TEST: run /lib/kselftest/TEST (the module posting's selftest,
# kernel-patches/TREE/module/) with its test module from /lib/modules: its
# KTAP results in order, "ok", "not_ok" or "skip", joined by commas, and
# whether it printed its totals (totals: printed or none).  A test an oops
# killed ends its results there.
# expects: totals=printed
act_kselftest() {
	local pid got

	TEST_MODULE_INIT_HELD_KO=/lib/modules/test_module_init_held.ko \
		sh "/lib/kselftest/$1" > /tmp/kselftest.out 2>&1 &
	pid=$!
	SETTLE_SECONDS=90 settle "$pid" sh || true
	# Still running: its holder would hold the test module for the steps
	# after.
	# shellcheck disable=SC2046 # pgrep's list of PIDs
	[ -z "$SETTLED" ] || kill $(pgrep -P "$pid") "$pid" 2>/dev/null
	sed 's/^/kselftest: /' /tmp/kselftest.out
	got=$(awk '/^(not )?ok [0-9]/ {
		r = "ok"
		if ($1 == "not")
			r = "not_ok"
		else if (/# SKIP/)
			r = "skip"
		printf "%s%s", sep, r
		sep = ","
	}' /tmp/kselftest.out)
	echo "${SETTLED:+$1: $SETTLED}"
	obs kselftest "${got:-no results}"
	obs totals "$(grep -q '^# Totals: ' /tmp/kselftest.out && echo printed || echo none)"
}
