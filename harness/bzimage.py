# SPDX-License-Identifier: GPL-2.0
"""harness/run --bzimage: the cases on a kernel the user configured and
built, judged as one variant (--as, default vanilla) of the nearest known
tree.

Before any guest boots, its configuration (embedded with CONFIG_IKCONFIG,
which must then be its object tree's too, else the object tree's
.config) must have what the guest needs: kernel-patches/config/base.config
and the tree's, but for the choices made there for build and boot speed
alone (kernel-patches/config/bzimage-optional), and what tinyconfig
gives our kernels by default (kernel-patches/config/bzimage-needs); a
module is as good for what kernel-patches/config/bzimage-modular names,
and an option only some cases need skips those cases.  A missing option
is named.  (harness/distro.py runs Debian's kernels through here too.)
Then make builds raceblk, its helper modules and the archives against
the image's object tree (BZIMAGE_OBJ, under build/bzimage-HASH/ or BZIMAGE_BUILD),
and the run goes on with that build.  The modules built for
another kernel (the vermagic and modversions rows) need the kernel's
source tree prepared twice more: those scenarios are not run, and count
as skipped.
"""

import os
import pathlib
import re
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

import kernelmods
import plan
from session import Session

TOP = plan.TOP
CONFIG = TOP / 'kernel-patches/config'
OPTION_RE = re.compile(r'^(?:# )?(CONFIG_[A-Z0-9_]+)(?:=| is not set)')


def in_tree_modules(lacks: Sequence[str] = ()) -> List[str]:
	"""The modules of the tree the cases load that base.config makes
	modules (harness/in-tree-modules' unmarked lines), but those whose
	option the kernel LACKS."""
	return [m.path for m in plan.in_tree_modules() if not m.mark and m.option not in lacks]


class Problem(Exception):
	"""What keeps --bzimage from running, said for a person."""


def object_tree(image: pathlib.Path) -> pathlib.Path:
	"""The build IMAGE came out of: OBJ of OBJ/arch/x86/boot/bzImage, with
	its .config, Module.symvers and release."""
	# Around the link given (a distribution's image linked into its
	# headers), or around what it links to.
	for folder in (*image.absolute().parents, *image.resolve().parents):
		if all((folder / name).is_file() for name in ('.config', 'Module.symvers',
							      'include/config/kernel.release')):
			if (folder / 'arch/x86/boot/bzImage').resolve() != image.resolve():
				raise Problem(f'--bzimage {image}: not the bzImage of its object tree {folder} '
					      '(give OBJ/arch/x86/boot/bzImage)')
			return folder
	raise Problem(f'--bzimage {image}: no kernel object tree around it (.config, Module.symvers and '
		      'include/config/kernel.release in a directory above): raceblk is built against it, '
		      'so give OBJ/arch/x86/boot/bzImage of a tree built with make bzImage modules')


def options(config: str) -> Dict[str, str]:
	"""A configuration's lines, by option."""
	return {m.group(1): line.strip() for line in config.splitlines() if (m := OPTION_RE.match(line))}


def kernel_config(image: pathlib.Path, obj: pathlib.Path) -> Tuple[str, str]:
	"""IMAGE's configuration, and where it was read: embedded, which must
	be what OBJ builds modules with, or OBJ's .config."""
	built = (obj / '.config').read_text()
	for script in (obj / 'source/scripts/extract-ikconfig', obj / 'scripts/extract-ikconfig'):
		if script.is_file():
			done = subprocess.run([str(script), str(image)], capture_output=True, text=True, check=False)
			if done.returncode == 0 and 'CONFIG_' in done.stdout:
				if options(done.stdout) != options(built):
					raise Problem(f'--bzimage {image}: its embedded configuration is not {obj}/.config, '
						      'which modules are built with: build the kernel again')
				return done.stdout, f'{image} (CONFIG_IKCONFIG)'
			break
	return built, str(obj / '.config')


