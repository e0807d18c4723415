# SPDX-License-Identifier: GPL-2.0
"""make KERNEL=debian-TREE (harness/run --debian TREE): the cases on the
kernel Debian ships for a tree, beside this project's own kernels of it.

Debian's image and headers are fetched with apt-get download into
build/debian-TREE/ and unpacked there, never installed
(kernel-patches/fetch-source --binary; the host's apt for 6.1 and 6.12,
the project's private lists for 7.3).  The image is judged as vanilla of
TREE: it is what a user runs, the bug's kernel.  It is checked as
harness/run --bzimage checks a kernel of the user's, with the headers as
its object tree and the image's own modules (null_blk, sd_mod, ...) and
what they depend on from the package.  Any other variant of the run is
this project's own kernel of TREE (make KERNEL=TREE builds it), linked
into build/debian-TREE/ so that one run has both.
"""

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
from typing import List, Tuple

import bzimage
import plan
from session import Session

TOP = plan.TOP
# What Debian's image is judged as, and race-demo's columns: it, and
# this project's fix of the same tree.
JUDGED_AS = 'vanilla'
COLUMNS = [JUDGED_AS, 'fixed']


class Problem(Exception):
	"""What keeps Debian's kernel of a tree from running, said for a person."""

	def __init__(self, tree: str, text: str):
		super().__init__(f'KERNEL=debian-{tree}: {text}')


def trees(top: pathlib.Path = TOP) -> List[str]:
	"""The trees Debian has a kernel of (kernel-patches/TREE/binary)."""
	return [t for t in plan.trees(top) if (top / 'kernel-patches' / t / 'binary').is_file()]


def home(tree: str) -> pathlib.Path:
	return TOP / 'build' / f'debian-{tree}'


def release(tree: str) -> Tuple[str, str]:
	"""The fetched image's release and Debian version."""
	words = (home(tree) / 'release').read_text().split()
	return words[0], words[1]


def image(tree: str) -> pathlib.Path:
	"""The image, linked where its object tree (the headers) has it."""
	return home(tree) / 'headers/arch/x86/boot/bzImage'


def is_program(path: pathlib.Path) -> bool:
	if not (path.is_file() and os.access(path, os.X_OK)):
		return False
	with path.open('rb') as f:
		return f.read(4) == b'\x7fELF'


def programs(headers: pathlib.Path) -> List[pathlib.Path]:
	"""The headers' kbuild programs (fixdep, modpost, objtool, ...)."""
	return [p for folder in ('scripts', 'tools') for p in sorted((headers / folder).rglob('*')) if is_program(p)]


