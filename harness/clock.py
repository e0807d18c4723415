# SPDX-License-Identifier: GPL-2.0
"""What a TCG guest's kernel is told rather than left to measure.

Under TCG a guest's TSC is the host's own counter.  Left alone, the kernel
spends about 0.3 s of each cold boot calibrating against the emulated PIT
what the host can tell it (and on a busy host the TSC's calibration fails:
Debian's 7.3 then gets no tick on microvm and hangs):

  tsc_early_khz=  the TSC's rate (harness/tsc-khz.c measures the host's)
  lpj=            each CPU's delay loop, loops per tick: the TSC's cycles
                  per jiffy (a secondary CPU calibrates it for ~80 ms)
  nolapic_timer   no local APIC timer, whose calibration and check take
                  0.22 s and cannot be skipped without a TSC deadline
                  timer, which TCG lacks: the PIT ticks, broadcast to
                  every CPU.  Only for a kernel without ACPI: on the
                  microvm's ACPI tables the PIT gives Debian's 7.3 no tick
                  at all (its first sleep never ends; acpi=off ticks).

Not tsc=reliable, which would spare the TSC sync check too (30 ms): the
kernel then marks sched_clock stable late in its boot, patching a static
key the other vCPU is running, and under multi-threaded TCG that vCPU can
still run the breakpoint after the patch is done ("Oops: int3" in
sched_clock_cpu, 1 of 3 boots of Debian's 7.3).  Left to check, the
kernel finds the vCPUs' TSCs unsynchronized and never trusts them.

Not under -icount, where the TSC counts instructions, nor under KVM.
"""

import dataclasses
import functools
import pathlib
import re
import subprocess
from typing import List, Optional

import hosttools
import plan
from session import Refusal

SOURCE = plan.HARNESS / 'tsc-khz.c'
# The host's, not a tree's: one for every build.
TOOL = plan.TOP / 'build/tools/tsc-khz'


@dataclasses.dataclass(frozen=True)
class Told:
	"""What one kernel is told: the host's TSC rate, the kernel's HZ (0:
	not known, no lpj=) and whether the PIT ticks for it (no ACPI)."""
	tsc_khz: int
	hz: int
	pit_ticks: bool

	def args(self) -> List[str]:
		return ([f'tsc_early_khz={self.tsc_khz}'] + ([f'lpj={self.tsc_khz * 1000 // self.hz}'] if self.hz else []) +
			(['nolapic_timer'] if self.pit_ticks else []))


@functools.lru_cache(maxsize=None)
def host_tsc_khz() -> int:
	"""The host's TSC rate in kHz, measured by harness/tsc-khz.c."""
	done = subprocess.run([str(hosttools.built(SOURCE, TOOL))], capture_output=True, text=True, check=False)
	if done.returncode != 0 or not done.stdout.strip().isdigit():
		raise Refusal(f'{TOOL}: cannot measure the host\'s TSC rate: {done.stderr.strip()}')
	return int(done.stdout)


def kernel_told(obj: pathlib.Path) -> Told:
	"""What a TCG guest of the kernel built in OBJ is told, by its .config
	(none: no lpj=, no nolapic_timer); read again when it changes: --build
	makes the kernel while the run goes on."""
	config = obj / '.config'
	return told_by(config, config.stat().st_mtime if config.is_file() else None)


@functools.lru_cache(maxsize=None)
def told_by(config: pathlib.Path, mtime: Optional[float]) -> Told:
	text = config.read_text() if mtime is not None else ''
	hz = re.search(r'^CONFIG_HZ=(\d+)$', text, re.M)
	acpi = re.search(r'^CONFIG_ACPI=y$', text, re.M)
	return Told(host_tsc_khz(), int(hz.group(1)) if hz else 0, bool(text) and not acpi)


def of(accel: str, obj: pathlib.Path) -> Optional[Told]:
	"""What a guest of the kernel built in OBJ is told under ACCEL; None
	under KVM."""
	return kernel_told(obj) if accel == 'tcg' else None
