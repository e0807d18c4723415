# SPDX-License-Identifier: GPL-2.0
"""What a user brings to harness/run: a disk image (--image, with its
golden table from --expected or from parted) and a driver of their own
(--module, built for each variant)."""

import argparse
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
from typing import List

import golden
import hosttools
import ownmod
import plan
from session import Refusal, Session

HARNESS = plan.HARNESS
TOP = plan.TOP


def own_image_name(path: pathlib.Path) -> str:
	stem = path.name[:-len('.img')] if path.name.endswith('.img') else path.name
	return golden.OWN_PREFIX + re.sub(r'[^A-Za-z0-9._-]', '_', stem)



def sha256_of(path: pathlib.Path) -> str:
	digest = hashlib.sha256()
	with open(path, 'rb') as f:
		for block in iter(lambda: f.read(1 << 20), b''):
			digest.update(block)
	return digest.hexdigest()


def check_own_image(opts: argparse.Namespace) -> None:
	image = opts.image
	if not image.is_file() or not os.access(image, os.R_OK):
		raise Refusal(f'--image {image}: not a readable file')
	size, limit = image.stat().st_size, plan.driver_define('RACEBLK_MAX_IMAGE_MIB')
	if size > limit << 20:
		raise Refusal(f'--image {image}: {size} bytes; the ram backend holds at most {limit} MiB '
			      '(RACEBLK_MAX_IMAGE_MIB in driver/main.c)')
	if size == 0 or size % 512:
		raise Refusal(f'--image {image}: {size} bytes is not a whole number of 512-byte sectors')
	if opts.expected and not os.access(opts.expected, os.R_OK):
		raise Refusal(f'--expected {opts.expected}: cannot read')


def derive_expected(name: str, link: pathlib.Path, out: pathlib.Path, shown: pathlib.Path) -> None:
	"""The golden table as parted reads the image (through LINK, a path
	parted's ':'-separated output cannot be confused by), with parted's
	notes as comments."""
	done = subprocess.run([TOP / 'images/parted-table', link], capture_output=True, text=True, check=False)
	if done.returncode != 0:
		first = next((l for l in done.stderr.splitlines() if l.strip()), 'no output')
		raise Refusal(f'--image {shown}: parted cannot read it ({first.removeprefix("parted-table: ")}); '
			      'give its partition table with --expected FILE')
	notes = [re.sub(r'^note: ', '', l) for l in done.stderr.splitlines() if l.strip()]
	text = [f'# {name}: derived from parted -m -s IMAGE unit s print'] + [f'# {n}' for n in notes]
	out.write_text('\n'.join(text + done.stdout.splitlines()) + '\n')
	print(f'harness: {name}: no --expected, the golden table is parted\'s reading of {shown}:')
	print('\n'.join('    ' + l for l in out.read_text().splitlines()))
	if notes:
		print('harness: the notes (#) are information, not failures; a scenario whose kernel '
		      'shows another table fails and says where')


def prepare_own_image(opts: argparse.Namespace, session: Session) -> str:
	"""Its golden table, checksums and archive under build/byo/; its sha256."""
	check_own_image(opts)
	name = opts.own_name
	work = golden.own_dir(session.build, name)
	shutil.rmtree(work, ignore_errors=True)
	work.mkdir(parents=True)
	digest = sha256_of(opts.image)
	link = work / f'{name}.img'
	link.symlink_to(opts.image.resolve())
	expected = work / f'{name}.expected'
	if opts.expected:
		shutil.copyfile(opts.expected, expected)
		print(f'harness: {name}: golden table from {opts.expected}')
	else:
		derive_expected(name, link, expected, opts.image)
	# The guest's blksum, built for the host (before make built it, with --build).
	blksum = hosttools.built(HARNESS / 'guest/blksum.c', session.build / 'tools/blksum')
	with open(work / f'{name}.img.sums', 'w') as sums:
		done = subprocess.run([TOP / 'images/sums', link, expected], stdout=sums, stderr=subprocess.PIPE, text=True,
				      check=False, env={**os.environ, 'BLKSUM': str(blksum)})
	if done.returncode != 0:
		raise Refusal(f'cannot use the golden table of {opts.image}: {done.stderr.strip()}')
	archive = session.image_archive(name)
	archive.parent.mkdir(parents=True, exist_ok=True)
	subprocess.run([HARNESS / 'mkinitramfs', '--image', archive, link, expected], check=True)
	return digest



def prepare_own_module(opts: argparse.Namespace, session: Session, variants: List[str]) -> None:
	"""The user's module built for each variant, and its archive."""
	own = opts.own_module
	where = 'its source ' + str(own.source) if own.source else 'the kernel tree'
	failing = f'{own.params} {own.fail}'.strip()
	print(f'harness: --module {own.name}: {own.path} from {where}, disk {own.disk}, '
	      f'load "{own.params}", failing load "{failing}"', flush=True)
	for variant in variants:
		try:
			ownmod.prepare(own, session.kernel_obj(variant), session.own_dir, variant)
		except ownmod.Problem as problem:
			raise Refusal(str(problem))

