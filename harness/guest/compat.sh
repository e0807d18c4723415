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

# vermagic=NAME: print the kernel's vermagic and NAME's side by side (the
# kernel's is that of raceblk.ko built for it, which it accepts); they
# must differ.
step_vermagic() {
	local kernel module

	kernel=$(vermagic_of "$KO")
	module=$(vermagic_of "$FOREIGN/$1.ko")
	echo "vermagic: kernel '$kernel' | $1.ko '$module'"
	[ -n "$module" ] && [ "$kernel" != "$module" ]
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

# loader_line PATTERN: the first kernel line matching the extended regex
# (the loader's, or any other the kernel logged).
loader_line() {
	local line

	line=$(dmesg | grep -E -e "$1" | head -n 1)
	echo "kernel: ${line:-no line matching /$1/}"
	[ -n "$line" ]
}

# version_magic: the loader refused raceblk's vermagic, saying what it
# should be.
step_version_magic() {
	loader_line "raceblk: version magic '[^']*' should be '[^']*'"
}

# disagrees=SYMBOL: the loader refused raceblk's CRC for SYMBOL.
step_disagrees() {
	loader_line "raceblk: disagrees about version of symbol $1\$"
}

# klog=WORDS: a kernel line contains WORDS (+ for a space).
step_klog() {
	loader_line "$(echo "$1" | tr + ' ')"
}

# kernel_tainted=FLAG: the kernel's taint mask has FLAG (F: a forced load,
# bit 1; O: an out-of-tree module, bit 12).
step_kernel_tainted() {
	local mask bit

	mask=$(cat /proc/sys/kernel/tainted)
	case $1 in
	F) bit=2 ;;
	R) bit=8 ;;
	O) bit=4096 ;;
	*) echo "unknown taint $1"; return 1 ;;
	esac
	echo "/proc/sys/kernel/tainted: $mask (bit $1: $bit)"
	[ $((mask & bit)) -ne 0 ]
}

# tainted=FLAG: raceblk carries taint FLAG in /proc/modules, and so does
# the kernel.
step_tainted() {
	local line

	line=$(grep '^raceblk ' /proc/modules)
	echo "/proc/modules: ${line:-no raceblk}"
	echo "$line" | grep -q "([A-Z]*$1[A-Z]*)" && step_kernel_tainted "$1"
}
