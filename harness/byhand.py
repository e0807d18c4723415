# SPDX-License-Identifier: GPL-2.0
"""A scenario for a person at the terminal: --shell stops it at its hold
point with a shell on the guest's console, --gdb starts its guest with a
gdb stub (harness/run; a scenario's qemu.cmd boots it again by hand)."""

import argparse
import dataclasses
import os
from typing import List

import plan
from plan import Scenario
from session import Refusal, Session

TOP = plan.TOP
# The steps after which --shell stops a case: raceblk's init held, or the
# user's module (--module) failed with its disk held.
HOLD_POINTS = ('held', 'own_held')


def interactive_scenario(chosen: List[Scenario], shell: bool) -> Scenario:
	"""The one scenario --shell or --gdb runs; with --shell, a shell step
	right after its first held step (init waits there)."""
	if len(chosen) != 1:
		names = ', '.join(s.name for s in chosen[:5]) + (', ...' if len(chosen) > 5 else '')
		raise Refusal(f'--shell and --gdb run one scenario, and {len(chosen)} match'
			      + (f' ({names})' if chosen else '') + ': name one with --filter VARIANT/ID/IMAGE '
			      '(harness/run --list lists them)')
	scenario = chosen[0]
	if not shell:
		return scenario
	held = [i for i, name in enumerate(scenario.guest_steps) if name in HOLD_POINTS]
	if not held:
		raise Refusal(f'case {scenario.id} has no hold point (a held step): --shell stops there; '
			      'cases with one: grep -l held harness/cases, or params hold=POINT')
	steps = scenario.steps[:held[0] + 1] + ('shell',) + scenario.steps[held[0] + 1:]
	# Init waits at the hold point as long as raceblk allows, not the
	# case's seconds.
	params = tuple(p for p in scenario.params if not p.startswith('hold_timeout_ms='))
	return dataclasses.replace(scenario, steps=steps, params=params + (f'hold_timeout_ms={max_hold_ms()}',))


def max_hold_ms() -> int:
	"""raceblk's longest hold."""
	return plan.driver_define('RACEBLK_MAX_HOLD_MS')


def say_interactive(opts: argparse.Namespace, session: Session, scenario: Scenario) -> None:
	"""What --shell and --gdb give, before the guest boots."""
	if opts.gdb:
		obj = session.kernel_obj(scenario.variant)
		config = (obj / '.config').read_text() if (obj / '.config').is_file() else ''
		shown = os.path.relpath(obj, TOP) if obj.is_relative_to(TOP) else str(obj)
		print(f'harness: gdb stub on localhost:{opts.gdb} (kernel booted with nokaslr); attach with\n'
		      f"  gdb {shown}/vmlinux -ex 'target remote localhost:{opts.gdb}'")
		if 'CONFIG_DEBUG_INFO=y' not in config:
			print(f'harness: {scenario.variant} has no debug info: gdb knows its symbols, not its '
			      f'source lines; {plan.series_of(scenario.variant)}-gdb has them '
			      f'(make initramfs VARIANTS={plan.series_of(scenario.variant)}-gdb)')
	if opts.shell:
		print('harness: the guest\'s console is this terminal.  At the hold point a shell starts '
		      f'there; init waits until it exits (at most {max_hold_ms() // 60000} minutes), then the '
		      'case goes on.  Ctrl-a x ends QEMU.', flush=True)
