// SPDX-License-Identifier: GPL-2.0
/*
 * imgpatch IMAGE [COMMAND ...]: patch a disk image in place, one command per
 * argument (or per line on stdin when there is none).  Hostile images are a
 * good image plus a documented byte patch made with this, never a
 * hand-edited blob; good GPT images use it to pin their GUIDs.
 *
 * A location is SECTOR:BYTE (512-byte sectors; a negative SECTOR counts from
 * the end of the image, -1 is the last one).  Numbers are decimal or 0x-hex.
 *
 *   le16|le32|le64 LOC VALUE   store VALUE little-endian at LOC
 *   bytes LOC HH HH ...        store these bytes at LOC
 *   zero LOC LENGTH            store LENGTH zero bytes at LOC
 *   gpt-guids SEED             give the disk and every used GPT entry a GUID
 *                              derived from SEED (parted picks random ones),
 *                              in the primary and the backup table, then
 *                              recompute both tables' CRCs
 *   gpt-crc                    recompute both GPT tables' CRCs only
 *
 * `#` starts a comment.  The image never grows: a location past its end is
 * an error, and nothing is written unless every command parses.  Every
 * offset and size is computed with overflow checks: a hostile patch file
 * is refused with a message, never applied in part.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECTOR		512
#define GPT_HEADER_CRC	16
#define GPT_ALTERNATE	32
#define GPT_DISK_GUID	56
#define GPT_ENTRIES_LBA	72
#define GPT_NR_ENTRIES	80
#define GPT_ENTRY_SIZE	84
#define GPT_ENTRIES_CRC	88
#define GPT_HEADER_SIZE	12
#define GPT_ENTRY_GUID	16
/* UEFI: an entry is 128 << n bytes; what we write of one must fit in it. */
#define GPT_MIN_ENTRY	128

static unsigned char *image;
static size_t image_size;
static const char *image_path;
static int line_nr;

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "imgpatch: %s", image_path);
	if (line_nr)
		fprintf(stderr, ": command %d", line_nr);
	fputs(": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t number(const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || *end)
		die("'%s' is not a number", s);
	return v;
}

static unsigned char hex_byte(const char *s)
{
	char *end;
	unsigned long b = strtoul(s, &end, 16);

	if (end == s || *end || b > 0xff)
		die("'%s' is not a hex byte", s);
	return b;
}

/* OFFSET + LENGTH bytes lie inside the image (no wrap-around). */
static bool inside(uint64_t offset, uint64_t length)
{
	uint64_t end;

	return !__builtin_add_overflow(offset, length, &end) && end <= image_size;
}

/* location "SECTOR:BYTE" -> byte offset, with LENGTH bytes inside the image. */
static size_t location(const char *s, uint64_t length)
{
	long long sector;
	uint64_t byte, offset;
	char *end;

	errno = 0;
	sector = strtoll(s, &end, 0);
	if (errno || end == s || *end != ':')
		die("'%s' is not a SECTOR:BYTE location", s);
	byte = number(end + 1);
	if (sector < 0 && -(sector + 1) < (long long)(image_size / SECTOR))
		sector += image_size / SECTOR;
	if (sector < 0 || __builtin_mul_overflow((uint64_t)sector, SECTOR, &offset) ||
	    __builtin_add_overflow(offset, byte, &offset) || !inside(offset, length))
		die("%s (+%" PRIu64 " bytes) is outside the %zu-byte image", s, length, image_size);
	return offset;
}

static void put_le(size_t offset, uint64_t value, int bytes)
{
	for (int i = 0; i < bytes; i++)
		image[offset + i] = value >> (8 * i);
}

static uint64_t get_le(size_t offset, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | image[offset + i];
	return v;
}

static uint32_t crc32(const unsigned char *p, size_t n)
{
	uint32_t crc = ~0u;

	while (n--) {
		crc ^= *p++;
		for (int k = 0; k < 8; k++)
			crc = crc >> 1 ^ (0xedb88320u & -(crc & 1));
	}
	return ~crc;
}

/* FNV-1a of SEED and INDEX, spread over a version-4 GUID. */
static void derive_guid(unsigned char guid[16], const char *seed, unsigned int index)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const char *c = seed; *c; c++)
		h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
	for (int i = 0; i < 16; i++) {
		h = (h ^ (index + i)) * 0x100000001b3ull;
		guid[i] = h >> 32;
	}
	guid[7] = (guid[7] & 0x0f) | 0x40;	/* version 4, mixed-endian field */
	guid[8] = (guid[8] & 0x3f) | 0x80;	/* RFC 4122 variant */
}

/*
 * The GPT header at LBA, checked enough that patching it cannot overrun:
 * the header in a sector of the image, its entry array inside the image,
 * each entry at least GPT_MIN_ENTRY bytes.
 */
static size_t gpt_header(uint64_t lba, const char *which)
{
	uint64_t hdr, entries, bytes, size = 0;

	if (lba == 0 || __builtin_mul_overflow(lba, SECTOR, &hdr) || !inside(hdr, SECTOR) ||
	    memcmp(image + hdr, "EFI PART", 8))
		die("no %s GPT header at LBA %" PRIu64, which, lba);
	if (get_le(hdr + GPT_HEADER_SIZE, 4) > SECTOR)
		die("the %s GPT header's size %" PRIu64 " is over a sector", which,
		    get_le(hdr + GPT_HEADER_SIZE, 4));
	size = get_le(hdr + GPT_ENTRY_SIZE, 4);
	if (size < GPT_MIN_ENTRY || size % 8)
		die("the %s GPT header's entry size %" PRIu64 " is not a multiple of 8 from %d",
		    which, size, GPT_MIN_ENTRY);
	if (__builtin_mul_overflow(get_le(hdr + GPT_ENTRIES_LBA, 8), SECTOR, &entries) ||
	    __builtin_mul_overflow(get_le(hdr + GPT_NR_ENTRIES, 4), size, &bytes) ||
	    !inside(entries, bytes))
		die("the %s GPT header's entry array is outside the image", which);
	return hdr;
}

