# Steps a scenario row can name.  step_NAME [ARG] prints what it saw (each
# line becomes a KTAP diagnostic) and returns 0 when the check holds.
# Globals: PARAMS (module parameters), IMAGE (image name).

KO=/lib/modules/raceblk.ko
DISK=raceblk0
GOLDEN=/lib/raceblk/images

# modctl_expect EXPECTED ARGS...: run modctl ARGS, say what it gave.
modctl_expect() {
	local expected=$1 got

	shift
	got=$(modctl "$@")
	echo "modctl $*: $got, expected $expected"
	[ "$got" = "$expected" ]
}

# load=ERRNO: finit_module() once with the row's parameters gives ERRNO.
step_load() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl_expect "$1" load "$KO" $PARAMS
}

# unload=ERRNO: delete_module(raceblk, O_NONBLOCK) gives ERRNO.
step_unload() {
	modctl_expect "$1" unload raceblk
}

# force_unload=ERRNO: delete_module(raceblk, O_NONBLOCK | O_TRUNC), which
# is rmmod -f, gives ERRNO.
step_force_unload() {
	modctl_expect "$1" unload raceblk force
}

# notifier: load modnotify, which logs every module notifier event.
step_notifier() {
	modctl_expect OK load /lib/modules/modnotify.ko
}

# notify=EVENT,EVENT...: the notifier events raceblk got, in order.
step_notify() {
	local got

	got=$(dmesg | sed -n 's/.*modnotify: raceblk \([A-Z]*\)$/\1/p' | tr '\n' , | sed 's/,$//')
	echo "notifier events for raceblk: ${got:-none}, expected $1"
	[ "$got" = "$1" ]
}

# found_partitions: "number start size" of each partition sysfs shows.
found_partitions() {
	local part

	for part in "/sys/block/$DISK/${DISK}p"*; do
		[ -e "$part" ] || continue
		echo "${part##*p} $(cat "$part/start") $(cat "$part/size")"
	done | sort -n
}

golden_partitions() {
	grep -v '^#' "$GOLDEN/$IMAGE.expected"
}

# partitions: sysfs and /proc/partitions show exactly the golden table.
step_partitions() {
	local expected found nr size blocks status=0

	expected=$(golden_partitions)
	found=$(found_partitions)
	if [ "$expected" != "$found" ]; then
		echo "partition table differs from images/$IMAGE.expected"
		echo "expected (nr start size):"
		echo "$expected" | sed 's/^/  /'
		echo "found in /sys/block/$DISK:"
		echo "${found:-  (no partitions)}" | sed 's/^/  /'
		status=1
	fi
	while read -r nr _ size; do
		blocks=$(awk -v p="${DISK}p$nr" '$4 == p { print $3 }' /proc/partitions)
		if [ "$blocks" != $((size / 2)) ]; then
			echo "/proc/partitions ${DISK}p$nr: ${blocks:-missing} KiB, expected $((size / 2))"
			status=1
		fi
	done <<-EOT
	$expected
	EOT
	[ $status -eq 0 ] && echo "$(echo "$found" | wc -l) partitions as golden: $(echo "$found" | tr '\n' ';')"
	return $status
}

# data: every partition reads back the bytes the host put in the image.
step_data() {
	local nr sum got status=0

	while read -r nr sum; do
		got=$(md5sum < "/dev/${DISK}p$nr" | cut -d' ' -f1)
		if [ "$got" != "$sum" ]; then
			echo "${DISK}p$nr: md5 $got, expected $sum"
			status=1
		fi
	done < "$GOLDEN/$IMAGE.sums"
	[ $status -eq 0 ] && echo "$(wc -l < "$GOLDEN/$IMAGE.sums") partitions read back as in the image"
	return $status
}

# no_partitions: the disk is there, without partitions.
step_no_partitions() {
	local found

	found=$(found_partitions)
	grep " $DISK" /proc/partitions
	[ -e /sys/block/$DISK ] || { echo "no $DISK"; return 1; }
	if [ -n "$found" ]; then
		echo "partitions found:"
		echo "$found"
		return 1
	fi
	echo "$DISK has no partitions"
}

