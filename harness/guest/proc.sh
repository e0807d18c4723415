# Processes: waiting for a condition, and what became of a task that was
# started in the background (its answer, or its fate when an oops killed
# it or it hangs).

# poll SECONDS COMMAND...: run COMMAND every 20 ms until it succeeds, for
# up to SECONDS; fails if it never does.
poll() {
	local deadline=$(($(date +%s) + $1))

	shift
	until "$@"; do
		[ "$(date +%s)" -lt "$deadline" ] || return 1
		sleep 0.02
	done
}

# oopsed_tasks: the "CPU: 0 PID: N Comm: COMM" line of each oops, the
# first such line within three after its header (the x86 die() header,
# "Oops: 0000 [#1]": crash-titles' last line, the host's pattern too): a
# line another CPU logged meanwhile may come between (6.12's failed
# dependant load, "Unknown symbol", did).  A WARNING or a KASAN report
# prints the same line but lets the task go on.
oopsed_tasks() {
	dmesg | awk 'FNR == NR { header = $0; next }
		     $0 ~ header { n = 4; next }
		     n > 0 && /Comm: / { print; n = 0; next }
		     { if (n > 0) n-- }' "${GUEST_LIB:-/lib/raceblk}/crash-titles" -
}

# killed_by_oops COMM [PID]: the kernel oopsed in a task named COMM (with
# that PID).  A task an oops killed may hang in its exit forever, so its
# exit cannot be waited for.
killed_by_oops() {
	oopsed_tasks | grep -q "${2:+PID: $2 }Comm: $1 "
}

# task_state PID: PID's state letter from /proc/PID/stat (R, S, D, Z...),
# nothing when there is no such task.
task_state() {
	local state=""

	{ read -r _ _ state _ < "/proc/$1/stat"; } 2>/dev/null
	echo "$state"
}

# fate PID COMM: what became of PID, a task named COMM that did not answer
# in time: "died" when an oops killed it (it may then hang in its exit)
# or PID is gone; "hung in FUNCTION" when it sleeps and
# cannot be woken (state D; FUNCTION is its wchan: on 6.12 a holder's
# close waits there for the disk's open_mutex, which the loader held when
# it oopsed); else "silent (STATE)", which no row expects.
fate() {
	local state

	if killed_by_oops "$2" "$1"; then
		echo died
		return
	fi
	state=$(task_state "$1")
	case $state in
	"" | Z | X) echo died ;;
	D) echo "hung in $(cat "/proc/$1/wchan" 2>/dev/null)" ;;
	*) echo "silent ($state)" ;;
	esac
}

# process_settled PID COMM: PID has exited, or an oops killed it.
process_settled() {
	! kill -0 "$1" 2>/dev/null || killed_by_oops "$2" "$1"
}

# settle PID COMM: wait up to SETTLE_SECONDS (20) for PID, a background
# task named COMM, to exit, and reap it: returns its exit status.  When
# it has not exited, or an oops killed it, SETTLED is its fate (see fate)
# and settle returns 255.  Never a plain "wait": a task an oops killed may
# hang in its exit for good, and the step would then wait for the guest's
# timeout.  Not for $(...): a subshell cannot reap its parent's child.
settle() {
	SETTLED=
	poll "${SETTLE_SECONDS:-20}" process_settled "$1" "$2" || true
	if kill -0 "$1" 2>/dev/null || killed_by_oops "$2" "$1"; then
		SETTLED=$(fate "$1" "$2")
		return 255
	fi
	wait "$1"
}

# modctl_answer PID FILE: settle the background modctl PID; ANSWER is what
# it wrote to FILE, or its fate when it wrote nothing.
modctl_answer() {
	settle "$1" modctl || true
	ANSWER=$(cat "$2")
	[ -n "$ANSWER" ] || ANSWER=$SETTLED
}

# or_died COMM ANSWER: ANSWER, or "died" when there is none and an oops
# killed a task named COMM.
or_died() {
	if [ -z "$2" ] && killed_by_oops "$1"; then
		echo died
	else
		echo "$2"
	fi
}

# tally FILE: its lines counted, on one line ("3 EIO 1 OK").
tally() {
	sort "$1" | uniq -c | tr -s ' \n' ' '
}

# module_gone NAME: NAME is not in /proc/modules.
module_gone() {
	! grep -q "^$1 " /proc/modules
}