static void gpt_fix_crcs(size_t hdr)
{
	size_t entries = get_le(hdr + GPT_ENTRIES_LBA, 8) * SECTOR;
	size_t bytes = get_le(hdr + GPT_NR_ENTRIES, 4) * get_le(hdr + GPT_ENTRY_SIZE, 4);

	put_le(hdr + GPT_ENTRIES_CRC, crc32(image + entries, bytes), 4);
	put_le(hdr + GPT_HEADER_CRC, 0, 4);
	put_le(hdr + GPT_HEADER_CRC,
	       crc32(image + hdr, get_le(hdr + GPT_HEADER_SIZE, 4)), 4);
}

static void gpt_pin_guids(size_t hdr, const char *seed)
{
	size_t entries = get_le(hdr + GPT_ENTRIES_LBA, 8) * SECTOR;
	size_t size = get_le(hdr + GPT_ENTRY_SIZE, 4);
	uint32_t n = get_le(hdr + GPT_NR_ENTRIES, 4);
	static const unsigned char unused[16];

	derive_guid(image + hdr + GPT_DISK_GUID, seed, 0);
	for (uint32_t i = 0; i < n; i++) {
		unsigned char *entry = image + entries + i * size;

		if (memcmp(entry, unused, sizeof(unused)))
			derive_guid(entry + GPT_ENTRY_GUID, seed, i + 1);
	}
}

/* gpt-guids SEED or gpt-crc (SEED NULL): both tables, primary first. */
static void gpt_update(const char *seed)
{
	size_t primary = gpt_header(1, "primary");
	size_t backup = gpt_header(get_le(primary + GPT_ALTERNATE, 8), "backup");

	for (size_t hdr = primary;; hdr = backup) {
		if (seed)
			gpt_pin_guids(hdr, seed);
		gpt_fix_crcs(hdr);
		if (hdr == backup)
			break;
	}
}

static void run(char *line)
{
	char *argv[600];
	int argc = 0;
	char *hash = strchr(line, '#');

	if (hash)
		*hash = '\0';
	for (char *tok = strtok(line, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
		if (argc == (int)(sizeof(argv) / sizeof(argv[0])))
			die("too many words");
		argv[argc++] = tok;
	}
	if (!argc)
		return;
	if (argc == 3 && (!strcmp(argv[0], "le16") || !strcmp(argv[0], "le32") ||
			  !strcmp(argv[0], "le64"))) {
		int bytes = atoi(argv[0] + 2) / 8;
		uint64_t value = number(argv[2]);

		if (bytes < 8 && value >> (8 * bytes))
			die("%s does not fit in %s", argv[2], argv[0]);
		put_le(location(argv[1], bytes), value, bytes);
	} else if (argc >= 3 && !strcmp(argv[0], "bytes")) {
		size_t offset = location(argv[1], argc - 2);
		unsigned char bytes[sizeof(argv) / sizeof(argv[0])];

		/* Every byte parses before the first is stored. */
		for (int i = 2; i < argc; i++)
			bytes[i - 2] = hex_byte(argv[i]);
		memcpy(image + offset, bytes, argc - 2);
	} else if (argc == 3 && !strcmp(argv[0], "zero")) {
		size_t length = number(argv[2]);

		memset(image + location(argv[1], length), 0, length);
	} else if (argc == 2 && !strcmp(argv[0], "gpt-guids")) {
		gpt_update(argv[1]);
	} else if (argc == 1 && !strcmp(argv[0], "gpt-crc")) {
		gpt_update(NULL);
	} else {
		die("cannot parse '%s' (see the comment at the top of imgpatch.c)", argv[0]);
	}
}

static void load(const char *path)
{
	FILE *f = fopen(path, "rb");
	long size;

	if (!f || fseek(f, 0, SEEK_END) || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET))
		die("cannot open: %s", strerror(errno));
	image_size = size;
	image = malloc(image_size ? image_size : 1);
	if (!image || fread(image, 1, image_size, f) != image_size)
		die("cannot read: %s", strerror(errno));
	fclose(f);
}

static void save(const char *path)
{
	FILE *f = fopen(path, "r+b");

	if (!f || fwrite(image, 1, image_size, f) != image_size || fclose(f))
		die("cannot write: %s", strerror(errno));
}

int main(int argc, char **argv)
{
	char line[4096];

	if (argc < 2) {
		fprintf(stderr, "usage: imgpatch IMAGE [COMMAND ...] (commands on stdin if none)\n");
		return 2;
	}
	image_path = argv[1];
	load(image_path);
	if (argc > 2) {
		for (int i = 2; i < argc; i++) {
			line_nr = i - 1;
			snprintf(line, sizeof(line), "%s", argv[i]);
			run(line);
		}
	} else {
		while (fgets(line, sizeof(line), stdin)) {
			line_nr++;
			run(line);
		}
	}
	save(image_path);
	return 0;
}
