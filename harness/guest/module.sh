# Module actions: load, unload, the module's state and log, other modules
# loaded around raceblk's init.

KO=/lib/modules/raceblk.ko

# modctl_obs KEY ARGS...: run modctl ARGS and report its answer as KEY:
# OK, an errno name, or "died" when an oops killed it; MODCTL_ANSWER is
# that answer too.
modctl_obs() {
	local key=$1

	shift
	MODCTL_ANSWER=$(or_died modctl "$(modctl "$@")")
	echo "modctl $*"
	obs "$key" "$MODCTL_ANSWER"
}

# load: finit_module() once with the case's parameters: OK, an errno, or
# died (6.12: the partition scan's deferred close, after a failed init
# freed the module, oopses in the loader).
act_load() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl_obs load load "$KO" $PARAMS
}

# unload: delete_module(raceblk, O_NONBLOCK).
act_unload() {
	modctl_obs unload unload raceblk
}

# force_unload: delete_module(raceblk, O_NONBLOCK | O_TRUNC), which is
# rmmod -f.
act_force_unload() {
	modctl_obs force_unload unload raceblk force
}

# wait_unload: delete_module(raceblk) without O_NONBLOCK, which is rmmod
# --wait (6.1 never waits).
act_wait_unload() {
	modctl_obs wait_unload unload raceblk wait
}

# unload_twice: two delete_module(raceblk) at once: their answers, sorted
# ("EBUSY,OK": one freed it, the other found it being freed).
act_unload_twice() {
	local pid1

	modctl unload raceblk > /tmp/unload.1 &
	pid1=$!
	modctl unload raceblk > /tmp/unload.2
	modctl_answer "$pid1" /tmp/unload.1
	obs unload_twice "$(printf '%s\n%s\n' "$ANSWER" "$(cat /tmp/unload.2)" | sort | paste -s -d ,)"
}

# notifier: load modnotify, which logs every module notifier event (an
# action the case needs: it fails when modnotify does not load).
act_notifier() {
	local got

	got=$(modctl load /lib/modules/modnotify.ko)
	echo "modnotify: $got"
	[ "$got" = OK ]
}

# notify: the notifier events raceblk got, in order (COMING,LIVE,...).
act_notify() {
	local got

	got=$(dmesg | sed -n 's/.*modnotify: raceblk \([A-Z]*\)$/\1/p' | tr '\n' , | sed 's/,$//')
	obs notify "${got:-none}"
}

# module: raceblk's state in /proc/modules (Live, Loading, Unloading), or
# absent.
act_module() {
	local line

	line=$(grep '^raceblk ' /proc/modules)
	echo "${line:-raceblk not in /proc/modules}"
	obs module "$(echo "$line" | awk '{ print $5 }' | grep . || echo absent)"
}

# unload_mod:MODULE: delete_module(MODULE, O_NONBLOCK).
act_unload_mod() {
	modctl_obs unload_mod unload "$1"
}

# force_unload_mod:MODULE: delete_module(MODULE, O_NONBLOCK|O_TRUNC)
# (rmmod --force).
act_force_unload_mod() {
	modctl_obs force_unload_mod unload "$1" force
}

# refused:MODULE: whether try_module_get() refused MODULE during its init,
# with the warning that names it and the caller (yes or no).
# expects: refused=yes
act_refused() {
	log_obs refused "$1: try_module_get\(\) from"
}

# module_facts MODULE ATTR TEXT...: MODULE's state and flags in
# /proc/modules (state; flags: the state marks, taint letters left out),
# its initstate, /sys/module/MODULE/ATTR (as ATTR; none when ATTR is ""),
# and whether the log has a line of MODULE's with each TEXT (logged: yes
# or no).
module_facts() {
	local module=$1 attr=$2 line found logged=yes

	shift 2
	for line in "$@"; do
		found=$(dmesg | grep -F "] $module: " | grep -F "$line" | head -n 1)
		echo "log: ${found:-no line \"$module: ...$line...\"}"
		[ -n "$found" ] || logged=no
	done
	line=$(grep "^$module " /proc/modules)
	echo "/proc/modules: ${line:-no $module}"
	obs state "$(echo "$line" | awk '{ print $5 }' | grep . || echo absent)"
	obs flags "$(echo "$line" | sed -n 's/.*(\([^)]*\))$/\1/p' | tr -d '[:upper:]')"
	obs initstate "$(cat "/sys/module/$module/initstate" 2>&1)"
	[ -z "$attr" ] || obs "$attr" "$(cat "/sys/module/$module/$attr" 2>&1)"
	obs logged "$logged"
}

# stuck[:MODULE]: module_facts of MODULE (default raceblk), whose init
# failed after it was made live (rusty): the host expects it kept for
# good, logged as unsafe and stuck, Live with the "!" flag.
# expects: state=Live flags=! initstate=live unsafe=1 logged=yes
act_stuck() {
	module_facts "${1:-raceblk}" unsafe "cannot be unloaded due to unsafe usage" "module is now stuck"
}

