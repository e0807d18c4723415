# Init held at a point, the disk opened meanwhile.
# A load runs in the background while init waits at hold=; blkhold, a
# process of its own, holds the disk open through fds 5 (commands) and 6
# (answers), so a crash on the held file kills it and not this init.

STAGE=/sys/module/raceblk/parameters/stage

# load_bg: start finit_module() in the background; load_done collects it.
act_load_bg() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl load "$KO" $PARAMS > /tmp/load.out 2>&1 &
	echo $! > /tmp/load.pid
	echo "finit_module(raceblk.ko, \"$PARAMS\") started in the background"
}

# sysfs_obs KEY FILE: report what FILE reads (or why it cannot) as KEY.
sysfs_obs() {
	echo "$2"
	obs "$1" "$(cat "$2" 2>&1)"
}

# param:NAME: what raceblk's parameter NAME reads in sysfs.
act_param() {
	sysfs_obs param "/sys/module/raceblk/parameters/$1"
}

# stage:NAME: wait up to 20 s for init to pass the point NAME; the stage
# it is at then.
act_stage() {
	poll 20 stage_is "$1" || true
	obs stage "$(cat "$STAGE" 2>&1)"
}

# kill_load: SIGKILL the process in finit_module() while init is held:
# whether it is gone 20 s later (loader: gone, or its fate: an oops on its
# way out is the case's to expect), and whether raceblk logged that its
# hold was interrupted (interrupted: yes or no).
act_kill_load() {
	local pid line

	pid=$(cat /tmp/load.pid)
	kill -9 "$pid"
	settle "$pid" modctl || true
	obs loader "${SETTLED:-gone}"
	line=$(dmesg | grep -m 1 'raceblk: hold at .* interrupted by a fatal signal')
	echo "${line:-no \"interrupted by a fatal signal\" line from raceblk}"
	obs interrupted "$([ -n "$line" ] && echo yes || echo no)"
}

# released_at: the point init went on from, as the log says: POINT when
# release was written ("init released at POINT"), else its hold line or
# none.
act_released_at() {
	local line

	line=$(dmesg | grep -m 1 -E "raceblk: (init released|hold) at ")
	echo "${line:-no release line}"
	case $line in
	*"init released at "*) obs released_at "${line##* }" ;;
	"") obs released_at none ;;
	*) obs released_at "not released: ${line#*raceblk: }" ;;
	esac
}

# load_done: how the background load finished: OK, an errno, or its fate
# (see fate: died when an oops killed it).
act_load_done() {
	modctl_answer "$(cat /tmp/load.pid)" /tmp/load.out
	# shellcheck disable=SC2153 # modctl_answer's answer
	obs load_done "$ANSWER"
}

stage_is() {
	[ "$(cat "$STAGE" 2>/dev/null)" = "$1" ]
}

# held: wait up to 20 s for init to wait at a hold point: the point, or
# "not held" and the stage it is at.
act_held() {
	local stage

	poll 20 held_somewhere || true
	stage=$(cat "$STAGE" 2>&1)
	echo "module: $(grep '^raceblk ' /proc/modules)"
	case $stage in
	"held at "*) obs held "${stage#held at }" ;;
	*) obs held "not held: $stage" ;;
	esac
}

held_somewhere() {
	case $(cat "$STAGE" 2>/dev/null) in "held at "*) ;; *) false ;; esac
}

# shell: a shell on the console while init waits at its hold point
# (harness/run --shell puts it after the case's held or own_held step);
# the case goes on when it exits.
act_shell() {
	local at

	at="init $(cat "$STAGE" 2>&1)"
	# --module: the user's module failed with its disk held.
	[ -f "$STAGE" ] || at="${OWN_NAME:-the module} failed with /dev/${OWN_DISK:-its disk} held"
	echo "raceblk: $VARIANT/$SCENARIO/$IMAGE: $at; exit this shell to go on" > /dev/ttyS0
	setsid -c sh -i < /dev/ttyS0 > /dev/ttyS0 2>&1
	obs shell "exited $?"
}

# release: let init go on from hold.
act_release() {
	echo 1 > /sys/module/raceblk/parameters/release && echo "release written"
}

# holder_settled PID: blkhold's answer came, or blkhold (PID) exited or an
# oops killed it.
holder_settled() {
	[ -e /tmp/hold.answered ] || process_settled "$1" blkhold
}

# holder_watch PID: wait until holder_settled, for up to 20 s; then, unless
# the answer came, answer blkhold's fate in its place.  blkhold answers
# each command with one write of a whole line, and so does this, so a
# reader never sees half a line.
holder_watch() {
	local why

	poll 20 holder_settled "$1" || true
	[ ! -e /tmp/hold.answered ] || return 0
	why=$(fate "$1" blkhold)
	[ -e /tmp/hold.answered ] || echo "$why" > /tmp/hold.ans
}