def wanted_lines(tree: str) -> Dict[str, str]:
	"""What the guest needs of a kernel of TREE, by option: the base
	fragments' lines (a later fragment's first) but the optional ones,
	and bzimage-needs'."""
	optional = set(re.findall(r'^(CONFIG_[A-Z0-9_]+)', (CONFIG / 'bzimage-optional').read_text(), re.M))
	wanted: Dict[str, str] = {}
	for fragment in (CONFIG / 'base.config', TOP / 'kernel-patches' / tree / 'config/base.config',
			 CONFIG / 'bzimage-needs'):
		if fragment.is_file():
			for line in fragment.read_text().splitlines():
				match = OPTION_RE.match(line)
				if match and match.group(1) not in optional:
					wanted[match.group(1)] = line.strip()
	return wanted


def modular() -> Dict[str, str]:
	"""The options wanted built in that a module is as good for
	(kernel-patches/config/bzimage-modular), with the module's name."""
	return dict(re.findall(r'^(CONFIG_[A-Z0-9_]+)\s+([a-z0-9_]+)', (CONFIG / 'bzimage-modular').read_text(), re.M))


def modules_lacking(config: str, modules: pathlib.Path) -> List[str]:
	"""The modules of what CONFIG builds as modules where base.config
	builds in (modular()) that MODULES has not."""
	have = options(config)
	wanted = [name for option, name in modular().items() if have.get(option) == f'{option}=m']
	found = kernelmods.index(modules) if wanted else {}
	return [name for name in wanted if name not in found]


def missing(config: str, wanted: Dict[str, str]) -> Dict[str, str]:
	"""The wanted lines CONFIG does not have, by option: the line, and what
	it has instead.  An option it does not know is not set (as
	kernel-patches/config/check)."""
	have = options(config)
	as_module = modular()

	def has(name: str, line: str) -> bool:
		return (have.get(name) == line or (line.startswith('# ') and name not in have) or
			(name in as_module and line == f'{name}=y' and have.get(name) == f'{name}=m'))
	return {name: f'{line} (it has {have.get(name, "nothing")!r})' for name, line in sorted(wanted.items())
		if not has(name, line)}


# A kernel built with CONFIG_PREEMPT_DYNAMIC (as distributions build
# theirs) chooses its preemption model at boot: full preemption, as the
# guests want, with this on its command line.
PREEMPT_FULL = 'preempt=full'


def boot_args(config: str, gaps: Dict[str, str]) -> List[str]:
	"""What the kernel's command line needs for what GAPS lacks, taking
	out of GAPS what that makes up for."""
	if 'CONFIG_PREEMPT' in gaps and options(config).get('CONFIG_PREEMPT_DYNAMIC') == 'CONFIG_PREEMPT_DYNAMIC=y':
		del gaps['CONFIG_PREEMPT']
		return [PREEMPT_FULL]
	return []


# What building modules with LLVM=1 runs, and the Debian package of each.
LLVM_TOOLS = {'clang': 'clang', 'ld.lld': 'lld', 'llvm-ar': 'llvm', 'llvm-nm': 'llvm', 'llvm-objcopy': 'llvm'}


def need_clang(image: pathlib.Path, config: str) -> None:
	"""A kernel built with clang gets modules built with LLVM=1 (modules
	built with gcc would fail on clang's flags): its tools must be here."""
	lacking = sorted({package for tool, package in LLVM_TOOLS.items() if not shutil.which(tool)})
	if lacking:
		built = options(config).get('CONFIG_CC_VERSION_TEXT', 'CONFIG_CC_VERSION_TEXT="clang"').split('=', 1)[1]
		raise Problem(f'--bzimage {image}: built with {built}: its modules are built with LLVM=1, '
			      f'which needs {", ".join(lacking)} (apt-get install {" ".join(lacking)})')


# A make of ours starts afresh: not a part of the make that may have
# started harness/run (its flags, its KERNEL_SRC).
MAKE_ENV = {k: v for k, v in os.environ.items()
	    if k not in ('MAKEFLAGS', 'MFLAGS', 'MAKELEVEL', 'KERNEL_SRC', 'KERNEL', 'RACEBLK_BUILD')}


