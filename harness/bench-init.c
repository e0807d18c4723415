// SPDX-License-Identifier: GPL-2.0
/*
 * The /init of make bench's bare boot (bare_boot_s): the least a guest
 * can do, to measure a scenario's boot against.  It says it is up and
 * reboots at once, which ends QEMU (-no-reboot), as the guest's /init
 * does after its last step.
 */
#include <sys/reboot.h>
#include <unistd.h>

int main(void)
{
	static const char up[] = "bench: bare /init up\n";
	/* The archive has no /dev/console: this may go nowhere. */
	ssize_t said = write(1, up, sizeof(up) - 1);

	(void)said;
	reboot(RB_AUTOBOOT);
	return 1;
}
