# SPDX-License-Identifier: GPL-2.0
"""harness/run's command line: its options, checked (argparse's error,
exit 2, for what does not go together)."""

import argparse
import os
import pathlib
import re
from typing import List, Tuple

import distro
import guestvm
import ownmod
import plan
from own import own_image_name

USAGE = ('harness/run [-j N] [--build] [--cold|--snapshot] [--list|--dry-run] [--matrix N] [--filter GLOBS] '
	 '[--shard I/N] [--timeout SECONDS] [--cases FILE] [--repeat N] [--image PATH [--expected FILE]] '
	 '[--shell] [--gdb [PORT]] [--module FILE --module-disk NAME --module-fail PARAMS '
	 '[--module-params PARAMS]] [--bzimage FILE [--as VARIANT] | --debian TREE]')
# --shell and --gdb: the guest waits for a person, not for a deadline.
INTERACTIVE_TIMEOUT_S = 24 * 3600


def bounded(low: int, high: int):
	def parse(text: str) -> int:
		if not re.fullmatch(r'[0-9]+', text) or not low <= int(text) <= high:
			raise argparse.ArgumentTypeError(f'wants a whole number from {low} to {high}, got {text!r}')
		return int(text)
	return parse


def shard(text: str) -> Tuple[int, int]:
	match = re.fullmatch(r'([0-9]{1,4})/([0-9]{1,4})', text)
	if not match or not 1 <= int(match.group(1)) <= int(match.group(2)):
		raise argparse.ArgumentTypeError(f'wants I/N with 1 <= I <= N <= 9999, got {text!r}')
	return int(match.group(1)), int(match.group(2))


