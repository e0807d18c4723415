# SPDX-License-Identifier: GPL-2.0
"""What a TCG guest's kernel is told rather than left to measure.

Under TCG a guest's TSC is the host's own counter, and every vCPU reads
the same one.  Left alone, the kernel spends about 0.3 s of each cold boot
calibrating against the emulated PIT what the host can tell it (and on a
busy host the TSC's calibration fails: Debian's 7.3 then gets no tick on
microvm and hangs):

  tsc_early_khz=  the TSC's rate (harness/tsc-khz.c measures the host's)
  tsc=reliable    no TSC sync check at CPU bring-up and no clocksource
                  watchdog: the vCPUs' TSCs are one counter
  lpj=            each CPU's delay loop, loops per tick: the TSC's cycles
                  per jiffy (a secondary CPU calibrates it for ~80 ms)
  nolapic_timer   no local APIC timer, whose calibration takes ~0.2 s and
                  cannot be skipped without a TSC deadline timer, which TCG
                  lacks: the PIT ticks, broadcast to every CPU

Not under -icount, where the TSC counts instructions, nor under KVM.
"""

import functools
import pathlib
import re
import subprocess
from typing import List, Optional, Tuple

import bzimage
import plan
from session import Refusal

TOOL = plan.TOP / 'build/tools/tsc-khz'


@functools.lru_cache(maxsize=None)
def host_tsc_khz() -> int:
	"""The host's TSC rate in kHz, by the tool make tsc-khz builds (made
	here the first time)."""
	if not TOOL.is_file():
		subprocess.run(['make', '--no-print-directory', '-s', '-C', str(plan.TOP), 'tsc-khz'],
			       stdout=subprocess.DEVNULL, check=False, env=bzimage.MAKE_ENV)
	done = subprocess.run([str(TOOL)], capture_output=True, text=True, check=False) if TOOL.is_file() else None
	if done is None or done.returncode != 0 or not done.stdout.strip().isdigit():
		raise Refusal(f'{TOOL}: cannot measure the host\'s TSC rate (make tsc-khz)')
	return int(done.stdout)


@functools.lru_cache(maxsize=None)
def kernel_hz(obj: pathlib.Path) -> int:
	"""CONFIG_HZ of the kernel built in OBJ; 0 when its .config does not say."""
	config = obj / '.config'
	found = re.search(r'^CONFIG_HZ=(\d+)$', config.read_text(), re.M) if config.is_file() else None
	return int(found.group(1)) if found else 0


def told(tsc_khz: int, hz: int) -> List[str]:
	"""The command line that tells a kernel of HZ a TSC of TSC_KHZ (no
	lpj= when HZ is not known)."""
	return ([f'tsc_early_khz={tsc_khz}', 'tsc=reliable'] + ([f'lpj={tsc_khz * 1000 // hz}'] if hz else []) +
		['nolapic_timer'])



def of(accel: str, obj: pathlib.Path) -> Optional[Tuple[int, int]]:
	"""What a guest of the kernel built in OBJ is told under ACCEL: the
	host's TSC rate and the kernel's HZ; None under KVM."""
	return (host_tsc_khz(), kernel_hz(obj)) if accel == 'tcg' else None
