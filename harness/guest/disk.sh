# The disk: its partitions, its data, and I/O on it.

GOLDEN=/lib/raceblk/images

# select_disk: DISK, the disk raceblk makes (raceblk0), or with
# backend=scsi the disk sd makes of its LUN (sda: no other SCSI disk);
# PART, what comes between its name and a partition number (raceblk0p1,
# sda1); SCAN, how the kernel's scan line names a partition ("raceblk0: p1"
# but "sda: sda1").
select_disk() {
	case " $PARAMS " in
	*" backend=scsi "*) DISK=sda PART="" SCAN=sda ;;
	*) DISK=raceblk0 PART=p SCAN=p ;;
	esac
}

# found_partitions: "number start size" of each partition sysfs shows.
found_partitions() {
	local part start size

	for part in "/sys/block/$DISK/$DISK$PART"[0-9]*; do
		[ -e "$part" ] || continue
		read -r start < "$part/start"
		read -r size < "$part/size"
		echo "${part#"/sys/block/$DISK/$DISK$PART"} $start $size"
	done | sort -n
}

# golden_partitions: "number start size" of each partition of the
# image's golden table the host named (GOLDEN_TABLE; comments and blank
# lines dropped): device_of's "part" (which partition an action opens; the
# host judges the tables).
golden_partitions() {
	awk '{ sub(/#.*/, "") } NF { print $1, $2, $3 }' "$GOLDEN/$GOLDEN_TABLE"
}

# device_of NAME: "disk" is the whole disk; "part" its first partition in
# the golden table, or the whole disk when there is none; anything else
# a device name as it is.
device_of() {
	local nr

	case $1 in
	disk) echo "$DISK" ;;
	part)
		nr=$(golden_partitions | awk 'NR == 1 { print $1 }')
		echo "$DISK${nr:+$PART$nr}"
		;;
	*) echo "$1" ;;
	esac
}

# partitions: the partitions sysfs shows, "N:START+SIZE ..." (sectors), or
# none, or "no DISK" when the disk is not there; proc_kib: their sizes in
# /proc/partitions, "N:KIB ...".
act_partitions() {
	local table

	if [ ! -e "/sys/block/$DISK" ]; then
		obs partitions "no $DISK"
		return
	fi
	table=$(found_partitions | awk '{ printf "%s%s:%s+%s", (NR > 1 ? " " : ""), $1, $2, $3 }')
	obs partitions "${table:-none}"
	obs proc_kib "$(awk -v p="$DISK$PART" 'index($4, p) == 1 && length($4) > length(p) {
		printf "%s%s:%s", n++ ? " " : "", substr($4, length(p) + 1), $3 }' /proc/partitions)"
}

# data: the blksum of the disk and of each partition sysfs shows
# (sum.0 is the disk's, sum.N partition N's; md5 took 0.15 s of TCG for a
# 4 MiB disk), and the first line of the first sector of each (stamp.N:
# "raceblk IMAGE pN sector START" on a stamped image).  One blksum and one
# head for them all: a process costs milliseconds under TCG.
act_data() {
	local parts

	parts=$(found_partitions | awk -v d="/dev/$DISK" -v p="$PART" '{ printf " %s%s%s", d, p, $1 }')
	# shellcheck disable=SC2086 # a device list
	blksum "/dev/$DISK" $parts | awk -v d="/dev/$DISK" -v p="$PART" '{
		nr = $2 == d ? 0 : substr($2, length(d p) + 1); print "obs sum." nr "=" $1 }'
	# The first line of each one's first sector, printable bytes only.
	# shellcheck disable=SC2086
	head -v -c 512 "/dev/$DISK" $parts 2>/dev/null | tr -cd '\040-\176\n' | awk -v d="/dev/$DISK" -v p="$PART" '
		/^==> .* <==$/ { dev = $2; first = 1; next }
		first { first = 0; print "obs stamp." (dev == d ? 0 : substr(dev, length(d p) + 1)) "=" substr($0, 1, 80) }'
}

# sparse_image:NAME:MIB: a sparse image of MIB MiB of zeros under
# /lib/firmware/raceblk/NAME.img.  The root is ramfs: a hole costs nothing
# until something reads it, and then each page read stays in memory, so
# only stat looks at it here.
act_sparse_image() {
	local file=/lib/firmware/raceblk/${1%%:*}.img

	truncate -s "${1#*:}M" "$file" && echo "$file: $(stat -c %s "$file") bytes, sparse"
}

# open_disk: open the whole disk and read its first sector.
act_open_disk() {
	dd if=/dev/"$DISK" of=/dev/null bs=512 count=1 2>&1 | head -n 1
}

# rereadpt: ask the kernel to scan the partition table again (BLKRRPART).
act_rereadpt() {
	blockdev --rereadpt /dev/"$DISK" && echo "BLKRRPART on $DISK: OK"
}

# disk: whether the disk or any of its partitions is there (present or
# absent), in /sys/block or /proc/partitions.
act_disk() {
	if [ -e /sys/block/"$DISK" ] || grep -q " $DISK" /proc/partitions; then
		grep " $DISK" /proc/partitions
		obs disk present
	else
		obs disk absent
	fi
}

# scan_line: the kernel's partition scan report for the disk, with its
# dmesg line number: "N:[time]  raceblk0: p1 p2 < p5 p6 >".
scan_line() {
	dmesg | grep -n "^\[[ 0-9.]*\]  $DISK:" | head -n 1
}

