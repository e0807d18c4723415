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

# golden_table: the image's golden table for this kernel's series
# (IMAGE.SERIES.expected), or for 6.1 (IMAGE.expected).
golden_table() {
	local series_table=$GOLDEN/$IMAGE.${VARIANT%%-*}.expected

	if [ -f "$series_table" ]; then
		echo "$series_table"
	else
		echo "$GOLDEN/$IMAGE.expected"
	fi
}

# golden_partitions: "number start size" of each partition the image's
# golden table lists (comments and blank lines dropped).
golden_partitions() {
	awk '{ sub(/#.*/, "") } NF { print $1, $2, $3 }' "$(golden_table)"
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

# table_differences EXPECTED FOUND KIB: one line per partition where the
# tables (files of "number start size") differ, in partition order, and
# where /proc/partitions (KIB: "number KiB") disagrees with sysfs (awk
# counts in doubles: not for sizes of 16 digits and more, as a partition
# past the end can have).
table_differences() {
	awk '
		FILENAME == ARGV[1] { want[$1] = $2 "+" $3; nr[$1] = 1; next }
		FILENAME == ARGV[2] { got[$1] = $2 "+" $3; size[$1] = $3; nr[$1] = 1; next }
		{ kib[$1] = $2 }
		END {
			for (n in nr) {
				if (want[n] != got[n])
					printf "%d p%s: expected %s, found %s\n", n, n,
						want[n] == "" ? "none" : want[n], got[n] == "" ? "none" : got[n]
				else if (length(size[n]) < 16 && kib[n] != int(size[n] / 2))
					printf "%d p%s: /proc/partitions says %s KiB, sysfs %s sectors\n", n, n,
						kib[n] == "" ? "nothing" : kib[n], size[n]
			}
		}
	' "$1" "$2" "$3" | sort -n | cut -d' ' -f2-
}

# partitions: sysfs and /proc/partitions show exactly the golden table;
# otherwise the differences are printed row by row (start+size, sectors).
step_partitions() {
	local differences

	golden_partitions > /tmp/expected.table
	found_partitions > /tmp/found.table
	awk -v p="$DISK$PART" 'index($4, p) == 1 && length($4) > length(p) { print substr($4, length(p) + 1), $3 }' \
		/proc/partitions > /tmp/found.kib
	differences=$(table_differences /tmp/expected.table /tmp/found.table /tmp/found.kib)
	if [ -n "$differences" ]; then
		echo "partition table differs from the golden one ($(basename "$(golden_table)")):"
		echo "$differences" | sed 's/^/  /'
		return 1
	fi
	echo "$(wc -l < /tmp/found.table) partitions as golden:" \
		"$(head -n 8 /tmp/found.table | tr '\n' ';')$([ "$(wc -l < /tmp/found.table)" -le 8 ] || echo ...)"
}

# data: the disk and every partition read back the bytes of the image
# (their md5 in the image's .sums), and a stamped partition starts with its
# own stamp ("raceblk IMAGE pN sector START").  One md5sum and one head for
# them all: a process costs milliseconds under TCG.
step_data() {
	local devices stamped problems

	# The disk and the partitions this kernel's golden table has (fixed
	# makes fewer of a looping EBR chain than the image's sums list).
	golden_partitions | cut -d' ' -f1 > /tmp/want.parts
	awk 'FILENAME == ARGV[1] { keep[$1] = 1; next } $1 == 0 || keep[$1]' \
		/tmp/want.parts "$GOLDEN/$IMAGE.sums" > /tmp/want.sums
	awk -v d="/dev/$DISK" -v p="$PART" '{ print ($1 ? d p $1 : d), $2 }' \
		/tmp/want.sums > /tmp/want.md5
	awk -v d="/dev/$DISK" -v p="$PART" 'NF > 2 { dev = $1 ? d p $1 : d; $1 = $2 = ""; sub(/^ +/, ""); print dev, $0 }' \
		/tmp/want.sums > /tmp/want.stamp
	devices=$(cut -d' ' -f1 /tmp/want.md5)
	stamped=$(cut -d' ' -f1 /tmp/want.stamp)
	# shellcheck disable=SC2086 # device lists
	md5sum $devices | awk '{ print $2, $1 }' > /tmp/got.md5
	: > /tmp/got.stamp
	# shellcheck disable=SC2086
	[ -z "$stamped" ] || head -v -n 1 $stamped |
		awk '/^==> .* <==$/ { dev = $2; first = 1; next } first { print dev, $0; first = 0 }' | tr -d '\0' > /tmp/got.stamp
	problems=$(awk '
		FILENAME == ARGV[1] { md5[$1] = $2; next }
		FILENAME == ARGV[2] { dev = $1; sub(/^[^ ]+ /, ""); stamp[dev] = $0; next }
		FILENAME == ARGV[3] { if (md5[$1] != $2) print $1 ": md5 " md5[$1] ", expected " $2; next }
		{ dev = $1; sub(/^[^ ]+ /, "")
		  if (stamp[dev] != $0) print dev ": first sector says \"" stamp[dev] "\", expected \"" $0 "\"" }
	' /tmp/got.md5 /tmp/got.stamp /tmp/want.md5 /tmp/want.stamp 2>&1)
	if [ -n "$problems" ]; then
		echo "$problems"
		return 1
	fi
	echo "$DISK and $(($(wc -l < /tmp/want.md5) - 1)) partitions read back as in the image," \
		"$(wc -l < /tmp/want.stamp) with their own stamp"
}

# sparse_image:NAME:MIB: a sparse image of MIB MiB of zeros under
# /lib/firmware/raceblk/NAME.img.  The root is ramfs: a hole costs nothing
# until something reads it, and then each page read stays in memory, so
# only stat looks at it here.
act_sparse_image() {
	local file=/lib/firmware/raceblk/${1%%:*}.img

	truncate -s "${1#*:}M" "$file" && echo "$file: $(stat -c %s "$file") bytes, sparse"
}

# no_partitions: the disk is there, without partitions.
step_no_partitions() {
	local found

	found=$(found_partitions)
	grep " $DISK" /proc/partitions
	[ -e /sys/block/"$DISK" ] || { echo "no $DISK"; return 1; }
	if [ -n "$found" ]; then
		echo "partitions found:"
		echo "$found"
		return 1
	fi
	echo "$DISK has no partitions"
}

# open_disk: open the whole disk and read its first sector.
act_open_disk() {
	dd if=/dev/"$DISK" of=/dev/null bs=512 count=1 2>&1 | head -n 1
}

# rereadpt: ask the kernel to scan the partition table again (BLKRRPART).
act_rereadpt() {
	blockdev --rereadpt /dev/"$DISK" && echo "BLKRRPART on $DISK: OK"
}

# no_disk: the disk and its partitions are gone.
step_no_disk() {
	if [ -e /sys/block/"$DISK" ] || grep -q " $DISK" /proc/partitions; then
		echo "$DISK still present:"
		grep " $DISK" /proc/partitions
		return 1
	fi
	echo "no $DISK in /sys/block nor /proc/partitions"
}

# scan_line: the kernel's partition scan report for the disk, with its
# dmesg line number: "N:[time]  raceblk0: p1 p2 < p5 p6 >".
scan_line() {
	dmesg | grep -n "^\[[ 0-9.]*\]  $DISK:" | head -n 1
}

# scanned_in_init: the kernel listed the golden partitions while scanning
# the disk, before init failed.  (A disk without partitions gives no scan
# line; then no scan line may name one.)
step_scanned_in_init() {
	local expected scan found fail

	expected=$(golden_partitions | awk -v s="$SCAN" '{ printf " %s%s", s, $1 }')
	scan=$(scan_line)
	found=$(echo "${scan#*:}" | sed 's/^\[[ 0-9.]*\]  [^:]*://' | grep -o "${SCAN}[0-9]*" |
		awk '{ printf " %s", $1 }')
	fail=$(dmesg | grep -n "raceblk: failing init at" | head -n 1)
	echo "scan: ${scan#*:}"
	echo "fail: ${fail#*:}"
	echo "partitions scanned:${found:- none}, golden:${expected:- none}"
	[ "$found" = "$expected" ] && [ -n "$fail" ] || return 1
	[ -z "$expected" ] || [ "${scan%%:*}" -lt "${fail%%:*}" ]
}

# not_scanned: the kernel never listed partitions of the disk.
step_not_scanned() {
	if dmesg | grep " $DISK: $SCAN"; then
		echo "partitions of $DISK were scanned"
		return 1
	fi
	echo "no partition scan of $DISK in the kernel log"
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

# ignored=N: the kernel said it ignored partition N of the disk (the gpt
# series: "DISK: GPT partition N ends at LBA ..., ignored", or the core's
# "DISK: pN start ... size ... overflows, ignored").
step_ignored() {
	loader_line "\] $DISK: (GPT partition $1 |p$1 ).*, ignored\$"
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

# read_done: the background read completed with the image's first 4 KiB.
step_read_done() {
	if ! settle "$(cat /tmp/bg.pid)" dd; then
		echo "read: ${SETTLED:-$(cat /tmp/bg.err)}"
		return 1
	fi
	echo "read done: $(wc -c < /tmp/bg.data) bytes"
	head -c 4096 "/lib/firmware/raceblk/$IMAGE.img" | cmp - /tmp/bg.data &&
		echo "the image's first 4 KiB"
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