# mod_kept:MODULE: module_facts of MODULE, whose init failed while
# something held it (fixed): the host expects it kept until the last holder
# lets go, logged, Unloading (rcuput, the module change as first written,
# marks it too).
# expects: state=Unloading flags=- initstate=going logged=yes
# expects on rcuput: flags=!-
act_mod_kept() {
	module_facts "$1" "" "init failed with" "reference(s) held it: kept until the last one is dropped"
}

# kept: mod_kept:raceblk.
# expects: as mod_kept
act_kept() {
	act_mod_kept raceblk
}

# mod_reaped:MODULE: whether MODULE, kept after its failed init, left
# /proc/modules by itself (no rmmod) within 10 s of this action (left: yes
# or no), and whether the log says its last holder let go (said).
# expects: left=yes said=yes
act_mod_reaped() {
	local waited=0 line

	while grep -q "^$1 " /proc/modules && [ "$waited" -lt 10000 ]; do
		sleep 0.05
		waited=$((waited + 50))
	done
	grep "^$1 " /proc/modules
	obs left "$(grep -q "^$1 " /proc/modules && echo no || echo yes)"
	echo "waited ${waited} ms"
	line=$(dmesg | grep -F "$1: its last holder let go: freeing it" | tail -n 1)
	echo "log: ${line:-no line \"$1: its last holder let go: freeing it\"}"
	obs said "$([ -n "$line" ] && echo yes || echo no)"
}

# reaped: mod_reaped:raceblk.
# expects: as mod_reaped
act_reaped() {
	act_mod_reaped raceblk
}

# released: what became of raceblk after its init failed: at_failure (it
# was freed then: nobody held it), after_holders (it was kept, and went by
# itself within 10 s once they let go; and act_mod_reaped's left and
# said), still_kept, or loaded (never said kept, still there).
# expects: released=at_failure|after_holders
act_released() {
	if dmesg | grep -F "raceblk: init failed with" |
		grep -qF "reference(s) held it: kept until the last one is dropped"; then
		act_mod_reaped raceblk
		obs released "$(module_gone raceblk && echo after_holders || echo still_kept)"
	else
		obs released "$(module_gone raceblk && echo at_failure || echo loaded)"
	fi
}

# waited[:MODULE]: what became of MODULE (default raceblk), whose init
# failed while something held it, where the loader waits for the holders
# (wait): whether the loader said it waits for them (waited: yes or no),
# and how it ended (outcome): freed (they let go in time: MODULE is
# gone), kept_until_reboot (the loader gave up, said so, and MODULE is
# still listed, Unloading), or else MODULE's state in /proc/modules.
# expects: waited=yes outcome=kept_until_reboot
act_waited() {
	local module=${1:-raceblk} state

	log_obs waited "\] $module: init failed with .* reference\(s\) held it: waiting for them"
	state=$(grep "^$module " /proc/modules | awk '{ print $5 }')
	echo "/proc/modules: ${state:-no $module}"
	if [ -z "$state" ]; then
		obs outcome freed
	elif [ "$state" = Unloading ] && dmesg | grep -qF "] $module: still held by"; then
		obs outcome kept_until_reboot
	else
		obs outcome "$state"
	fi
}

# free_disk_called: whether raceblk's ->free_disk (free_disk=1) freed the
# driver's data, as the disk's last put calls it (yes or no).
# expects: free_disk_called=yes
act_free_disk_called() {
	log_obs free_disk_called "$DISK: ->free_disk: freeing the driver's data"
}

# reload: raceblk loads again with nothing but the case's image (no
# failure point, no hold); once loaded, it is unloaded again (the action
# fails when that unload does).
act_reload() {
	modctl_obs reload load "$KO" "image=raceblk/$IMAGE.img"
	[ "$MODCTL_ANSWER" != OK ] || [ "$(modctl unload raceblk)" = OK ] || { echo "cannot unload it again"; return 1; }
}

# initref_fail:REF: initref.ko with ref=REF and fail=1 takes a reference
# on itself through REF (see driver/initref.c), then fails its init.
act_initref_fail() {
	modctl_obs initref_fail load /lib/modules/initref.ko "ref=$1" fail=1
}

# oops_in COMM: an oops killed a task whose name starts with COMM.
oops_in() {
	oopsed_tasks | grep "Comm: $1" | head -n 1
}

# oops_seen: oops_in OOPS_COMM found one.
oops_seen() {
	[ -n "$(oops_in "$OOPS_COMM")" ]
}

# oopsed:COMM:SECONDS: whether, within SECONDS, an oops kills a task whose
# name starts with COMM (a kworker running a freed module's work
# function): yes or no.
# expects: oopsed=yes
act_oopsed() {
	local line

	OOPS_COMM=${1%%:*}
	poll "${1#*:}" oops_seen || true
	line=$(oops_in "$OOPS_COMM")
	echo "oops: ${line:-none in a task named $OOPS_COMM*}"
	obs oopsed "$([ -n "$line" ] && echo yes || echo no)"
}

