# KTAP output for the guest: every line goes to fd 3 (the host's KTAP
# channel) and to the console, so the console log reads in order.

ktap_line() {
	echo "$*" >&3
	echo "$*"
}

ktap_plan() {
	KTAP_N=0
	ktap_line "KTAP version 1"
	ktap_line "1..$1"
}

ktap_skip_all() {
	ktap_line "KTAP version 1"
	ktap_line "1..0 # SKIP $1"
}

# uptime_cs: UPTIME_CS, the uptime in centiseconds (in this shell: a
# process costs tens of ms under TCG).
uptime_cs() {
	local up _

	read -r up _ < /proc/uptime
	# "1${up#*.} - 100": a fraction like 08 is no octal number.
	UPTIME_CS=$((${up%.*} * 100 + 1${up#*.} - 100))
}

# obs KEY VALUE...: report what an action saw, "obs KEY=VALUE": the host
# compares it with what the case expects.  A guest action judges nothing:
# it fails (not ok) only when it could not act.
obs() {
	local key=$1

	shift
	echo "obs $key=$*"
}

# ktap_run_step STEP: run act_NAME [ARGS] for STEP = NAME[:ARGS], an
# action that reports what it saw with obs; its output becomes diagnostic
# lines, then "# time: S.CCs", its status the result (not ok: it could
# not act).  Actions run in this shell, not a subshell, so that what they
# start (a background load, the holder's file descriptors) outlives them.
ktap_run_step() {
	local step=$1 name func arg status=0 line start cs

	name=${step%%:*}
	func=act_$name
	arg=
	[ "$name" = "$step" ] || arg=${step#"$name":}
	KTAP_N=$((KTAP_N + 1))
	if ! type "$func" >/dev/null 2>&1; then
		ktap_line "not ok $KTAP_N $step # unknown action"
		return
	fi
	uptime_cs
	start=$UPTIME_CS
	"$func" "$arg" > /tmp/step.out 2>&1 || status=$?
	uptime_cs
	start=$((UPTIME_CS - start))
	# "|| [ -n ... ]": a last line without its newline counts too.
	while IFS= read -r line || [ -n "$line" ]; do
		ktap_line "# $line"
	done < /tmp/step.out
	cs=$((start % 100))
	[ "$cs" -ge 10 ] || cs=0$cs
	ktap_line "# time: $((start / 100)).${cs}s"
	if [ "$status" -eq 0 ]; then
		ktap_line "ok $KTAP_N $step"
	else
		ktap_line "not ok $KTAP_N $step"
	fi
}
