# SPDX-License-Identifier: GPL-2.0
"""One run's setting: the tree, what its kernels are built from and where
its builds and results are.  make passes them in the environment
(KERNEL, RACEBLK_BUILD, RACEBLK_SOURCE); harness/run --bzimage makes one
of its own for a kernel of the user's.  Nothing here is read at import.
"""

import dataclasses
import os
import pathlib
from typing import Dict, Tuple

import golden
import plan
from results import RESULTS_FILE

TOP = plan.TOP


class Refusal(Exception):
	"""Bad input or setup: a clear message, exit 2, nothing lost."""


@dataclasses.dataclass(frozen=True)
class Session:
	build: pathlib.Path		# build/TREE, or a --bzimage kernel's
	tree: str
	source: str			# what the kernels are built from, for headers
	# The variants whose kernel was not built here (--bzimage's, a
	# distribution's): the modules built for another kernel (the vermagic
	# cases) are not built for it; the options it lacks that some cases
	# need (kernel-patches/config/case-needs), each with what it has
	# instead; what its command line needs.
	foreign: Tuple[str, ...] = ()
	lacks: Tuple[Tuple[str, str], ...] = ()
	boot_args: Tuple[str, ...] = ()

	@classmethod
	def from_environment(cls) -> 'Session':
		"""make's session; RACEBLK_FOREIGN names variants to take as not
		built here (the self-tests' fake builds)."""
		tree = plan.current_tree()
		build = pathlib.Path(os.environ.get('RACEBLK_BUILD') or TOP / 'build' / tree)
		return cls(build, tree, plan.source_name(), tuple(os.environ.get('RACEBLK_FOREIGN', '').split()))

	def lacks_of(self, variant: str) -> Dict[str, str]:
		return dict(self.lacks) if variant in self.foreign else {}

	def boot_args_of(self, variant: str) -> Tuple[str, ...]:
		return self.boot_args if variant in self.foreign else ()

	@property
	def results(self) -> pathlib.Path:
		return self.build / 'results'

	@property
	def results_json(self) -> pathlib.Path:
		return self.results / RESULTS_FILE

	@property
	def accel_file(self) -> pathlib.Path:
		"""The accelerator the last run chose (kvm or tcg)."""
		return self.build / 'accel'

	def cached_accel(self) -> str:
		"""That accelerator, TCG if no run chose one."""
		return self.accel_file.read_text().strip() if self.accel_file.is_file() else 'tcg'

	def snapshot_dir(self, variant: str, machine: str) -> pathlib.Path:
		# The default machine's under the variant's name, as it always was.
		return self.build / 'snapshots' / (variant if machine == plan.DEFAULT_MACHINE else f'{variant}@{machine}')

	def kernel_src(self, variant: str) -> pathlib.Path:
		return self.build / 'kernel' / variant / 'src'

	def kernel_obj(self, variant: str) -> pathlib.Path:
		return self.build / 'kernel' / variant / 'obj'

	def driver_of(self, variant: str) -> pathlib.Path:
		"""Where raceblk.ko and its helpers for VARIANT are built."""
		return self.build / 'driver' / variant

	@property
	def own_dir(self) -> pathlib.Path:
		"""harness/run --module's builds of the user's module."""
		return self.build / 'own'

	@property
	def shown(self) -> str:
		"""The build directory as messages show it."""
		return os.path.relpath(self.build, TOP) if self.build.is_relative_to(TOP) else str(self.build)

	def kernel_of(self, variant: str) -> pathlib.Path:
		return self.kernel_obj(variant) / 'arch/x86/boot/bzImage'

	def initramfs_of(self, variant: str) -> pathlib.Path:
		return self.build / 'initramfs' / f'{variant}.cpio'

	def disk_of(self, image: str) -> pathlib.Path:
		"""IMAGE as a disk QEMU attaches (machine=pc-ide): built, or brought."""
		return golden.disk_path(self.build, image)

	def image_archive(self, image: str) -> pathlib.Path:
		return self.build / 'initramfs/images' / f'{image}.cpio.gz'

	def foreign_archive(self, variant: str) -> pathlib.Path:
		"""VARIANT's modules built for another kernel (harness/foreign-modules)."""
		return self.build / 'initramfs/foreign' / f'{variant}.cpio.gz'

	def own_archive(self, variant: str) -> pathlib.Path:
		"""harness/run --module's archive of the user's module for VARIANT."""
		return self.own_dir / f'{variant}.cpio.gz'
