# Steps a scenario row can name.  step_NAME [ARG] prints what it saw (each
# line becomes a KTAP diagnostic) and returns 0 when the check holds.
# Globals: PARAMS (module parameters), IMAGE (image name).

KO=/lib/modules/raceblk.ko
DISK=raceblk0
GOLDEN=/lib/raceblk/images

# load=ERRNO: finit_module() once with the row's parameters gives ERRNO.
step_load() {
	local got

	# shellcheck disable=SC2086 # PARAMS is a word list
	got=$(modctl load "$KO" $PARAMS)
	echo "finit_module(raceblk.ko, \"$PARAMS\") = $got, expected $1"
	[ "$got" = "$1" ]
}

# unload=ERRNO: delete_module(raceblk, O_NONBLOCK) gives ERRNO.
step_unload() {
	local got

	got=$(modctl unload raceblk)
	echo "delete_module(raceblk) = $got, expected $1"
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

# pr_err=TEXT: the driver logged "raceblk: TEXT..." at KERN_ERR.
step_pr_err() {
	local line

	line=$(dmesg -r | grep '^<3>' | grep -F "raceblk: $1" | head -n 1)
	echo "pr_err: ${line:-none starting with \"raceblk: $1\"}"
	[ -n "$line" ]
}
