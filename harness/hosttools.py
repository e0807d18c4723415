# SPDX-License-Identifier: GPL-2.0
"""The small C programs the harness runs on the host (harness/tsc-khz.c,
the host's build of harness/guest/blksum.c), compiled when a run needs
one that make has not built."""

import os
import pathlib
import subprocess

from session import Refusal


def built(source: pathlib.Path, tool: pathlib.Path) -> pathlib.Path:
	"""TOOL, compiled from SOURCE here when it is missing or older (under
	another name first: two runs may start at once)."""
	if not tool.is_file() or tool.stat().st_mtime < source.stat().st_mtime:
		tool.parent.mkdir(parents=True, exist_ok=True)
		tmp = tool.with_name(f'.{tool.name}.{os.getpid()}')
		done = subprocess.run(['gcc', '-O2', '-Wall', '-Wextra', '-Werror', '-o', str(tmp), str(source)],
				      capture_output=True, text=True, check=False)
		if done.returncode != 0:
			tmp.unlink(missing_ok=True)
			raise Refusal(f'cannot build {tool} from {source}: {done.stderr.strip()}')
		os.replace(tmp, tool)
	return tool