# scan_obs: the partitions the kernel's scan of the disk listed (scan:
# their numbers, or none), whether init failed (failed: yes or no) and
# whether the scan came before that (scan_when: in_init or after_failure).
scan_obs() {
	local scan fail

	scan=$(scan_line)
	fail=$(dmesg | grep -n "raceblk: failing init at" | head -n 1)
	echo "scan: ${scan#*:}"
	echo "fail: ${fail#*:}"
	obs scan "$(echo "${scan#*:}" | sed 's/^\[[ 0-9.]*\]  [^:]*://' | grep -o "${SCAN}[0-9][0-9]*" |
		sed "s/^$SCAN//" | paste -s -d ' ' | grep . || echo none)"
	obs failed "$([ -n "$fail" ] && echo yes || echo no)"
	if [ -n "$scan" ] && [ -n "$fail" ]; then
		obs scan_when "$([ "${scan%%:*}" -lt "${fail%%:*}" ] && echo in_init || echo after_failure)"
	fi
}

# scanned_in_init: scan_obs; the host expects the golden partitions,
# scanned before init failed.
# expects: failed=yes
act_scanned_in_init() {
	scan_obs
}

# not_scanned: scan_obs; the host expects no scan.
# expects: scan=none
act_not_scanned() {
	scan_obs
}

# --- a partition past the end of the disk ----------------------------------

# probe:N:OFFSET: blkprobe on partition N (0: the disk) at byte OFFSET:
# each KEY it prints (size64, lseek, read, direct, mmap) with its VALUE.
act_probe() {
	local dev=/dev/$DISK nr=${1%%:*} offset=${1#*:} key value

	[ "$nr" = 0 ] || dev=$dev$PART$nr
	echo "blkprobe $dev $offset"
	blkprobe "$dev" "$offset" > /tmp/probe.out 2>&1
	while read -r key value; do
		obs "$key" "$value"
	done < /tmp/probe.out
}

# ignored:N: whether the kernel said it ignored partition N of the disk
# (yes or no: the gpt series' "DISK: GPT partition N ends at LBA ...,
# ignored", or the core's "DISK: pN start ... size ... overflows, ignored").
# expects: ignored=yes
act_ignored() {
	log_obs ignored "\] $DISK: (GPT partition $1 |p$1 ).*, ignored\$"
}

# past_end_refused: whether the driver logged that it refused a request
# past the end of its disk (yes or no).
act_past_end_refused() {
	local line

	line=$(dmesg | grep -F ": refused " | grep -F "past the end" | head -n 1)
	echo "driver: ${line:-refused nothing past the end}"
	obs past_end_refused "$([ -n "$line" ] && echo yes || echo no)"
}

# --- I/O in flight ------------------------------------------------------------

# read_bg: an O_DIRECT read of the disk's first 4 KiB, in the background.
act_read_bg() {
	dd if=/dev/"$DISK" of=/tmp/bg.data bs=4096 count=1 iflag=direct 2> /tmp/bg.err &
	echo $! > /tmp/bg.pid
	echo "O_DIRECT read of $DISK started in the background"
}

requests_in_flight() {
	awk '$1 + $2 > 0 { found = 1 } END { exit !found }' /sys/block/"$DISK"/inflight 2>/dev/null
}

# inflight: whether a request of the disk is in flight (yes or no; up to
# 10 s for one).
act_inflight() {
	local found=yes

	poll 10 requests_in_flight || found=no
	echo "/sys/block/$DISK/inflight (reads writes): $(cat /sys/block/"$DISK"/inflight 2>&1)"
	obs inflight "$found"
}

# read_done: how the background read ended (OK, or dd's error, or its
# fate), and the md5 of what it read.
# expects: read_done=OK
act_read_done() {
	if ! settle "$(cat /tmp/bg.pid)" dd; then
		obs read_done "${SETTLED:-$(cat /tmp/bg.err)}"
		return
	fi
	echo "read: $(wc -c < /tmp/bg.data) bytes"
	obs read_done OK
	obs md5 "$(md5sum < /tmp/bg.data | cut -d' ' -f1)"
}

# --- a reader stopped between two reads ------------------------------------

# reader_start:DEV: dd reads DEV (see device_of) with O_DIRECT, one
# 4 KiB at a time, in the background.
act_reader_start() {
	local dev

	dev=$(device_of "$1")
	dd if="/dev/$dev" of=/tmp/reader.data bs=4096 count=8 iflag=direct 2> /tmp/reader.err &
	echo $! > /tmp/reader.pid
	echo "dd reading /dev/$dev in the background (pid $(cat /tmp/reader.pid))"
}

# reader_stop: stop the reader (SIGSTOP) once its current read is done.
act_reader_stop() {
	kill -STOP "$(cat /tmp/reader.pid)" && echo "reader stopped"
}

# reader_done: let the reader go on (SIGCONT) and see how it ends: OK,
# EIO from a read, its exit status, or its fate (see fate) when it has not
# ended in 20 s or an oops killed it.
act_reader_done() {
	local pid got status

	pid=$(cat /tmp/reader.pid)
	kill -CONT "$pid"
	settle "$pid" dd && status=0 || status=$?
	cat /tmp/reader.err
	if [ -n "$SETTLED" ]; then
		got=$SETTLED
	elif [ "$status" -eq 0 ]; then
		got=OK
	elif grep -q 'Input/output error' /tmp/reader.err; then
		got=EIO
	else
		got="exit $status"
	fi
	obs reader_done "$got"
}
