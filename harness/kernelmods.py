#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""harness/kernelmods.py: the kernel's own modules a guest loads, put
beside raceblk for its initramfs (the Makefile's driver rule).

usage: harness/kernelmods.py [--dependencies] DEST ROOT PATH...

Each PATH (harness/in-tree-modules' paths: drivers/block/null_blk/
null_blk.ko) that ROOT has, as PATH or compressed (PATH.xz, .zst, .gz: a
distribution's modules), goes to DEST/NAME.ko, uncompressed (the guest's
finit_module() is given no flag to decompress).  ROOT is a kernel's
object tree, or a distribution's lib/modules/RELEASE/kernel.

--dependencies (a kernel not built here, which may build as modules what
our kernels build in): what the modules in DEST depend on (.modinfo's
depends=), and what those depend on, go to DEST/kernel/, the guest's
/lib/modules/kernel/, from which harness/guest/modctl loads them first.
No modules.dep is needed: a distribution's package has none.
"""

import gzip
import lzma
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional, Tuple

DEPENDS_RE = re.compile(rb'\0depends=([^\0]*)\0')
COMPRESSED = ('', '.xz', '.zst', '.gz')


class Problem(Exception):
	pass


def stem_and_compression(path: pathlib.Path) -> Tuple[str, str]:
	"""crc-t10dif.ko.xz: crc-t10dif and .xz."""
	stem, _, compression = path.name.partition('.ko')
	return stem, compression


def module_name(path: pathlib.Path) -> str:
	"""A module's name as depends= and /sys/module say it."""
	return stem_and_compression(path)[0].replace('-', '_')


def read_module(path: pathlib.Path) -> bytes:
	"""PATH's ELF bytes, decompressed."""
	if path.suffix == '.xz':
		return lzma.decompress(path.read_bytes())
	if path.suffix == '.gz':
		return gzip.decompress(path.read_bytes())
	if path.suffix == '.zst':
		if not shutil.which('zstd'):
			raise Problem(f'{path}: zstd-compressed, and no zstd here (apt-get install zstd)')
		return subprocess.run(['zstd', '-dc', str(path)], capture_output=True, check=True).stdout
	return path.read_bytes()


def depends(elf: bytes) -> List[str]:
	match = DEPENDS_RE.search(elf)
	return [module_name(pathlib.Path(n + '.ko')) for n in match.group(1).decode().split(',') if n] if match else []


def found(root: pathlib.Path, path: str) -> Optional[pathlib.Path]:
	"""ROOT's PATH, as it is or compressed; None if absent."""
	return next((root / (path + c) for c in COMPRESSED if (root / (path + c)).is_file()), None)


def index(root: pathlib.Path) -> Dict[str, pathlib.Path]:
	"""ROOT's modules by name."""
	return {module_name(p): p for p in sorted(root.rglob('*.ko*')) if stem_and_compression(p)[1] in COMPRESSED}


def install(elf: bytes, dest: pathlib.Path) -> None:
	dest.parent.mkdir(parents=True, exist_ok=True)
	dest.write_bytes(elf)


def stage(dest: pathlib.Path, root: pathlib.Path, paths: List[str], dependencies: bool) -> None:
	for path in paths:
		module = found(root, path)
		if module:
			install(read_module(module), dest / pathlib.Path(path).name)
	if not dependencies:
		return
	modules = index(root)
	wanted = [n for ko in sorted(dest.glob('*.ko')) for n in depends(ko.read_bytes())]
	# Also one of DEST's own (configfs): modctl looks in kernel/ alone.
	done = set()
	while wanted:
		name = wanted.pop()
		if name in done:
			continue
		done.add(name)
		if name not in modules:
			# Not the kernel's (a helper's own): finit_module() will say.
			continue
		elf = read_module(modules[name])
		# Its file's own name, as depends= says it (crc-t10dif).
		install(elf, dest / 'kernel' / (stem_and_compression(modules[name])[0] + '.ko'))
		wanted += depends(elf)


def main(argv: List[str]) -> int:
	dependencies = argv[:1] == ['--dependencies']
	argv = argv[1:] if dependencies else argv
	if len(argv) < 2:
		print('usage: harness/kernelmods.py [--dependencies] DEST ROOT PATH...', file=sys.stderr)
		return 2
	dest, root = pathlib.Path(argv[0]), pathlib.Path(argv[1])
	if not root.is_dir():
		print(f'kernelmods: {root}: no such directory', file=sys.stderr)
		return 1
	try:
		stage(dest, root, argv[2:], dependencies)
	except (Problem, OSError, lzma.LZMAError, subprocess.CalledProcessError) as problem:
		print(f'kernelmods: {problem}', file=sys.stderr)
		return 1
	return 0


if __name__ == '__main__':
	sys.exit(main(sys.argv[1:]))
