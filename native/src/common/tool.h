/*
 * Internal: helpers for the native command-line tools (tiers-topo,
 * tiers-probe-*).  Tools, unlike the library, may exit: a tool that meets
 * bad input prints one line "TOOL: error: ..." on stderr and exits with 2.
 */
#ifndef TIERS_COMMON_TOOL_H
#define TIERS_COMMON_TOOL_H

#include <stddef.h>
#include <stdint.h>

#include "common/json.h"

/* Exit status of a tool for bad input or a failed measurement. */
#define TIERS_TOOL_EXIT_USAGE 2

/* Sets the tool name used in error messages (argv[0]'s base name). */
void tiers_tool_init(const char *argv0);

/* Prints "TOOL: error: <message>" on stderr and exits with status 2. */
void tiers_tool_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Fails with the message of the last libtiers error. */
void tiers_tool_fail_last(const char *what) __attribute__((noreturn));

/**
 * @brief Answers --help: when argv (before any "--") holds --help or -h,
 *        prints @p usage on stdout and exits with status 0; returns otherwise.
 * @param argc, argv the program's arguments
 * @param usage the usage text, ending with a newline
 */
void tiers_tool_help(int argc, char **argv, const char *usage);

/* Largest size tiers_parse_size accepts: 2^53 bytes (8 PiB), so that a
 * size times a small count (arrays, ranks) cannot overflow 64 bits. */
#define TIERS_SIZE_MAX (1ull << 53)

/* Most numbers a list given to tiers_parse_int_list may expand to. */
#define TIERS_LIST_MAX (1 << 20)

/*
 * Parses a byte size such as "4096", "64K", "512M", "2G" (powers of 1024;
 * "MB"/"GB" mean the same; a trailing "B" or "iB" is accepted).  Decimal
 * digits and one point only (no sign, exponent, hex, inf or nan); at most
 * TIERS_SIZE_MAX.  Returns 0 on success, -1 when the text is not such a size.
 */
int tiers_parse_size(const char *text, uint64_t *bytes);

/* Parses a non-negative decimal integer that fits a long; -1 when the text
 * is not one (sign, spaces, trailing text, too many digits). */
int tiers_parse_long(const char *text, long *value);

/* Parses a positive finite real; -1 when the text is not one (0, negative,
 * inf, nan, out of range, trailing text). */
int tiers_parse_double(const char *text, double *value);

/*
 * Parses a list of positive integers "1,2,4" or ranges "1-4" or both
 * ("1,2,8-12"), into a freshly allocated array.  Every number is from 1 to
 * INT_MAX (never truncated); empty items ("1,,2", "1,") and lists that
 * expand to more than TIERS_LIST_MAX numbers are refused.  Returns the
 * count, or -1 on bad text.
 */
int tiers_parse_int_list(const char *text, int **values);

/* Writes the "native" block: tool name, tiers version, compiler, hwloc version. */
void tiers_tool_json_native(tiers_json_t *j);

#endif