# initref:REF: initref.ko, whose init takes a reference on itself through
# REF (self, firmware_nowait, misc_open), loads; once loaded, it is
# unloaded again (the action fails when that unload does).
act_initref() {
	modctl_obs initref load /lib/modules/initref.ko "ref=$1"
	dmesg | grep -F "initref: ref=$1 during init" | tail -n 1
	[ "$MODCTL_ANSWER" != OK ] || [ "$(modctl unload initref)" = OK ] || { echo "cannot unload it again"; return 1; }
}

# getput_obs UNIT SED: UNIT_per_pair and UNIT_max, the least and the most
# of the figures SED takes out of /tmp/getput.log's lines.
getput_obs() {
	obs "$1_per_pair" "$(sed "$2" /tmp/getput.log | sort -n | head -n 1)"
	obs "$1_max" "$(sed "$2" /tmp/getput.log | sort -n | tail -n 1)"
}

# getput:PAIRS:THREADS: what a try_module_get()/module_put() pair costs on
# a live module (driver/getput.c): getput.ko with threads=THREADS loads
# (getput: OK or an errno), runs PAIRS pairs in each thread five times and
# unloads.  ns_per_pair and cycles_per_pair are the least of the five, net
# of an empty loop (under -icount shift=0 a cycle is an instruction);
# ns_max and cycles_max the most.
# expects: getput=OK
act_getput() {
	local pairs=${1%%:*} threads=${1#*:} round

	modctl_obs getput load /lib/modules/getput.ko "threads=$threads"
	[ "$MODCTL_ANSWER" = OK ] || return 0
	for round in 1 2 3 4 5; do
		echo "$pairs" > /sys/module/getput/parameters/run || { echo "round $round: the run failed"; return 1; }
	done
	dmesg | grep -F "getput: $threads thread(s) x $pairs pairs:" | tail -n 5 > /tmp/getput.log
	cat /tmp/getput.log
	getput_obs ns 's/.*: \([0-9.]*\) ns, .*/\1/'
	getput_obs cycles 's/.* \([0-9.]*\) cycles per pair$/\1/'
	[ "$(modctl unload getput)" = OK ] || { echo "cannot unload it again"; return 1; }
}

# --- other loads while raceblk's init runs -----------------------------------

# bg_command TAG: what background load TAG runs (modctl's arguments).
bg_command() {
	case $1 in
	dep) echo "load /lib/modules/raceblk_user.ko" ;;
	reload) echo "load $KO image=raceblk/$IMAGE.img" ;;
	*) return 1 ;;
	esac
}

# bg:TAG: start background load TAG: dep, a module using a symbol of
# raceblk; reload, raceblk again, without failure points.
act_bg() {
	local args

	args=$(bg_command "$1") || { echo "no background load named '$1'"; return 1; }
	# shellcheck disable=SC2086 # modctl's arguments
	modctl $args > "/tmp/bg.$1.out" 2>&1 &
	echo $! > "/tmp/bg.$1.pid"
	echo "modctl $args: started in the background"
}

# bg_waiting:TAG: whether background load TAG is still blocked a second
# later: yes, or what it answered.
act_bg_waiting() {
	sleep 1
	if kill -0 "$(cat "/tmp/bg.$1.pid")" 2>/dev/null; then
		obs bg_waiting yes
	else
		obs bg_waiting "no: $(cat "/tmp/bg.$1.out")"
	fi
}

# bg_done:TAG: how background load TAG finished: OK, an errno, or its
# fate (see fate).
act_bg_done() {
	modctl_answer "$(cat "/tmp/bg.$1.pid")" "/tmp/bg.$1.out"
	obs bg_done "$ANSWER"
}

# pr_err: the first thing raceblk logged at KERN_ERR, up to its first "=",
# ":" or blank (the parameter it names: "fail_at" of "raceblk:
# fail_at=bogus: ..."), or none.
act_pr_err() {
	local line

	line=$(dmesg -r | grep '^<3>' | grep -F "raceblk: " | head -n 1)
	echo "pr_err: ${line:-none}"
	line=${line#*raceblk: }
	obs pr_err "$(echo "${line:-none}" | sed 's/[=: ].*//')"
}

# --- debug kernels ------------------------------------------------------------

# kmemleak: what a kmemleak scan now reports: none, or how many objects
# (the first of them printed).  Not a debug kernel: it cannot act.
# expects: kmemleak=none
act_kmemleak() {
	local report

	if [ ! -e /sys/kernel/debug/kmemleak ]; then
		echo "no /sys/kernel/debug/kmemleak: not a debug kernel"
		return 1
	fi
	echo scan > /sys/kernel/debug/kmemleak
	report=$(cat /sys/kernel/debug/kmemleak)
	echo "$report" | head -n 30
	obs kmemleak "$([ -z "$report" ] && echo none || echo "$(echo "$report" | grep -c '^unreferenced object') objects")"
}