def parse_args(argv: List[str]) -> argparse.Namespace:
	parser = argparse.ArgumentParser(prog='harness/run', usage=USAGE, allow_abbrev=False,
					 description='Boot one QEMU guest per scenario of harness/cases.')
	parser.add_argument('-j', dest='jobs', type=bounded(1, 64), default=os.cpu_count() or 1,
			    help='guests at once (default: the number of CPUs)')
	boots = parser.add_mutually_exclusive_group()
	boots.add_argument('--cold', dest='boot', action='store_const', const='cold', default='auto',
			   help='boot every guest from scratch')
	boots.add_argument('--snapshot', dest='boot', action='store_const', const='snapshot',
			   help='restore every guest from its variant\'s snapshot')
	parser.add_argument('--build', action='store_true',
			    help='make each variant\'s kernel and archives in turn (make initramfs-base VARIANTS=V), '
			    'running the scenarios of those made meanwhile')
	parser.add_argument('--list', action='store_true', help='list the scenarios, run none')
	parser.add_argument('--dry-run', action='store_true',
			    help='print each scenario with the qemu.cmd that boots its guest by hand; boot nothing')
	parser.add_argument('--matrix', type=bounded(1, 256), metavar='N',
			    help='print a GitHub Actions strategy.matrix of N shards')
	parser.add_argument('--filter', default='*', metavar='GLOBS',
			    help='run the scenarios matching one of these space-separated globs')
	parser.add_argument('--shard', type=shard, default=(1, 1), metavar='I/N',
			    help='every Nth scenario from the Ith')
	parser.add_argument('--timeout', type=bounded(1, 86400), default=60, metavar='SECONDS')
	parser.add_argument('--cases', metavar='FILE',
			    help='the cases (default: harness/cases, or harness/module-cases with --module; '
			    'make soak writes its own)')
	parser.add_argument('--vcpus', type=bounded(1, guestvm.MAX_VCPUS), default=guestvm.VCPUS, metavar='N',
			    help=f'each guest\'s vCPUs (default {guestvm.VCPUS})')
	parser.add_argument('--repeat', type=bounded(1, 1000), default=1, metavar='N',
			    help='boot every scenario N times; runs that disagree are FLAKY')
	parser.add_argument('--image', type=pathlib.Path, metavar='PATH',
			    help='run the "all" and "any" rows on this disk image')
	parser.add_argument('--expected', type=pathlib.Path, metavar='FILE',
			    help='the golden table of --image ("number start size" lines)')
	parser.add_argument('--shell', action='store_true',
			    help='stop the one scenario at its hold point with a shell on the guest\'s '
			    'console (this terminal); the case goes on when the shell exits')
	parser.add_argument('--gdb', type=bounded(1024, 65535), nargs='?', const=1234, metavar='PORT',
			    help='start the one scenario\'s guest with a gdb stub on localhost:PORT '
			    '(default 1234) and print the command that attaches')
	own = parser.add_argument_group('a driver of your own (harness/module-cases run with it, not raceblk)')
	own.add_argument('--module', metavar='FILE',
			 help='the module: a path in the kernel tree (drivers/block/null_blk/null_blk.ko), or '
			 'one here (/..., ./..., ../...) of a .ko whose directory has its Kbuild or Makefile; '
			 'built for each variant')
	own.add_argument('--module-disk', metavar='NAME', help='the disk its init adds (nullb0)')
	own.add_argument('--module-fail', metavar='PARAMS',
			 help='the parameters that make its init fail after the disk is added')
	own.add_argument('--module-params', default='', metavar='PARAMS',
			 help='parameters of every load of it (default: none)')
	bz = parser.add_argument_group('a kernel of your own')
	bz.add_argument('--bzimage', type=pathlib.Path, metavar='FILE',
			help='run the cases on this kernel (OBJ/arch/x86/boot/bzImage of a kernel you built), '
			'raceblk built against OBJ')
	bz.add_argument('--as', dest='as_variant', default='vanilla', metavar='VARIANT',
			help='what --bzimage is judged as (default vanilla)')
	bz.add_argument('--debian', metavar='TREE', choices=distro.trees(),
			help='run the cases on Debian\'s own kernel of TREE (fetched, never installed), '
			'judged as vanilla; the other variants of VARIANTS are this project\'s kernels of TREE')
	opts = parser.parse_args(argv)
	if opts.debian and opts.bzimage:
		parser.error('--debian or --bzimage: one kernel not built here')
	if opts.build and (opts.debian or opts.bzimage or opts.module):
		parser.error('--build makes this project\'s kernels: not with --debian, --bzimage or --module '
			     '(they build what they need first)')
	if opts.expected and not opts.image:
		parser.error('--expected goes with --image')
	opts.own_module = None
	if opts.module:
		if opts.image:
			parser.error('--module runs its own cases, on no image: not with --image')
		try:
			opts.own_module = ownmod.from_options(opts.module, opts.module_disk, opts.module_params,
							      opts.module_fail)
		except ownmod.Problem as problem:
			parser.error(str(problem))
	elif opts.module_disk or opts.module_fail or opts.module_params:
		parser.error('--module-disk, --module-fail and --module-params go with --module')
	opts.cases = opts.cases or str(plan.MODULE_TABLE if opts.module else plan.TABLE)
	if opts.as_variant != 'vanilla' and not opts.bzimage:
		parser.error('--as goes with --bzimage')
	if opts.bzimage and opts.as_variant not in plan.default_variants():
		parser.error(f'--as {opts.as_variant}: one of {", ".join(plan.default_variants())}')
	# --shell and --gdb: one guest, for a person.
	opts.interactive = bool(opts.shell or opts.gdb)
	if opts.interactive:
		if opts.repeat != 1 or opts.matrix:
			parser.error('--shell and --gdb run one scenario once')
		opts.boot, opts.jobs, opts.timeout = 'cold', 1, INTERACTIVE_TIMEOUT_S
	# --bzimage's kernel is one variant; Debian's is vanilla, beside what
	# VARIANTS names of ours.
	named = os.environ.get('VARIANTS', '').split()
	opts.variants = ([opts.as_variant] if opts.bzimage else named or
			 ([distro.JUDGED_AS] if opts.debian else plan.test_variants()))
	opts.own_name = own_image_name(opts.image) if opts.image else None
	return opts


