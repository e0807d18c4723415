# Other drivers: the SCSI midlayer's (scsi_debug, ata_piix, sd), the
# in-tree null_blk, and the reproducer posting's module selftest.

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

# sd_partitions: how many partitions of sda sd shows.
act_sd_partitions() {
	grep ' sda' /proc/partitions
	obs sd_partitions "$(found_partitions | wc -l)"
}

# sd_scan:MODULE: when sd's partition scan of sda read the table, against
# MODULE's notifier events (the notifier action logs them): in_init
# (before MODULE went LIVE), after_init, or none (no scan read it: the
# open was refused); "no LIVE" when MODULE never went live.
act_sd_scan() {
	local scan live when

	scan=$(dmesg | grep -n '^\[[ 0-9.]*\]  sda: sda1' | head -n 1)
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
NULLB_TRIES=40

# nullb_catch FAULT: one load of null_blk (NULLB_PARAMS, init_hctx=FAULT)
# while a new blkhold opens nullb0 the moment it appears: LOAD is the
# load's answer, HELD blkhold's ("await OK": it holds nullb0).
nullb_catch() {
	rm -f /tmp/nullb.loaded
	holder_start
	holder_send await /dev/nullb0 30000 /tmp/nullb.loaded
	# shellcheck disable=SC2086 # NULLB_PARAMS is a word list
	LOAD=$(or_died modctl "$(modctl load "$NULLB_KO" $NULLB_PARAMS "init_hctx=$1")")
	: > /tmp/nullb.loaded
	HELD=$(holder_answer)
}

# nullb_held:FAULT: load the in-tree null_blk with two devices and its
# init_hctx= fault injection set to FAULT (null_blk's commas) while a
# holder opens nullb0 the moment it appears and keeps it open: the second
# device fails, and null_init() fails and tears nullb0 down under the
# holder.  A load the holder did not catch so (the fault hit nullb0, the
# teardown came first, both devices came up) is tried again, up to
# NULLB_TRIES loads: 6.12 draws the failing device at random (a load fails
# on nullb1 alone one time in four).  Then the holder closes nullb0.
# load: the last load's answer (died: an oops killed the loader); close:
# the close's answer or fate, or "unheld" when the teardown took
# nullb0's open_mutex before the holder (6.12's vanilla loader dies at its
# return, whether or not nullb0 was held, and ends the tries so).
act_nullb_held() {
	local n=0

	# null_blk needs configfs: built in (6.12: FAULT_INJECTION_CONFIGFS
	# selects it) or a module.
	grep -qw configfs /proc/filesystems || [ "$(modctl load /lib/modules/configfs.ko)" = OK ] ||
		{ echo "no configfs"; return 1; }
	while [ "$n" -lt "$NULLB_TRIES" ]; do
		n=$((n + 1))
		nullb_catch "$1"
		echo "load $n: $LOAD; blkhold: $HELD"
		# 6.12's vanilla loader oopses at its return (the scan's late
		# release), held or not; a holder that died or hung is done.
		[ "$LOAD" != died ] || break
		case $HELD in died | hung*) break ;; esac
		if [ "$LOAD" = OK ] && ! { holder_stop && [ "$(modctl unload null_blk)" = OK ]; }; then
			echo "cannot unload null_blk"
			return 1
		fi
		[ "$LOAD" = OK ] || [ "$HELD" != "await OK" ] || break
	done
	echo "load $n of at most $NULLB_TRIES"
	obs load "$LOAD"
	if [ "$HELD" = "await OK" ]; then
		holder_obs close close "$(holder_ask close)"
	else
		obs close unheld
	fi
}

# --- the module selftest of the reproducer posting -------------------------

# kselftest:TEST: run /lib/kselftest/TEST (a selftest of the reproducer
# posting, kernel-patches/TREE/repro/) with its test module from
# /lib/modules: its TAP results in order, "ok" or "not_ok", joined by
# commas.  A test an oops killed ends its results there.
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
	got=$(sed -n 's/^\(not ok\|ok\) [0-9].*/\1/p' /tmp/kselftest.out | tr ' ' _ | paste -s -d ,)
	echo "${SETTLED:+$1: $SETTLED}"
	obs kselftest "${got:-no results}"
}