def cannot_run(program: pathlib.Path) -> str:
	"""Why PROGRAM cannot run here ('' if it can): a newer glibc, which
	the loader says before the program reads anything."""
	try:
		done = subprocess.run([str(program)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
				      check=False, timeout=10)
	except subprocess.TimeoutExpired:
		return ''
	lacking = re.search(r"version `(GLIBC_[0-9.]+)' not found", done.stderr)
	return f'needs {lacking.group(1)}, which this host\'s libc has not' if lacking else ''


def built_here(tree: str, program: pathlib.Path) -> pathlib.Path:
	"""PROGRAM as the tree prepared here has it: scripts/mod/modpost for
	Debian's scripts/mod/modpost.real-lsb-64, which its modpost runs."""
	rel = program.relative_to(home(tree) / 'headers')
	return home(tree) / 'prep' / rel.parent / rel.name.split('.real-', 1)[0]


def own_kbuild(tree: str) -> None:
	"""Where Debian's kbuild programs cannot run here (7.3's are built
	for trixie), the same programs built from TREE's source (the
	Makefile's build/debian-TREE/prep) in their place: modules are still
	built with Debian's configuration, headers and Module.symvers."""
	headers = home(tree) / 'headers'
	failing = {p: why for p in programs(headers) if (why := cannot_run(p))}
	if not failing:
		return
	first = next(iter(failing))
	print(f'harness: Debian\'s kbuild cannot run here (its {first.relative_to(headers)} {failing[first]}): '
	      f'its programs are built from kernel-patches/{tree}\'s source', flush=True)
	if not make(tree, str(home(tree) / 'prep/.prepared')):
		raise Problem(tree, 'building its kbuild programs failed (above)')
	for program in failing:
		own = built_here(tree, program)
		if own.is_file():
			shutil.copy(own, program.resolve())
	still = [p for p in failing if cannot_run(p)]
	if any(p.name.startswith(('modpost', 'fixdep', 'objtool')) for p in still):
		raise Problem(tree, f'{", ".join(str(p.relative_to(headers)) for p in still)} '
			      'still cannot run here')


def compiler_overrides(tree: str) -> List[str]:
	"""make variables for what Debian's compiler has and this host's has
	not (gcc 14's -fmin-function-alignment, for gcc 12): the capability
	options (CONFIG_CC_HAS_*, CONFIG_CC_OPT_*) that configuring the
	image's configuration here took out, off for the modules' make."""
	diff = home(tree) / 'prep/configuration.diff'
	if not diff.is_file():
		return []
	return [f'{m.group(1)}=' for m in re.finditer(r'^-(CONFIG_CC_(?:HAS|OPT)_[A-Z0-9_]+)=', diff.read_text(), re.M)]


def fetched(tree: str) -> bool:
	return (home(tree) / 'release').is_file() and image(tree).is_file()


def fetch(tree: str) -> None:
	"""Debian's image and headers of TREE, unless fetched already (rm -r
	build/debian-TREE fetches what apt offers then)."""
	if fetched(tree):
		return
	done = subprocess.run([str(TOP / 'kernel-patches/fetch-source'), '--binary', tree], check=False)
	if done.returncode != 0:
		raise Problem(tree, 'fetching Debian\'s kernel failed (above)')


def tree_source(tree: str) -> str:
	"""TREE's source tarball: the installed package's, else one fetched
	(make fetches it when missing, as for make KERNEL=debian-TREE): what
	this project's kernels of TREE, the kbuild built here and the
	image's ktap_helpers.sh come from, with nothing installed."""
	return subprocess.run([str(TOP / 'kernel-patches/fetch-source'), '--tarball', '--fetched', tree],
			      capture_output=True, text=True, check=True).stdout.strip()


def make(tree: str, *args: str) -> bool:
	"""make ARGS for this project's tree TREE, from its source as fetched."""
	done = subprocess.run(['make', '--no-print-directory', '-C', str(TOP), f'KERNEL={tree}',
			       f'KERNEL_TARBALL={tree_source(tree)}', *args], check=False, env=bzimage.MAKE_ENV)
	return done.returncode == 0


def own_variants(variants: List[str]) -> List[str]:
	"""The variants of a run that are this project's kernels."""
	return [v for v in variants if v != JUDGED_AS]


def link_own(tree: str, variant: str) -> None:
	"""This project's kernel of TREE as VARIANT, its raceblk and its
	archive, where the run looks for them."""
	own, here = Session(TOP / 'build' / tree, tree, ''), Session(home(tree), tree, '')
	pairs = ((own.kernel_obj(variant).parent, here.kernel_obj(variant).parent),
		 (own.driver_of(variant), here.driver_of(variant)),
		 (own.initramfs_of(variant), here.initramfs_of(variant)))
	for target, link in pairs:
		link.parent.mkdir(parents=True, exist_ok=True)
		if link.is_symlink():
			link.unlink()
		link.symlink_to(target)


def build_own(tree: str, variants: List[str]) -> None:
	"""This project's VARIANTS of TREE, built as make KERNEL=TREE builds
	them, linked into build/debian-TREE/."""
	if variants and not make(tree, 'initramfs', f'VARIANTS={" ".join(variants)}'):
		raise Problem(tree, f'building this project\'s {" ".join(variants)} of {tree} failed (above)')
	for variant in variants:
		link_own(tree, variant)


def named(tree: str) -> str:
	name, version = release(tree)
	return f'Debian\'s linux-image-{name} ({version})'


def session(tree: str, variants: List[str], base: Session) -> Session:
	"""BASE (the image's, as --bzimage's) with the project's own variants."""
	own = own_variants(variants)
	source = f'{named(tree)} as {JUDGED_AS}' + (f', {" ".join(own)} of kernel-patches/{tree}/' if own else '')
	return dataclasses.replace(base, source=source)


def check(tree: str, build: bool) -> Session:
	"""Debian's kernel of TREE checked as --bzimage checks a kernel and,
	with BUILD, fetched first and what its guests boot built."""
	if build:
		fetch(tree)
		own_kbuild(tree)
	elif not fetched(tree):
		raise Problem(tree, f'Debian\'s kernel is not fetched yet (make test KERNEL=debian-{tree} fetches it)')
	try:
		base = bzimage.prepare(image(tree), JUDGED_AS, build, modules=home(tree) / 'modules/kernel',
				       named=named(tree), build_at=home(tree),
				       make_vars=[f'KERNEL_TARBALL={tree_source(tree)}', *compiler_overrides(tree)])
	except bzimage.Problem as problem:
		raise Problem(tree, str(problem))
	if base.tree != tree:
		raise Problem(tree, f'{named(tree)} is a kernel of {base.tree}')
	return base


def prepare(tree: str, variants: List[str], build: bool = True) -> Session:
	"""The session of a run of VARIANTS on Debian's kernel of TREE and,
	with BUILD, what its guests boot, built."""
	if JUDGED_AS not in variants:
		raise Problem(tree, f'Debian\'s kernel is {JUDGED_AS}: VARIANTS={" ".join(variants)} lacks it')
	base = check(tree, build)
	if build:
		build_own(tree, own_variants(variants))
	return session(tree, variants, base)


def results_session(tree: str, variants: List[str]) -> Session:
	"""The session whose results a run of VARIANTS on TREE's Debian
	kernel left (race-demo reads them)."""
	return session(tree, variants, Session(home(tree), tree, ''))
