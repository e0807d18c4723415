# Modules built for another kernel: vermagic and symbol versions.
# /lib/modules/foreign/NAME.ko (the Makefile's "modules built for another
# kernel"): raceblk-vermagic (the other preemption model), raceblk-release
# (another release), raceblk-fixed (built for fixed), raceblk-proto (a tree
# where blk_mq_end_request() changed).

FOREIGN=/lib/modules/foreign

# vermagic_of FILE: the vermagic string a module carries.
vermagic_of() {
	tr '\0' '\n' < "$1" | sed -n 's/^vermagic=//p'
}

# vermagic:NAME: the kernel's vermagic (that of raceblk.ko built for it,
# which it accepts: kernel) and NAME.ko's (module).
# expects: differs=yes
act_vermagic() {
	obs kernel "$(vermagic_of "$KO")"
	obs module "$(vermagic_of "$FOREIGN/$1.ko")"
}

# load_foreign:NAME: finit_module(NAME.ko) with the case's parameters.
act_load_foreign() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl_obs load_foreign load "$FOREIGN/$1.ko" $PARAMS
}

# force_load:NAME: the same, forced as modprobe -f forces it (vermagic
# and symbol versions ignored).
act_force_load() {
	# shellcheck disable=SC2086 # PARAMS is a word list
	modctl_obs force_load force-load "$FOREIGN/$1.ko" $PARAMS
}

# log_obs KEY PATTERN: whether a kernel line matches the extended regex
# PATTERN (yes or no, as KEY; the line printed).
log_obs() {
	local line

	line=$(dmesg | grep -E -e "$2" | head -n 1)
	echo "kernel: ${line:-no line matching /$2/}"
	obs "$1" "$([ -n "$line" ] && echo yes || echo no)"
}

# version_magic: whether the loader refused raceblk's vermagic, saying
# what it should be (yes or no).
# expects: version_magic=yes
act_version_magic() {
	log_obs version_magic "raceblk: version magic '[^']*' should be '[^']*'"
}

# disagrees:SYMBOL: whether the loader refused raceblk's CRC for SYMBOL.
# expects: disagrees=yes
act_disagrees() {
	log_obs disagrees "raceblk: disagrees about version of symbol $1\$"
}

# unknown_symbol:NAME: whether the loader refused raceblk for a symbol
# NAME the kernel does not export (yes or no).
# expects: unknown_symbol=yes
act_unknown_symbol() {
	log_obs unknown_symbol "raceblk: Unknown symbol $1 "
}

# kernel_tainted:FLAG: whether the kernel's taint mask has FLAG (F: a
# forced load, bit 1; R: a forced unload, bit 3; O: an out-of-tree module,
# bit 12): yes or no.
# expects: kernel_tainted=yes
act_kernel_tainted() {
	local mask bit

	mask=$(cat /proc/sys/kernel/tainted)
	case $1 in
	F) bit=2 ;;
	R) bit=8 ;;
	O) bit=4096 ;;
	*) echo "unknown taint $1"; return 1 ;;
	esac
	echo "/proc/sys/kernel/tainted: $mask (bit $1: $bit)"
	obs kernel_tainted "$([ $((mask & bit)) -ne 0 ] && echo yes || echo no)"
}

# tainted:FLAG: whether raceblk carries taint FLAG in /proc/modules, and
# the kernel too (kernel_tainted): yes or no each.
# expects: tainted=yes kernel_tainted=yes
act_tainted() {
	local line

	line=$(grep '^raceblk ' /proc/modules)
	echo "/proc/modules: ${line:-no raceblk}"
	obs tainted "$(echo "$line" | grep -q "([A-Z]*$1[A-Z]*" && echo yes || echo no)"
	act_kernel_tainted "$1"
}