# open_disk: open the whole disk and read its first sector.
step_open_disk() {
	dd if=/dev/$DISK of=/dev/null bs=512 count=1 2>&1 | head -n 1
}

# rereadpt: ask the kernel to scan the partition table again (BLKRRPART).
step_rereadpt() {
	blockdev --rereadpt /dev/$DISK && echo "BLKRRPART on $DISK: OK"
}

# no_disk: the disk and its partitions are gone.
step_no_disk() {
	if [ -e /sys/block/$DISK ] || grep -q " $DISK" /proc/partitions; then
		echo "$DISK still present:"
		grep " $DISK" /proc/partitions
		return 1
	fi
	echo "no $DISK in /sys/block nor /proc/partitions"
}

# no_module: raceblk is not loaded (freed, not left behind).
step_no_module() {
	if grep '^raceblk ' /proc/modules; then
		echo "raceblk is still in /proc/modules"
		return 1
	fi
	echo "raceblk not in /proc/modules"
}

# scanned_in_init: the kernel listed the golden partitions while scanning
# the disk, before init failed.
step_scanned_in_init() {
	local parts scan fail

	parts=$(golden_partitions | awk '{ printf " p%s", $1 }')
	scan=$(dmesg | grep -n " $DISK:$parts\$" | head -n 1)
	fail=$(dmesg | grep -n "raceblk: failing init at" | head -n 1)
	echo "scan: ${scan#*:}"
	echo "fail: ${fail#*:}"
	[ -n "$scan" ] && [ -n "$fail" ] && [ "${scan%%:*}" -lt "${fail%%:*}" ]
}

# not_scanned: the kernel never listed partitions of the disk.
step_not_scanned() {
	if dmesg | grep " $DISK: p"; then
		echo "partitions of $DISK were scanned"
		return 1
	fi
	echo "no partition scan of $DISK in the kernel log"
}

# refused=MODULE: try_module_get() refused MODULE during its init, with
# the warning that names it and the caller.
step_refused() {
	local line

	line=$(dmesg | grep -F "$1: try_module_get() from" | head -n 1)
	echo "warning: ${line:-no try_module_get() warning naming $1}"
	[ -n "$line" ]
}

# stuck: raceblk's init failed after it was made live, so it is kept:
# logged as unsafe and stuck, live in /proc/modules with the "!" flag,
# unsafe in sysfs.
step_stuck() {
	local unsafe stuck proc status=0

	unsafe=$(dmesg | grep -F "raceblk: cannot be unloaded due to unsafe usage" | head -n 1)
	stuck=$(dmesg | grep -F "raceblk: module is now stuck" | head -n 1)
	proc=$(grep '^raceblk ' /proc/modules)
	echo "log: ${unsafe:-no unsafe line}"
	echo "log: ${stuck:-no stuck line}"
	echo "/proc/modules: ${proc:-no raceblk}"
	echo "/sys/module/raceblk: initstate $(cat /sys/module/raceblk/initstate 2>&1), unsafe $(cat /sys/module/raceblk/unsafe 2>&1)"
	[ -n "$unsafe" ] && [ -n "$stuck" ] || status=1
	case $proc in *" Live "*"!)") ;; *) status=1 ;; esac
	[ "$(cat /sys/module/raceblk/initstate 2>&1)" = live ] || status=1
	[ "$(cat /sys/module/raceblk/unsafe 2>&1)" = 1 ] || status=1
	return $status
}

# pr_err=TEXT: the driver logged "raceblk: TEXT..." at KERN_ERR.
step_pr_err() {
	local line

	line=$(dmesg -r | grep '^<3>' | grep -F "raceblk: $1" | head -n 1)
	echo "pr_err: ${line:-none starting with \"raceblk: $1\"}"
	[ -n "$line" ]
}
