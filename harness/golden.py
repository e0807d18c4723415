# SPDX-License-Identifier: GPL-2.0
"""What the kernel must show of a disk image, read on the host: its golden
table (images/NAME.expected, or images/NAME.SERIES.expected where that
series' parsers make another table of it; a disk of the user's has its own
under build/TREE/byo/) and its checksums (NAME.img.sums, written with the
image: "number sum [stamp]" a line, 0 for the whole disk, the sum the
guest's blksum's).  The guest
reports what it read; the host compares (verdict.py).
"""

import hashlib
import pathlib
import re
from typing import Dict, List, Optional, Tuple

HARNESS = pathlib.Path(__file__).resolve().parent
TOP = HARNESS.parent

# A partition of a golden table: number, start and size in sectors.
Partition = Tuple[int, int, int]


def rows(path: pathlib.Path) -> List[List[str]]:
	"""The words of each line of PATH, comments and blank lines dropped."""
	lines = (line.split('#', 1)[0].split() for line in path.read_text().splitlines())
	return [words for words in lines if words]


# A disk image of the user's (harness/run --image) is named byo-STEM.
OWN_PREFIX = 'byo-'


def own_dir(build: pathlib.Path, name: str) -> pathlib.Path:
	"""Where a disk image of the user's has its golden table and sums."""
	return build / 'byo' / name


def disk_path(build: pathlib.Path, name: str) -> pathlib.Path:
	"""Image NAME as a file: built from images/, or brought (a link)."""
	if name.startswith(OWN_PREFIX):
		return own_dir(build, name) / f'{name}.img'
	return build / 'images' / f'{name}.img'


class Image:
	"""An image the guests read: its golden table per series, its sums."""

	def __init__(self, name: str, build: pathlib.Path, top: pathlib.Path = TOP):
		self.name = name
		self.dir = own_dir(build, name) if name.startswith(OWN_PREFIX) else top / 'images'
		self.img = disk_path(build, name)

	def table_path(self, series: str) -> pathlib.Path:
		special = self.dir / f'{self.name}.{series}.expected'
		return special if special.is_file() else self.dir / f'{self.name}.expected'

	def partitions(self, series: str) -> List[Partition]:
		return sorted((int(w[0]), int(w[1]), int(w[2])) for w in rows(self.table_path(series)))

	def sums(self) -> Dict[int, Tuple[str, str]]:
		"""Partition number (0: the disk): its blksum, and the stamp its first
		sector starts with ('' for none)."""
		path = self.img.with_name(self.img.name + '.sums')
		return {int(w[0]): (w[1], ' '.join(w[2:])) for w in rows(path)}

	def head_md5(self, size: int) -> str:
		with open(self.img, 'rb') as f:
			return hashlib.md5(f.read(size)).hexdigest()


def table_text(partitions: List[Partition]) -> str:
	"""A table as the guest reports it: "1:2048+2048 2:4096+2", or none."""
	return ' '.join(f'{n}:{start}+{size}' for n, start, size in partitions) or 'none'


def numbers_text(partitions: List[Partition]) -> str:
	return ' '.join(str(n) for n, _, _ in partitions) or 'none'


def kib_problems(table: str, kib: str) -> Optional[str]:
	"""Where /proc/partitions (KIB: "1:1024 2:1") disagrees with sysfs's
	TABLE; None when it does not (a size of 16 digits and more, as a
	partition past the end can have, is not compared)."""
	sizes = {p.split(':')[0]: p.split('+')[1] for p in table.split() if '+' in p}
	said = dict(p.split(':', 1) for p in kib.split() if ':' in p)
	for number, size in sizes.items():
		if len(size) < 16 and said.get(number) != str(int(size) // 2):
			return f'p{number}: /proc/partitions says {said.get(number, "nothing")} KiB, sysfs {size} sectors'
	return None


# A difference lists this many runs of partitions at most, then a count.
SHOWN_RUNS = 8


TABLE_WORD_RE = re.compile(r'^[0-9]+:[0-9]+\+[0-9]+$')


def is_table(text: str) -> bool:
	"""TEXT is a table as the guest reports it, not what it says instead
	("no raceblk0": the disk never came)."""
	return text == 'none' or bool(text.split()) and all(TABLE_WORD_RE.match(w) for w in text.split())


def parse_table(text: str) -> Dict[int, str]:
	"""A table as the guest reports it ("1:2048+2048 2:4096+2", or none):
	each partition's number and "start+size"."""
	found: Dict[int, str] = {}
	for word in text.split():
		number, sep, extent = word.partition(':')
		if sep and number.isdigit():
			found.setdefault(int(number), extent)
	return found


def runs_text(entries: List[Tuple[int, str]], before: Dict[int, str]) -> List[str]:
	"""ENTRIES (number, "start+size"), consecutive numbers with the same
	extent as one run: "6-255: 250 more of 5:4159+512" when the run repeats
	the partition before it (BEFORE: the table it is from)."""
	runs: List[List] = []
	for number, extent in entries:
		if runs and runs[-1][1] == number - 1 and runs[-1][2] == extent:
			runs[-1][1] = number
		else:
			runs.append([number, number, extent])
	texts = []
	for first, last, extent in runs:
		if first == last:
			texts.append(f'{first}:{extent}')
		elif before.get(first - 1) == extent:
			texts.append(f'{first}-{last}: {last - first + 1} more of {first - 1}:{extent}')
		else:
			texts.append(f'{first}-{last}: {last - first + 1} of {extent}')
	return capped(texts)


def capped(texts: List[str]) -> List[str]:
	"""TEXTS, the ones past SHOWN_RUNS said as a count."""
	return texts[:SHOWN_RUNS] + ([f'and {len(texts) - SHOWN_RUNS} more'] if len(texts) > SHOWN_RUNS else [])


def table_difference(observed: str, expected: str) -> str:
	"""How the table OBSERVED differs from EXPECTED: what is missing, what
	is extra and what changed, a long run of repeats said once ('' when
	they are the same)."""
	seen, wanted = parse_table(observed), parse_table(expected)
	missing = [(n, e) for n, e in sorted(wanted.items()) if n not in seen]
	extra = [(n, e) for n, e in sorted(seen.items()) if n not in wanted]
	changed = [f'{n}:{wanted[n]} is {seen[n]}' for n in sorted(wanted) if n in seen and seen[n] != wanted[n]]
	parts = []
	if missing:
		parts.append('missing ' + ', '.join(runs_text(missing, wanted)))
	if extra:
		parts.append('extra ' + ', '.join(runs_text(extra, seen)))
	if changed:
		parts.append('changed ' + ', '.join(capped(changed)))
	return '; '.join(parts)