def make_args(obj: pathlib.Path, variant: str, modules: Optional[pathlib.Path],
	      build_at: Optional[pathlib.Path]) -> List[str]:
	"""make's variables for a kernel built with OBJ (its modules in
	MODULES when not in OBJ: a distribution's), its builds in BUILD_AT
	when not the Makefile's choice."""
	return ([f'BZIMAGE_OBJ={obj}', f'VARIANTS={variant}'] + ([f'BZIMAGE_MODULES={modules}'] if modules else []) +
		([f'BZIMAGE_BUILD={build_at}'] if build_at else []))


def build_dir(args: List[str]) -> pathlib.Path:
	"""The Makefile's build directory for a kernel of make ARGS (it computes it)."""
	done = subprocess.run(['make', '--no-print-directory', '-s', '-C', str(TOP), 'build-dir', *args],
			      capture_output=True, text=True, check=False, env=MAKE_ENV)
	if done.returncode != 0:
		raise Problem(f'--bzimage: {done.stderr.strip()}')
	return pathlib.Path(done.stdout.strip())


def prepare(image: pathlib.Path, variant: str, build: bool = True, modules: Optional[pathlib.Path] = None,
	    named: Optional[str] = None, build_at: Optional[pathlib.Path] = None,
	    make_vars: Sequence[str] = ()) -> Session:
	"""Check IMAGE and, with BUILD, build what its guests boot; the
	session of the run that boots them.  A distribution's kernel has its
	modules in MODULES, not in its object tree (the headers), is NAMED
	so, and built for in BUILD_AT, its modules' make given MAKE_VARS."""
	named = named or f'--bzimage {image}'
	if not image.is_file():
		raise Problem(f'{named}: not a file')
	obj = object_tree(image)
	modules = modules or obj
	release = (obj / 'include/config/kernel.release').read_text().strip()
	tree = plan.nearest_tree(release)
	if tree is None:
		raise Problem(f'{named}: release {release}: older than every known tree ({", ".join(plan.trees())})')
	config, where = kernel_config(image, obj)
	gaps = missing(config, wanted_lines(tree))
	args = boot_args(config, gaps)
	# What some cases need alone skips those cases; the rest refuses.
	lacks = {name: text for name, text in gaps.items() if name in plan.case_needs()}
	refused = [text for name, text in gaps.items() if name not in lacks]
	if refused:
		raise Problem(f'{named}: {where} lacks what the guest needs (kernel-patches/config/'
			      'base.config says why): ' + '; '.join(refused))
	if options(config).get('CONFIG_CC_IS_CLANG') == 'CONFIG_CC_IS_CLANG=y':
		need_clang(image, config)
	absent = [name for name in in_tree_modules(list(lacks)) if not kernelmods.found(modules, name)]
	absent += [f'{name}.ko' for name in modules_lacking(config, modules)]
	if absent:
		raise Problem(f'{named}: {modules} has no {absent[0]}: the cases load it (make modules)')
	signed = options(config).get('CONFIG_MODULE_SIG') == 'CONFIG_MODULE_SIG=y'
	build_vars = make_args(obj, variant, None if modules == obj else modules, build_at)
	builds = build_dir(build_vars)
	print(f'harness: {named}: {release}, configuration from {where}: has what the guest needs; '
	      f'judged as {variant} of {tree}' + ''.join(f'; boots with {a}' for a in args) +
	      ('; it checks module signatures: ours are unsigned, and taint it E' if signed else ''), flush=True)
	if lacks:
		print(f'harness: it lacks what some cases need (kernel-patches/config/case-needs): '
		      f'{", ".join(lacks)}: those are skipped, each naming what it needs', flush=True)
	make = subprocess.run(['make', '--no-print-directory', '-C', str(TOP), 'initramfs', *build_vars, *make_vars],
			      check=False, env=MAKE_ENV) if build else None
	if make and make.returncode != 0:
		raise Problem(f'{named}: building raceblk and the archives against {obj} failed (above)')
	return Session(builds, tree, f'{image} ({release})', foreign=(variant,),
		       lacks=tuple(lacks.items()), boot_args=tuple(args))