# holder_start: a blkhold of its own (HELD_PID), commanded on fd 5 and
# answering on fd 6; one started before is told to end (holder_stop).
holder_start() {
	[ -z "${HELD_PID:-}" ] || holder_stop || true
	rm -f /tmp/hold.cmd /tmp/hold.ans
	mkfifo /tmp/hold.cmd /tmp/hold.ans
	blkhold < /tmp/hold.cmd > /tmp/hold.ans &
	HELD_PID=$!
	exec 5> /tmp/hold.cmd 6< /tmp/hold.ans
}

# holder_stop: the blkhold of holder_start ends (end of its input) and
# closes what it held.
holder_stop() {
	exec 5>&- 6<&-
	settle "$HELD_PID" blkhold
	HELD_PID=
}

# holder_send COMMAND: send COMMAND to blkhold, whose answer holder_answer
# reads.
holder_send() {
	echo "$*" >&5 2>/dev/null
}

# holder_answer: blkhold's answer, or its fate (see fate) when it has none
# in 20 s: "died" when it is gone or an oops killed it (it may then hang in
# its exit, keeping the answer pipe open, so the kernel log tells), "hung
# in FUNCTION" when it waits there for good.  One blocking read per
# answer, never a timed one: busybox's read -t can give up after consuming
# part of a line, and that part is lost.
holder_answer() {
	local answer watcher

	rm -f /tmp/hold.answered
	holder_watch "$HELD_PID" &
	watcher=$!
	read -r answer <&6 || answer=died
	: > /tmp/hold.answered
	wait "$watcher" 2>/dev/null
	echo "$answer"
}

# holder_ask COMMAND: send COMMAND to blkhold and print its answer (see
# holder_answer).
holder_ask() {
	holder_send "$@" || { echo died; return; }
	holder_answer
}

# holder_obs KEY COMMAND ANSWER: report blkhold's ANSWER to COMMAND
# ("open OK", "close EIO": OK, EIO) or its fate ("died", "hung in
# FUNCTION") as KEY.
holder_obs() {
	echo "blkhold $2: $3"
	case $3 in
	"$2 "*) obs "$1" "${3#"$2" }" ;;
	*) obs "$1" "$3" ;;
	esac
}

# holder_open:DEV: blkhold opens /dev/DEV (see device_of: disk, part or
# a name) and keeps it open: OK, an errno, or its fate.
act_holder_open() {
	local dev

	dev=$(device_of "$1")
	holder_start
	# Partition number for the checksum table: 0 is the whole disk.
	HELD_NR=0
	case $dev in "$DISK$PART"[0-9]*) HELD_NR=${dev#"$DISK$PART"} ;; esac
	HELD_BYTES=$(blockdev --getsize64 "/dev/$dev" 2>/dev/null || echo 0)
	echo "/dev/$dev"
	holder_obs holder_open open "$(holder_ask open "/dev/$dev")"
}

# holder_read: blkhold reads all of the held device: OK, an errno, or
# its fate; when it read, the blksum of the bytes (sum) and which
# partition they are (nr, 0: the whole disk), which the host compares with
# the image's.
act_holder_read() {
	local answer sum

	answer=$(holder_ask read 0 "$HELD_BYTES" /tmp/held.data)
	holder_obs holder_read read "$answer"
	[ "$answer" = "read OK" ] || return 0
	obs nr "$HELD_NR"
	sum=$(blksum /tmp/held.data)
	obs sum "${sum%% *}"
}

# holder_close: blkhold closes the held device: OK, an errno, or its
# fate.
act_holder_close() {
	holder_obs holder_close close "$(holder_ask close)"
}

# refcnt: raceblk's reference count.
act_refcnt() {
	sysfs_obs refcnt /sys/module/raceblk/refcnt
}

# mod_refcnt:MODULE: MODULE's reference count.
act_mod_refcnt() {
	sysfs_obs mod_refcnt "/sys/module/$1/refcnt"
}

# open:DEV: a process of its own opens /dev/DEV (see device_of) and
# exits: OK, an errno, or its fate (see fate) when it gave no answer in
# 20 s or an oops killed it.
act_open() {
	local dev pid got

	dev=$(device_of "$1")
	echo "open /dev/$dev" | blkhold > /tmp/open.ans 2>&1 &
	pid=$!
	poll 20 process_settled "$pid" blkhold || true
	got=$(cat /tmp/open.ans)
	if killed_by_oops blkhold "$pid" || [ -z "$got" ]; then
		got=$(fate "$pid" blkhold)
	fi
	holder_obs open open "$got"
}
