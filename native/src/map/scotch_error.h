/*
 * Scotch's diagnostics inside libtiers (internal to native/src/map).
 *
 * libtiers defines Scotch's error-print functions itself (scotch_error.c)
 * instead of linking libscotcherr, which prints on stderr: Scotch's messages
 * are kept per thread and the mapping functions that fail after a Scotch
 * call append the last one to tiers_last_error().
 */
#ifndef TIERS_MAP_SCOTCH_ERROR_H
#define TIERS_MAP_SCOTCH_ERROR_H

/* Brackets a public mapping function (calls nest): the outermost enter
 * forgets the messages Scotch gave so far on this thread, and until the
 * matching leave Scotch's messages on this thread are kept, not printed. */
void tiers_map_scotch_enter(void);
void tiers_map_scotch_leave(void);

/* Records the error code with a printf-style message, as tiers_error_set(),
 * followed by " (Scotch: <message>)" when Scotch reported an error since the
 * outermost tiers_map_scotch_enter(); returns code. */
int tiers_map_scotch_fail(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
