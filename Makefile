# raceblk: a block driver whose module init fails on purpose, kernels with and
# without the module init race fix, and a QEMU harness that checks each case.
#
#   make test        build what is missing, run every scenario, print verdicts
#   make check       lint and self-test the harness (no kernel, no VM)
#   make race-demo   the side-by-side table of what each kernel does
#   make bench       build and boot timings
#   make soak        a long sanitizer soak on fixed-debug (not in make test)
#   make survey      in-tree module inits that can fail after publishing a device
#
# Everything generated lives under build/KERNEL/ (ignored by git); KERNEL=TREE
# picks another of the trees of kernel-patches/ (each a directory there)
# than kernel-patches/default-tree; make test|race-demo KERNEL=debian-TREE
# runs Debian's own kernel of TREE (harness/distro.py).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DELETE_ON_ERROR:
.SECONDEXPANSION:
# Keep every intermediate (an extracted tree, a .config) once built.
.SECONDARY:

TOP := $(CURDIR)
# The kernel tree: Debian's linux-source-$(KERNEL).  Its series and their
# patches live in kernel-patches/$(KERNEL)/, everything built from it in
# build/$(KERNEL)/, so the trees sit side by side.
DEFAULT_TREE := $(shell sed '/^\#/d' kernel-patches/default-tree)
KERNEL ?= $(DEFAULT_TREE)
# make soak's kernel (a variant with a fragment whose "# harness:" line
# says soak: -debug, -kcsan).
SOAK_VARIANT ?= fixed-debug
# What make knows of the project (the trees, the variants and what each is,
# the images), as harness/plan.py reads it from kernel-patches/ and images/:
# asked once, KIND:VALUE words (plan.py's make_facts).
# (No __pycache__ written while make parses.)
PARSE_PLAN := PYTHONDONTWRITEBYTECODE=1 harness/plan.py
FACTS := $(shell $(PARSE_PLAN) make-facts $(SOAK_VARIANT) $(VARIANTS))
ifneq ($(.SHELLSTATUS),0)
ifneq ($(shell command -v python3),)
$(error harness/plan.py make-facts failed (above))
endif
# No python3 yet (a fresh machine): make deps installs it, and the entry
# points (test, race-demo, check, ...) run the rest in a make of its own.
NO_PYTHON := 1
endif
facts = $(patsubst $(1):%,%,$(filter $(1):%,$(FACTS)))
TREES := $(call facts,tree)
# Set by KERNEL=debian-TREE alone (below), never by the environment.
DEBIAN_TREE :=
ifneq ($(filter debian-%,$(KERNEL)),)
ifneq ($(KERNEL_SRC)$(BZIMAGE_OBJ),)
$(error KERNEL=$(KERNEL) is Debian's kernel: not with KERNEL_SRC or BZIMAGE_OBJ)
endif
endif
ifneq ($(KERNEL_SRC),)
ifneq ($(BZIMAGE_OBJ),)
$(error KERNEL_SRC and BZIMAGE_OBJ: a tree to build, or a kernel built already, not both)
endif
endif
# KERNEL_SRC=DIR: the user's own kernel git tree instead (6.1 or later).
# vanilla is its HEAD; every other variant is HEAD with the series of the
# nearest known tree at or below its version, applied with git am -3 in a
# worktree under build/src-NAME/ (kernel-patches/apply-series), whose
# expectations the cases use too.  No apt step installs a kernel source.
ifneq ($(KERNEL_SRC),)
override KERNEL_SRC := $(abspath $(KERNEL_SRC))
SRC_VERSION := $(shell sed -n 's/^VERSION = //p; s/^PATCHLEVEL = //p' $(KERNEL_SRC)/Makefile 2> /dev/null | paste -sd.)
ifeq ($(SRC_VERSION),)
$(error KERNEL_SRC=$(KERNEL_SRC): no kernel Makefile there)
endif
ifneq ($(shell git -C $(KERNEL_SRC) rev-parse --verify -q HEAD > /dev/null && echo yes),yes)
$(error KERNEL_SRC=$(KERNEL_SRC): not a git tree with a commit (git init; git add -A; git commit))
endif
override KERNEL := $(shell $(PARSE_PLAN) nearest-tree $(SRC_VERSION))
ifeq ($(KERNEL),)
$(error KERNEL_SRC=$(KERNEL_SRC) is $(SRC_VERSION): older than every known tree ($(TREES)))
endif
BUILD := $(TOP)/build/src-$(notdir $(KERNEL_SRC))
# The commit the builds are made of, in a file only rewritten when HEAD
# moves (its rule, below): the kernel cache's key and make's dependency.
SRC_HEAD := $(BUILD)/src-head
export RACEBLK_SOURCE := $(KERNEL_SRC) ($(SRC_VERSION), $(shell git -C $(KERNEL_SRC) rev-parse --short HEAD)) with kernel-patches/$(KERNEL)/
# BZIMAGE_OBJ=DIR (harness/run --bzimage sets it): the object tree of a
# kernel the user configured and built.  No kernel is built here: raceblk
# and the helper modules are built against DIR for the one variant in
# VARIANTS (what that kernel is judged as), whose build/.../kernel/VARIANT/obj
# is DIR, and the cases expect what they expect on the nearest known tree.
else ifneq ($(BZIMAGE_OBJ),)
override BZIMAGE_OBJ := $(abspath $(BZIMAGE_OBJ))
ifneq ($(filter-out initramfs build-dir,$(MAKECMDGOALS)),)
$(error BZIMAGE_OBJ: make initramfs or build-dir only (harness/run --bzimage runs the rest))
endif
BZIMAGE_RELEASE := $(shell cat $(BZIMAGE_OBJ)/include/config/kernel.release 2> /dev/null)
# Its modules are built with the compiler it was built with: clang's
# (harness/run --bzimage checks that it is here).
BZIMAGE_CLANG := $(shell grep -x CONFIG_CC_IS_CLANG=y $(BZIMAGE_OBJ)/.config)
override KERNEL := $(shell $(PARSE_PLAN) nearest-tree '$(BZIMAGE_RELEASE)')
ifeq ($(KERNEL),)
$(error BZIMAGE_OBJ=$(BZIMAGE_OBJ): release '$(BZIMAGE_RELEASE)' is no kernel of 6.1 or later)
endif
# One directory per object tree, whatever its release says this time
# (BZIMAGE_BUILD=DIR: another, as a distribution's kernel has).
BUILD := $(or $(BZIMAGE_BUILD),$(TOP)/build/bzimage-$(shell echo '$(BZIMAGE_OBJ)' | sha256sum | cut -c1-8))
export RACEBLK_SOURCE := $(BZIMAGE_OBJ) ($(BZIMAGE_RELEASE), judged as $(VARIANTS)) with kernel-patches/$(KERNEL)/
else ifneq ($(filter debian-%,$(KERNEL)),)
# KERNEL=debian-TREE: make test and race-demo run Debian's own kernel of
# TREE (harness/distro.py), fetched into build/debian-TREE/; what make
# builds here is this project's own of TREE, as KERNEL=TREE would.
DEBIAN_TREE := $(patsubst debian-%,%,$(KERNEL))
override KERNEL := $(DEBIAN_TREE)
ifeq ($(wildcard kernel-patches/$(KERNEL)/binary),)
$(error KERNEL=debian-$(DEBIAN_TREE): no kernel-patches/$(DEBIAN_TREE)/binary names Debian's kernel of it)
endif
ifneq ($(filter-out test race-demo build/$(KERNEL)/%,$(or $(MAKECMDGOALS),all)),)
$(error KERNEL=debian-$(DEBIAN_TREE): make test or race-demo only (the rest is this project's own tree: KERNEL=$(DEBIAN_TREE)))
endif
BUILD := $(TOP)/build/$(KERNEL)
else
ifeq ($(NO_PYTHON)$(filter $(KERNEL),$(TREES)),)
$(error KERNEL=$(KERNEL): no kernel-patches/$(KERNEL)/series.vanilla (trees: $(TREES)))
endif
BUILD := $(TOP)/build/$(KERNEL)
endif
TREE := kernel-patches/$(KERNEL)
# Debian's linux-source-$(KERNEL): installed from the host's apt (bookworm
# has 6.1 and 6.12), or, for a tree with a $(TREE)/apt-source, fetched
# from the suite that file names into build/ (kernel-patches/fetch-source).
APT_SOURCE := $(wildcard $(TREE)/apt-source)
# (make KERNEL_TARBALL=FILE takes another; not the environment's, which a
# make for another tree exports.)
# KERNEL=debian-TREE installs nothing: TREE's source, when not
# installed, is fetched from the host's apt as another suite's is.
ifneq ($(origin KERNEL_TARBALL),command line)
KERNEL_TARBALL := $(shell kernel-patches/fetch-source --tarball $(if $(DEBIAN_TREE),--fetched) $(KERNEL))
endif
export KERNEL_TARBALL
# The harness scripts find the tree's builds and results through these.
export KERNEL
export RACEBLK_BUILD := $(BUILD)
# What make test builds: the default variants (kernel-patches/variants)
# and the +NAME ones, for the rows naming them only.  (make race-demo
# builds its columns: harness/race-demo knows them.)
VARIANTS ?= $(call facts,test)
# What a variant is: VARIANT:SERIES:FRAGMENTS:SOAK (plan.py reads its name,
# SERIES-FRAGMENT..., and its fragments' "# harness:" lines).
comma := ,
variant_fact = $(or $(word $(2),$(subst :, ,$(filter $(1):%,$(call facts,variant)))),\
	$(error variant $(1): not one make was told of (VARIANTS=$(1))))
# BZIMAGE_OBJ: the variant's kernel is the user's (its rule, below); the
# one variant it is judged as is harness/run --as's.
ifneq ($(BZIMAGE_OBJ),)
ifneq ($(words $(VARIANTS)),1)
$(error BZIMAGE_OBJ: one variant in VARIANTS, the one the kernel is judged as (harness/run --bzimage --as))
endif
endif
# Good images come from a parted spec, hostile ones from a good one plus a
# byte patch (good ones first).
IMAGES := $(call facts,image)
JOBS ?= $(shell nproc)
# Bring your own disk: make test|race-demo IMAGE=PATH [EXPECTED=FILE].
# make race-demo BACKEND=scsi: the table for raceblk as a SCSI driver.
OWN_IMAGE_ARGS = $(if $(IMAGE),--image $(IMAGE)) $(if $(EXPECTED),--expected $(EXPECTED))
# Bring your own driver: make test MODULE=FILE MODULE_DISK=NAME
# MODULE_FAIL=PARAMS [MODULE_PARAMS=PARAMS] runs harness/module-cases with
# it (harness/ownmod.py; harness/run checks the values).
OWN_MODULE_ARGS = $(if $(MODULE),--module '$(MODULE)' --module-disk '$(MODULE_DISK)' \
	--module-fail '$(MODULE_FAIL)' --module-params '$(MODULE_PARAMS)')

# Reproducible kernel builds, so ccache hits across clones and rebuilds.
export CCACHE_DIR ?= $(HOME)/.cache/raceblk/ccache
export CCACHE_BASEDIR := $(TOP)
export CCACHE_NOHASHDIR := 1
export CCACHE_SLOPPINESS := time_macros,file_stat_matches,file_stat_matches_ctime
export KBUILD_BUILD_TIMESTAMP := Wed Jan 15 19:24:20 UTC 2003
export KBUILD_BUILD_USER := raceblk
export KBUILD_BUILD_HOST := raceblk
# A variant SERIES-FRAGMENT is SERIES's patched tree built with
# kernel-patches/config/FRAGMENT.config on top of base.config: NAME-debug
# (the checkers), NAME-sdmod (sd as a module).  A tree may add to a
# fragment with kernel-patches/$(KERNEL)/config/FRAGMENT.config.
series_of = $(call variant_fact,$(1),2)
fragment_files = $(wildcard $(foreach f,$(1),kernel-patches/config/$(f).config $(TREE)/config/$(f).config))
fragments_of = $(call fragment_files,base $(subst $(comma), ,$(filter-out -,$(call variant_fact,$(1),3))))

# ccache makes source paths relative (CCACHE_BASEDIR): the compiler sees
# ../src/kernel/module/main.c; map that back so that WARN and BUG lines
# name kernel/module/main.c.
KMAKE_FLAGS = CC="ccache gcc" HOSTCC="ccache gcc" KCFLAGS="-fmacro-prefix-map=../src/="
# raceblk and the helper modules: with gcc, as the kernels here are built,
# or with clang for a kernel of the user's built with it.
MODULE_CC = $(if $(BZIMAGE_CLANG),LLVM=1 CC="ccache clang",CC="ccache gcc")
# A kernel not built here may make BTF for its modules (pahole, of
# package dwarves; Debian's do): it serves BPF tools only, and the cases
# load none.
MODULE_FLAGS = $(MODULE_CC) $(if $(BZIMAGE_OBJ),CONFIG_DEBUG_INFO_BTF_MODULES=)
KMAKE = $(MAKE) --no-print-directory -C $(BUILD)/kernel/$*/src \
	O=$(BUILD)/kernel/$*/obj $(KMAKE_FLAGS) -j$(JOBS)

# Debian packages the build and the harness need.
FETCHED_SOURCE := $(filter build/%,$(KERNEL_TARBALL))
HOST_SOURCE_PACKAGE := $(if $(FETCHED_SOURCE)$(KERNEL_SRC)$(BZIMAGE_OBJ),,linux-source-$(KERNEL))
DEB_PACKAGES := $(HOST_SOURCE_PACKAGE) gcc make libc6-dev bc bison flex libelf-dev \
	libssl-dev cpio xz-utils lz4 ccache qemu-system-x86 qemu-utils parted \
	busybox-static python3
# And the commands make check needs, with their packages (a command may
# come from elsewhere: nodesource's nodejs carries npm).
CHECK_COMMANDS := shellcheck:shellcheck python3:python3 pyflakes3:pyflakes3 \
	xmllint:libxml2-utils node:nodejs npm:npm parted:parted gcc:gcc cpp:cpp \
	busybox:busybox-static cpio:cpio

KERNELS := $(foreach v,$(VARIANTS),$(BUILD)/kernel/$(v)/obj/arch/x86/boot/bzImage)
MODULES := $(foreach v,$(VARIANTS),$(BUILD)/driver/$(v)/raceblk.ko)
# What a variant's guests boot: its archive and the images' (make
# initramfs-base), and, for a variant with modules built for another
# kernel (harness/foreign-modules; none for a kernel of the user's), those
# in an archive of their own, which only the cases loading them get: the
# variant's own archive needs no other kernel and no prepared tree, and its
# guests can boot while those build (harness/run --build).
BASE_INITRAMFS := $(foreach v,$(VARIANTS),$(BUILD)/initramfs/$(v).cpio) \
	$(foreach i,$(IMAGES),$(BUILD)/initramfs/images/$(i).cpio.gz)
FOREIGN_VARIANTS := $(if $(BZIMAGE_OBJ),,$(foreach w,$(call facts,foreign),$(firstword $(subst :, ,$(w)))))
INITRAMFS := $(BASE_INITRAMFS) \
	$(foreach v,$(filter $(FOREIGN_VARIANTS),$(VARIANTS)),$(BUILD)/initramfs/foreign/$(v).cpio.gz)
IMAGE_FILES := $(foreach i,$(IMAGES),$(BUILD)/images/$(i).img)
# The guest's C helpers, one static binary (harness/guest/helpers.c says
# why): each helper's main() renamed NAME_main.
GUEST_HELPERS := $(filter-out helpers,$(patsubst harness/guest/%.c,%,$(wildcard harness/guest/*.c)))
GUEST_HELPERS_BIN := $(BUILD)/guest/helpers
.PHONY: all deps deps-check source-version build-dir check docs kernel kernels driver images initramfs initramfs-base test race-demo bench soak \
	images-check series-check series-export series-tree survey clean distclean
all: initramfs

# install_missing PACKAGES: install those not installed (as root), or name them.
# With COMMAND:PACKAGE words, a package is missing when its command is.
define install_missing
	@missing=; \
	for p in $(1); do \
		case $$p in \
		*:*) command -v "$${p%%:*}" > /dev/null || missing+=" $${p#*:}" ;; \
		*) dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed' || missing+=" $$p" ;; \
		esac; \
	done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" -ne 0 ]; then \
		echo "deps: missing Debian packages:$$missing" >&2; \
		echo "deps: run as root: apt-get install --no-install-recommends$$missing" >&2; \
		exit 1; \
	fi; \
	echo "deps: installing$$missing (log: $(APT_LOG))"; \
	mkdir -p $(dir $(APT_LOG)); \
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
		--no-install-recommends $$missing; } > $(APT_LOG) 2>&1 || \
		{ echo "deps: apt-get failed; the end of $(APT_LOG):" >&2; tail -n 30 $(APT_LOG) >&2; exit 1; }
endef
# apt's output goes to a log: a failure prints its tail.
APT_LOG := build/logs/apt.log

deps:
	$(call install_missing,$(DEB_PACKAGES) $(if $(KERNEL_SRC),git))
	@$(if $(FETCHED_SOURCE),$(if $(KERNEL_SRC)$(BZIMAGE_OBJ),,$(MAKE) --no-print-directory $(KERNEL_TARBALL)))

deps-check:
	$(call install_missing,$(CHECK_COMMANDS) $(HOST_SOURCE_PACKAGE))
	@$(if $(FETCHED_SOURCE),$(MAKE) --no-print-directory $(KERNEL_TARBALL))

# The tarball keeps the time the package gave it (the kernel cache's key
# has it), older than any checkout: fetched when missing, not when newer.
ifneq ($(FETCHED_SOURCE),)
$(KERNEL_TARBALL): | $(APT_SOURCE)
	@kernel-patches/fetch-source $(KERNEL)
endif

# Where the tree's builds go (harness/run --bzimage asks).
build-dir:
	@echo $(BUILD)

# The Debian version of the tree's source (CI keys its caches on it).
source-version:
	@kernel-patches/fetch-source --version $(KERNEL)

kernel kernels: $(KERNELS)
driver: $(MODULES)
images: $(IMAGE_FILES)
initramfs: $(INITRAMFS)
initramfs-base: $(BASE_INITRAMFS)

# --- kernels -----------------------------------------------------------------
# Debian's tree is extracted once (build/KERNEL/src/pristine).  Each
# variant gets a hard-linked copy with its series applied (patch replaces
# the files it changes, so the pristine tree stays pristine) and builds
# beside it:
#   build/KERNEL/kernel/VARIANT/src   the patched source
#   build/KERNEL/kernel/VARIANT/obj   objects, .config, bzImage
# Every variant's objects see their source as ../src, so a file its series
# does not change (and that includes no header it changes) compiles the same
# for every variant, and ccache serves it to the second and third kernel.
PRISTINE := $(BUILD)/src/pristine
# Left out of the extraction, a third of the tree: the other architectures'
# sources and device trees (only arch/x86 is built; their Kconfig files stay,
# crypto/Kconfig reads them) and amdgpu's 373 MB of register headers.
OTHER_ARCHES := alpha arc arm arm64 csky hexagon ia64 loongarch m68k microblaze \
	mips nios2 openrisc parisc powerpc riscv s390 sh sparc um xtensa
EXTRACT_EXCLUDES := $(foreach a,$(OTHER_ARCHES),$(foreach p,*.[chS] *.dts *.dtsi, \
		--exclude='*/arch/$(a)/$(p)')) \
	--exclude='*/drivers/gpu/drm/amd/include/asic_reg'
series_patches = $(addprefix $(TREE)/,$(shell sed 's/#.*//' $(TREE)/series.$(1)))

$(PRISTINE)/.extracted: $(KERNEL_TARBALL)
	@echo "  EXTRACT $(KERNEL_TARBALL) -> build/$(KERNEL)/src/pristine"
	@rm -rf $(PRISTINE) && mkdir -p $(PRISTINE)
	@tar -xf $(KERNEL_TARBALL) -C $(PRISTINE) --strip-components=1 $(EXTRACT_EXCLUDES)
	@echo "  VERSION $$($(MAKE) -s -C $(PRISTINE) kernelversion)"
	@touch $@

ifneq ($(BZIMAGE_OBJ),)
# The user's kernel is built already: no rule may rebuild it.  Its object
# tree and its sources (for the symbolised traces: OBJ/source of an O=
# build, else OBJ) are linked where a variant's kernel would be.
# Precious: a failed or interrupted recipe must not delete the target,
# which is the user's own bzImage through the link.
.PRECIOUS: $(BUILD)/kernel/$(VARIANTS)/obj/arch/x86/boot/bzImage
$(BUILD)/kernel/$(VARIANTS)/obj/arch/x86/boot/bzImage:
	@mkdir -p $(BUILD)/kernel/$(VARIANTS) && \
		ln -sfn $(if $(wildcard $(BZIMAGE_OBJ)/source),$(BZIMAGE_OBJ)/source,$(BZIMAGE_OBJ)) \
			$(BUILD)/kernel/$(VARIANTS)/src && \
		ln -sfn $(BZIMAGE_OBJ) $(BUILD)/kernel/$(VARIANTS)/obj
else ifeq ($(KERNEL_SRC),)
$(BUILD)/kernel/%/src/.applied: $(PRISTINE)/.extracted \
		$(TREE)/series.$$(call series_of,$$*) \
		$$(call series_patches,$$(call series_of,$$*))
	@echo "  SOURCE  build/$(KERNEL)/kernel/$*/src: pristine + $(TREE)/series.$(call series_of,$*)"
	@rm -rf $(@D) && mkdir -p $(dir $(@D))
	@cp -al $(PRISTINE) $(@D) && rm $(@D)/.extracted
	@for p in $(call series_patches,$(call series_of,$*)); do \
		echo "  PATCH   $$p"; \
		patch -s -p1 -d $(@D) < $$p; \
	done
	@touch $@
else
# Rewritten only when HEAD moved: otherwise up to date (make -q too).
SRC_HEAD_COMMIT := $(shell git -C $(KERNEL_SRC) rev-parse HEAD)
$(SRC_HEAD): $(if $(filter $(SRC_HEAD_COMMIT),$(shell cat $(SRC_HEAD) 2> /dev/null)),,FORCE)
	@mkdir -p $(@D) && echo $(SRC_HEAD_COMMIT) > $@
FORCE:

$(BUILD)/kernel/%/src/.applied: $(SRC_HEAD) \
		$(TREE)/series.$$(call series_of,$$*) \
		$$(call series_patches,$$(call series_of,$$*))
	@echo "  SOURCE  $(patsubst $(TOP)/%,%,$(@D)): $(KERNEL_SRC) HEAD + $(TREE)/series.$(call series_of,$*)"
	@mkdir -p $(dir $(@D))
	@kernel-patches/apply-series $(KERNEL_SRC) $(@D) $(abspath $(call series_patches,$(call series_of,$*)))
	@touch $@
endif

ifeq ($(BZIMAGE_OBJ),)
$(BUILD)/kernel/%/obj/.config: $(BUILD)/kernel/%/src/.applied $$(call fragments_of,$$*)
	@mkdir -p $(@D)
	@echo "  CONFIG  tinyconfig + $(patsubst kernel-patches/%,%,$(call fragments_of,$*)) ($*)"
	@$(KMAKE) -s tinyconfig > /dev/null
	@$(BUILD)/kernel/$*/src/scripts/kconfig/merge_config.sh -m -O $(@D) $@ \
		$(call fragments_of,$*) > /dev/null
	@$(KMAKE) -s olddefconfig
	@kernel-patches/config/check $@ $(call fragments_of,$*)

# A whole build is also kept in $(KERNEL_CACHE) (kernel-patches/kernel-cache),
# keyed on everything it is made of (the files below, the make flags, the
# toolchain): a warm build restores it instead of replaying 1100 compiler
# calls through ccache.  KERNEL_CACHE= turns it off.
export KERNEL_CACHE ?= $(HOME)/.cache/raceblk/kernels
export KMAKE_KEY = $(KMAKE_FLAGS) bzImage modules
kernel_inputs = $(if $(KERNEL_SRC),$(SRC_HEAD),$(KERNEL_TARBALL)) $(TREE)/series.$(call series_of,$(1)) \
	$(call series_patches,$(call series_of,$(1))) $(call fragments_of,$(1))
KCACHE = kernel-patches/kernel-cache $(1) $* $(BUILD)/kernel/$*/obj $(BUILD)/kernel/$*/src \
	$(call kernel_inputs,$*)

$(BUILD)/kernel/%/obj/arch/x86/boot/bzImage: $(BUILD)/kernel/%/obj/.config
	@if $(call KCACHE,restore); then \
		echo "  KERNEL  $(patsubst $(TOP)/%,%,$(BUILD))/kernel/$*/obj (from $(KERNEL_CACHE))"; \
	else \
		harness/progress "kernel $*" $(BUILD)/kernel/$*/build.log $(KMAKE) bzImage modules; \
		$(call KCACHE,save) || true; \
	fi
	@touch $@
endif

# --- a distribution's kbuild, built here ------------------------------------
# KERNEL=debian-TREE where Debian's kbuild programs cannot run here (7.3's
# are built for trixie's glibc 2.38; bookworm has 2.36): harness/distro.py
# has make build them from TREE's source (make modules_prepare, with the
# image's configuration olddefconfig'd for this compiler: what that
# changed is in configuration.diff), and puts them in place of Debian's.
# Modules are still built with Debian's own configuration and headers.
DEBIAN_HOME := $(TOP)/build/debian-$(KERNEL)
$(DEBIAN_HOME)/prep/.prepared: $(PRISTINE)/.extracted $(DEBIAN_HOME)/release
	@rm -rf $(@D) && mkdir -p $(@D)
	@cp $(DEBIAN_HOME)/config $(@D)/.config
	@$(MAKE) --no-print-directory -C $(PRISTINE) O=$(@D) $(KMAKE_FLAGS) -s olddefconfig
	@diff -u0 $(DEBIAN_HOME)/config $(@D)/.config | grep '^[-+]CONFIG_' > $(@D)/configuration.diff || true
	@harness/progress "kbuild of debian-$(KERNEL)" $(@D).log \
		$(MAKE) --no-print-directory -C $(PRISTINE) O=$(@D) $(KMAKE_FLAGS) -j$(JOBS) modules_prepare
	@touch $@

# --- driver ------------------------------------------------------------------
# Built from a copy so the repository's driver/ never holds objects.
# The in-tree modules the guests load (harness/in-tree-modules).
INTREE_MODULES := $(call facts,module)
DRIVER_SOURCES := $(wildcard driver/*.[ch]) driver/Kbuild driver/Makefile

# A -debug or -kcsan variant also gets make soak's instances of raceblk (see
# driver/Kbuild).
SOAK_INSTANCES := 4
soak_instances = $(if $(filter yes,$(call variant_fact,$(1),4)),$(SOAK_INSTANCES))

# The module posting's selftest: its test module is built with the driver,
# its script goes to the guest's /lib/kselftest/module/ and the tree's
# ktap_helpers.sh to /lib/kselftest/kselftest/ (on 6.1, which has none,
# the one the posting adds).
MODULE_SELFTEST := $(wildcard $(TREE)/module/*-selftests-module-*.patch)
SELFTEST_MODULE := lib/tests/module/test_module_init_held.c
SELFTEST_SCRIPT := tools/testing/selftests/module/init_fail_held.sh
KTAP_HELPERS := tools/testing/selftests/kselftest/ktap_helpers.sh
KTAP_HELPERS_PATCH := $(wildcard $(TREE)/module/*-selftests-kselftest-add-ktap_helpers.sh.patch)
# new_file PATCH PATH: what PATCH writes to PATH, a file it creates.
new_file = awk -v f='+++ b/$(2)' '$$0 == f { on = 1; next } on && /^@@/ { next } \
	on && /^\+/ { print substr($$0, 2); next } on { exit }' $(1)

# The tree's ktap_helpers.sh: the pristine tree's, or for a kernel not
# built here (no tree extracted) the one file, from the tree's tarball.
ifeq ($(BZIMAGE_OBJ),)
KTAP_HELPERS_FILE := $(PRISTINE)/$(KTAP_HELPERS)
else
KTAP_HELPERS_FILE := $(BUILD)/tools/$(notdir $(KTAP_HELPERS))
$(KTAP_HELPERS_FILE): | $(FETCHED_SOURCE)
	@[ -f $(KERNEL_TARBALL) ] || { echo "make: $@ comes from $(KERNEL_TARBALL): make deps KERNEL=$(KERNEL) installs it, or kernel-patches/fetch-source $(KERNEL) fetches it" >&2; exit 1; }
	@mkdir -p $(@D)
	@tar -xJf $(KERNEL_TARBALL) -O --wildcards '*/$(KTAP_HELPERS)' > $@.tmp && mv $@.tmp $@
endif

$(BUILD)/driver/%/raceblk.ko: $(DRIVER_SOURCES) $(MODULE_SELFTEST) $(BUILD)/kernel/%/obj/arch/x86/boot/bzImage \
		$(if $(BZIMAGE_OBJ),$(if $(KTAP_HELPERS_PATCH),,$(KTAP_HELPERS_FILE)))
	@mkdir -p $(@D)/kselftest/module $(@D)/kselftest/kselftest
	@rm -rf $(@D)/*.[ch] $(@D)/*.o $(@D)/*.ko $(@D)/kernel
	@cp $(DRIVER_SOURCES) $(@D)/
	@$(call new_file,$(MODULE_SELFTEST),$(SELFTEST_MODULE)) > $(@D)/$(notdir $(SELFTEST_MODULE))
	@$(call new_file,$(MODULE_SELFTEST),$(SELFTEST_SCRIPT)) > $(@D)/kselftest/module/$(notdir $(SELFTEST_SCRIPT))
	@$(if $(KTAP_HELPERS_PATCH),$(call new_file,$(KTAP_HELPERS_PATCH),$(KTAP_HELPERS)) >,cp $(KTAP_HELPERS_FILE)) \
		$(@D)/kselftest/kselftest/$(notdir $(KTAP_HELPERS))
	@$(MAKE) --no-print-directory -C $(@D) KDIR=$(BUILD)/kernel/$*/obj \
		$(MODULE_FLAGS) W=1 RACEBLK_INSTANCES=$(call soak_instances,$*)
	@# docs/driver.md and the cases' check read the parameters from the
	@# source: what they read must be what modinfo says.
	@harness/plan.py check-parameters $@ || { rm -f $@; exit 1; }
	@# In-tree modules the guest loads too, beside ours (sd_mod: -sdmod
	@# only), and for a kernel not built here what they depend on.
	@harness/kernelmods.py $(if $(BZIMAGE_OBJ),--dependencies) $(@D) \
		$(or $(BZIMAGE_MODULES),$(BUILD)/kernel/$*/obj) $(INTREE_MODULES)

# --- modules built for another kernel (the vermagic and modversions rows) --
# build/KERNEL/driver/V/foreign/NAME.ko, /lib/modules/foreign/ in V's initramfs:
#   raceblk-vermagic raceblk built against V's configuration with the
#                    other preemption model (PREEMPT for a PREEMPT_NONE
#                    kernel, and the reverse; PREEMPT_RT on 7.3): vermagic
#                    says so ("preempt", "preempt_rt")
#   raceblk-release  the same with another release (LOCALVERSION=-other):
#                    vermagic starts "6.1.192-other"
#   raceblk-fixed    raceblk built for fixed, whose struct module is
#                    larger than vanilla's; the same vermagic
#   raceblk-proto    raceblk built against V's tree where
#                    blk_mq_end_request() takes an int (a fixture patch):
#                    another CRC for that symbol under MODVERSIONS
# Such a tree is only prepared (make modules_prepare, no kernel), with V's
# Module.symvers; for -proto the one file exporting the changed symbol is
# compiled too, and its new CRC (genksyms, "#SYMVER" in its .cmd file)
# replaces the old one there, as a full build of that tree would.
# Which variant gets which: harness/foreign-modules.  (None for a kernel of
# the user's: BZIMAGE_OBJ has no source to prepare.)
foreign_modules = $(if $(BZIMAGE_OBJ),,$(foreach m,$(subst $(comma), ,$(patsubst $(1):%,%,$(filter $(1):%,$(call facts,foreign)))),\
	$(BUILD)/driver/$(1)/foreign/$(m).ko))
ABI_FIXTURE := $(TREE)/fixtures/blk-mq-end-request-int.patch
PREP_KMAKE = $(MAKE) --no-print-directory -C $(1) O=$(@D) $(KMAKE_FLAGS) -j$(JOBS)

# prepare_tree SRC [CHANGE]: configure $(@D) as variant $* with CHANGE
# (shell commands on $(@D)/.config), then modules_prepare it.
define prepare_tree
	@rm -rf $(@D) && mkdir -p $(@D)
	@cp $(BUILD)/kernel/$*/obj/.config $(@D)/.config
	@$(2)
	@$(call PREP_KMAKE,$(1)) -s olddefconfig
	@harness/progress "prepare $(notdir $(@D))" $(@D).log $(call PREP_KMAKE,$(1)) modules_prepare
	@cp $(BUILD)/kernel/$*/obj/Module.symvers $(@D)/
endef
KCONFIG_EDIT = $(BUILD)/kernel/$*/src/scripts/config --file $(@D)/.config
# 7.3 offers x86 no model without preemption (PREEMPT_NONE depends on
# ARCH_NO_PREEMPT, kernel/Kconfig.preempt): there the other one is
# PREEMPT_RT, whose vermagic says "preempt_rt".
FLIP_PREEMPT = if grep -q '^CONFIG_PREEMPT=y' $(@D)/.config; then \
		$(KCONFIG_EDIT) --disable PREEMPT --enable PREEMPT_NONE; \
		$(call PREP_KMAKE,$(BUILD)/kernel/$*/src) -s olddefconfig; \
		grep -q '^CONFIG_PREEMPT_NONE=y' $(@D)/.config || \
			$(KCONFIG_EDIT) --enable PREEMPT_RT; \
	else \
		$(KCONFIG_EDIT) --disable PREEMPT_NONE --enable PREEMPT; \
	fi

$(BUILD)/prep/%-vermagic/.prepared: $(BUILD)/kernel/%/obj/arch/x86/boot/bzImage
	$(call prepare_tree,$(BUILD)/kernel/$*/src,$(FLIP_PREEMPT))
	@touch $@

$(BUILD)/prep/%-release/.prepared: $(BUILD)/kernel/%/obj/arch/x86/boot/bzImage
	$(call prepare_tree,$(BUILD)/kernel/$*/src,$(KCONFIG_EDIT) --set-str LOCALVERSION -other)
	@touch $@

$(BUILD)/prep/%-proto/.prepared: $(BUILD)/kernel/%/obj/arch/x86/boot/bzImage $(ABI_FIXTURE)
	@rm -rf $(@D)-src && cp -al $(BUILD)/kernel/$*/src $(@D)-src
	@patch -s -p1 -d $(@D)-src < $(ABI_FIXTURE)
	$(call prepare_tree,$(@D)-src,)
	@$(call PREP_KMAKE,$(@D)-src) -s block/blk-mq.o
	@crc=$$(sed -n 's/^#SYMVER blk_mq_end_request //p' $(@D)/block/.blk-mq.o.cmd); \
	old=$$(awk '$$2 == "blk_mq_end_request" { print $$1 }' $(@D)/Module.symvers); \
	[ -n "$$crc" ] && [ -n "$$old" ] && [ "$$crc" != "$$old" ] || \
		{ echo "prep: no new CRC for blk_mq_end_request ('$$old' -> '$$crc')" >&2; exit 1; }; \
	echo "  CRC     blk_mq_end_request $$old -> $$crc ($(notdir $(@D)))"; \
	awk -v crc="$$crc" 'BEGIN { FS = OFS = "\t" } $$2 == "blk_mq_end_request" { $$1 = crc } 1' \
		$(@D)/Module.symvers > $(@D)/Module.symvers.new && mv $(@D)/Module.symvers.new $(@D)/Module.symvers
	@touch $@

# build_raceblk KDIR: raceblk.ko built against KDIR, as $@.  modpost only
# warns about a symbol the kernel does not export (a PREEMPT module wants
# preempt_schedule_thunk): the loader is the one to say.
define build_raceblk
	@rm -rf $@.d && mkdir -p $@.d
	@cp $(DRIVER_SOURCES) $@.d/
	@$(MAKE) --no-print-directory -C $@.d KDIR=$(1) CC="ccache gcc" KBUILD_MODPOST_WARN=1 > $@.log 2>&1 || \
		{ tail -n 20 $@.log; exit 1; }
	@cp $@.d/raceblk.ko $@
	@echo "  FOREIGN $@"
endef

$(BUILD)/driver/%/foreign/raceblk-vermagic.ko: $(DRIVER_SOURCES) $(BUILD)/prep/%-vermagic/.prepared
	$(call build_raceblk,$(BUILD)/prep/$*-vermagic)

$(BUILD)/driver/%/foreign/raceblk-release.ko: $(DRIVER_SOURCES) $(BUILD)/prep/%-release/.prepared
	$(call build_raceblk,$(BUILD)/prep/$*-release)

$(BUILD)/driver/%/foreign/raceblk-proto.ko: $(DRIVER_SOURCES) $(BUILD)/prep/%-proto/.prepared
	$(call build_raceblk,$(BUILD)/prep/$*-proto)

$(BUILD)/driver/%/foreign/raceblk-fixed.ko: $(BUILD)/driver/fixed/raceblk.ko
	@mkdir -p $(@D) && cp $< $@
	@echo "  FOREIGN $@"

# --- images and guest --------------------------------------------------------
IMGPATCH := $(BUILD)/tools/imgpatch
export IMGPATCH
image_base = $(BUILD)/images/$(shell awk '$$1 == "from" { print $$2 }' images/$(1).patch).img

$(IMGPATCH): images/imgpatch.c
	@mkdir -p $(@D)
	@echo "  HOSTCC  $@"
	@gcc -O2 -Wall -Wextra -Werror -o $@ $<

# The host's build of the guest's blksum: the images' sums are its
# (images/sums), so the guest's and the host's are one program.
BLKSUM := $(BUILD)/tools/blksum
export BLKSUM

$(BLKSUM): harness/guest/blksum.c
	@mkdir -p $(@D)
	@echo "  HOSTCC  $@"
	@gcc -O2 -Wall -Wextra -Werror -o $@ $<

$(BUILD)/images/%.img: images/%.parted images/%.expected images/mkimage images/parted-table images/sums $(IMGPATCH) $(BLKSUM)
	@mkdir -p $(@D)
	@echo "  IMAGE   $@"
	@images/mkimage $< $@

$(BUILD)/images/%.img: images/%.patch images/%.expected images/mkimage images/sums $(IMGPATCH) $(BLKSUM) $$(call image_base,$$*)
	@echo "  IMAGE   $@ (from $(notdir $(call image_base,$*)))"
	@images/mkimage $< $@

# Two builds of every image give the same bytes: build them all again
# (good ones first: hostile ones start from them) and compare.
images-check: images
	@rm -rf $(BUILD)/images-check && mkdir -p $(BUILD)/images-check
	@for spec in $(foreach i,$(IMAGES),$(wildcard images/$(i).parted images/$(i).patch)); do \
		images/mkimage $$spec $(BUILD)/images-check/$$(basename $${spec%.*}).img; \
	done
	@cd $(BUILD)/images && sha256sum $(addsuffix .img,$(IMAGES)) > ../images.sha256
	@cd $(BUILD)/images-check && sha256sum -c --quiet ../images.sha256 && \
		echo "images-check: $(words $(IMAGES)) images, the same sha256 on a second build"

$(BUILD)/guest/%.o: harness/guest/%.c
	@mkdir -p $(@D)
	@echo "  CC      $@"
	@gcc -c -O2 -Wall -Wextra -Werror -Dmain=$*_main -o $@ $<

$(GUEST_HELPERS_BIN): harness/guest/helpers.c $(foreach h,$(GUEST_HELPERS),$(BUILD)/guest/$(h).o)
	@echo "  LD      $@ (static: $(GUEST_HELPERS))"
	@gcc -static -s -O2 -Wall -Wextra -Werror '-DHELPERS=$(foreach h,$(GUEST_HELPERS),X($(h)))' \
		-o $@ $^

$(BUILD)/initramfs/%.cpio: $(BUILD)/driver/%/raceblk.ko $(GUEST_HELPERS_BIN) \
		$(wildcard harness/guest/*) harness/mkinitramfs
	@echo "  CPIO    $@"
	@harness/mkinitramfs $@ $(<D) $(GUEST_HELPERS_BIN) $(GUEST_HELPERS)

$(BUILD)/initramfs/foreign/%.cpio.gz: $$(call foreign_modules,$$*) harness/mkinitramfs
	@mkdir -p $(@D)
	@echo "  CPIO    $@"
	@harness/mkinitramfs --foreign $@ $(BUILD)/driver/$*/foreign

# images/NAME.SERIES.expected: the golden table on one series' kernels,
# where it differs (fixed drops a partition 6.1 makes).
$(BUILD)/initramfs/images/%.cpio.gz: $(BUILD)/images/%.img images/%.expected \
		$$(wildcard images/%.*.expected) harness/mkinitramfs
	@mkdir -p $(@D)
	@echo "  CPIO    $@"
	@harness/mkinitramfs --image $@ $< images/$*.expected $(wildcard images/$*.*.expected)

# --- entry points ------------------------------------------------------------
# harness/run --build makes each kernel and its archives in turn and runs
# its scenarios while the next one builds; --module builds against every
# kernel first.  KERNEL=debian-TREE: harness/run --debian builds what it
# needs (Debian's kernel's raceblk, this project's fixed of TREE).
test: deps
ifneq ($(DEBIAN_TREE),)
	@harness/run -j $(JOBS) --debian $(DEBIAN_TREE) $(OWN_IMAGE_ARGS)
else ifneq ($(MODULE),)
	@$(MAKE) --no-print-directory initramfs images-check
	@# Built means up to date: a kernel restored from the cache once
	@# looked stale again, and every make restored it and rebuilt all
	@# that depends on it.
	@$(MAKE) --no-print-directory -q initramfs || \
		{ echo "build: make initramfs still has work right after it ran (make -d -q initramfs says what)" >&2; exit 1; }
	@VARIANTS="$(VARIANTS)" harness/run -j $(JOBS) $(OWN_IMAGE_ARGS) $(OWN_MODULE_ARGS)
else
	@$(MAKE) --no-print-directory images-check
	@VARIANTS="$(VARIANTS)" harness/run --build -j $(JOBS) $(OWN_IMAGE_ARGS)
endif

race-demo: deps
	@harness/race-demo $(if $(DEBIAN_TREE),--debian $(DEBIAN_TREE),--build) $(if $(DESIGNS),--designs) \
		$(if $(BACKEND),--backend $(BACKEND)) $(OWN_IMAGE_ARGS)

# Every prefix of the series builds and is checkpatch --strict clean; the
# series also builds with CONFIG_MODULE_UNLOAD=n and CONFIG_MODULES=n.
# checkpatch's SPDX check needs these (kernel-patches/series-lib).
SERIES_PACKAGES := python3-ply python3-git
series-check: deps
	$(call install_missing,$(SERIES_PACKAGES))
	@kernel-patches/series-check

# The postings (block, module, zram) as patches to send, signed by whoever
# runs it (git config user.name and user.email): build/TREE/series-export/,
# TREE kernel-patches/posting-tree's unless KERNEL is given.
POSTING_TREE := $(shell sed '/^\#/d' kernel-patches/posting-tree)
EXPORT_TREE := $(if $(filter command line environment,$(origin KERNEL)),$(KERNEL),$(POSTING_TREE))
series-export:
	@$(MAKE) --no-print-directory deps KERNEL=$(EXPORT_TREE)
	$(call install_missing,$(SERIES_PACKAGES))
	@KERNEL=$(EXPORT_TREE) KERNEL_TARBALL= kernel-patches/series-export

# The module init functions of the tree (KERNEL, or the posting tree's)
# that publish something others can open and can fail afterwards, found
# with Coccinelle (kernel-patches/survey/), and their count.
survey:
	@$(MAKE) --no-print-directory deps KERNEL=$(EXPORT_TREE)
	$(call install_missing,spatch:coccinelle)
	@$(MAKE) --no-print-directory KERNEL=$(EXPORT_TREE) $(TOP)/build/$(EXPORT_TREE)/src/pristine/.extracted
	@kernel-patches/survey/run build/$(EXPORT_TREE)/src/pristine

# A git tree with the series as commits, to edit the patches.
series-tree: deps
	@kernel-patches/series-check --tree-only

# docs/actions.md (the guest's actions, from their comments) and
# docs/driver.md's table of parameters (from MODULE_PARM_DESC): make check
# fails when either is not what this writes.
docs:
	@harness/plan.py actions > docs/actions.md.new && mv docs/actions.md.new docs/actions.md
	@harness/plan.py driver-docs > docs/driver.md.new && mv docs/driver.md.new docs/driver.md

# What builds and boots nothing: every shell script through shellcheck
# (guest ones as busybox sh), the Python runner compiled and through
# pyflakes, the cases, the CI workflow (actionlint), and the
# runner's self-tests against a fake QEMU (harness/selftest.py).
SHELL_SCRIPTS := .ci/run harness/bench harness/mkinitramfs harness/progress \
	harness/lint-workflow images/mkimage images/parted-table images/sums \
	kernel-patches/apply-series kernel-patches/config/check kernel-patches/fetch-source \
	kernel-patches/kernel-cache kernel-patches/series-check \
	kernel-patches/series-export kernel-patches/series-lib kernel-patches/survey/run
GUEST_SCRIPTS := harness/guest/init $(wildcard harness/guest/*.sh)
PYTHON := harness/run harness/race-demo harness/soak $(wildcard harness/*.py)

# The kernel's own KTAP parser reads the runner's results.ktap in the
# self-tests: two files of the tree, extracted alone (10 s).
KUNIT_TOOL := $(BUILD)/tools/kunit
$(KUNIT_TOOL)/kunit_parser.py: $(KERNEL_TARBALL)
	@mkdir -p $(@D)
	@echo "  EXTRACT tools/testing/kunit/kunit_{parser,printer}.py -> $(@D)"
	@tar -xJf $< -C $(@D) --strip-components=4 --wildcards \
		'*/tools/testing/kunit/kunit_parser.py' '*/tools/testing/kunit/kunit_printer.py'
	@touch $@

check: deps-check
	@$(MAKE) --no-print-directory $(KUNIT_TOOL)/kunit_parser.py
	@echo "  CHECK   shellcheck"
	@shellcheck -x $(SHELL_SCRIPTS)
	@shellcheck -s dash $(GUEST_SCRIPTS)
	@echo "  CHECK   python"
	@for f in $(PYTHON); do python3 -c 'import sys; compile(open(sys.argv[1]).read(), sys.argv[1], "exec")' $$f; done
	@pyflakes3 $(PYTHON)
	@echo "  CHECK   harness/cases"
	@harness/plan.py check
	@echo "  CHECK   .github/workflows"
	@harness/lint-workflow
	@echo "  CHECK   harness self-tests"
	@KUNIT_TOOL=$(KUNIT_TOOL) python3 harness/selftest.py

# make soak [SOAK_VARIANT=fixed-debug] [CYCLES=1000] [SEED=N] [SOAK_ARGS=--faults]:
# one guest, CYCLES cycles of load, hold, fail and unload (harness/soak).
soak: deps
	@$(if $(call soak_instances,$(SOAK_VARIANT)),,echo "soak: SOAK_VARIANT=$(SOAK_VARIANT): a -debug or -kcsan variant (only those get the soak's instances of raceblk)" >&2; exit 2)
	@$(MAKE) --no-print-directory initramfs VARIANTS="$(SOAK_VARIANT)"
	@harness/soak --variant $(SOAK_VARIANT) $(if $(CYCLES),--cycles $(CYCLES)) \
		$(if $(SEED),--seed $(SEED)) $(SOAK_ARGS)

# make bench [FIGURES="cold_build_s warm_build_s"]: those figures only.
bench: deps
	@VARIANTS="$(VARIANTS)" harness/bench $(FIGURES)

clean:
	rm -rf $(BUILD)/driver $(BUILD)/guest $(BUILD)/images $(BUILD)/images-check \
		$(BUILD)/initramfs $(BUILD)/results $(BUILD)/snapshots $(BUILD)/byo $(BUILD)/tools

distclean:
	rm -rf $(TOP)/build
