// SPDX-License-Identifier: GPL-2.0
/*
 * helpers: the guest's C helpers (modctl, blkhold, blkprobe, blksum...)
 * as one static binary that runs the helper it is called as, a link of
 * that name in /bin, as busybox runs its applets.
 *
 * glibc linked statically costs some 680 KB a binary, and a cold guest
 * unpacks its initramfs at about 13 ms a MB under TCG: one binary, not
 * one per helper, takes 2 MB (some 26 ms) off every cold boot, and as
 * much off every snapshot.  Each helper is its own file, built with its
 * main() renamed NAME_main; make passes their names as HELPERS, an X()
 * for each.
 */
#include <stdio.h>
#include <string.h>

#define X(name) int name##_main(int argc, char **argv);
HELPERS
#undef X

static const struct helper {
	const char *name;
	int (*main)(int argc, char **argv);
} helpers[] = {
#define X(name) { #name, name##_main },
	HELPERS
#undef X
};

int main(int argc, char **argv)
{
	const char *slash = strrchr(argv[0], '/');
	const char *name = slash ? slash + 1 : argv[0];
	size_t i;

	for (i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++)
		if (strcmp(name, helpers[i].name) == 0)
			return helpers[i].main(argc, argv);
	fprintf(stderr, "helpers: no helper '%s' (run it by a helper's name:", name);
	for (i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++)
		fprintf(stderr, " %s", helpers[i].name);
	fputs(")\n", stderr);
	return 2;
}
