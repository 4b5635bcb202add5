/*
 * Scotch's error-print functions, defined by libtiers.
 *
 * Scotch reports its failures and warnings through SCOTCH_errorPrint and
 * SCOTCH_errorPrintW, which a program takes from libscotcherr (print on
 * stderr), from libscotcherrexit (print and exit) or defines itself.  A
 * library may do neither of the first two: stderr belongs to the program
 * that uses libtiers, and exit() is never a library's to call.  So libtiers
 * defines the three functions.  While a thread runs a libtiers mapping call
 * (tiers_map_scotch_enter .. leave), Scotch's messages on it are formatted
 * into a buffer of that thread and nothing is printed; a mapping function
 * that fails after a Scotch call appends the last error to
 * tiers_last_error(), and tiers_map_scotch_message() returns the last error
 * or warning.
 *
 * These definitions are exported from libtiers (default visibility; every
 * other symbol of the library is tiers_-prefixed).  Debian's shared
 * libscotch still names libscotcherr as a needed library, so both are
 * loaded, but the dynamic linker binds libscotch's references to the first
 * definition in the lookup order, and libtiers comes before the libraries
 * it depends on: in a program linked with libtiers and in a process that
 * dlopen()s it (Python's ctypes) alike.  The same order can make these
 * definitions serve a program's own Scotch calls (a Scotch user run under
 * `tiers mbc run`, which preloads a library that needs libtiers): messages
 * from Scotch calls that are not libtiers' are printed on stderr as
 * libscotcherr prints them, so such a program still sees them (except an
 * error on one of its threads while a libtiers mapping call runs on
 * another, which is kept as a possible error of that call's Scotch).
 */
#define _POSIX_C_SOURCE 200809L

#include "tiers/map.h"
#include "scotch_error.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <scotch.h>

#define SCOTCH_EXPORT __attribute__((visibility("default")))
#define MESSAGE_MAX 512

/* Per thread: how deep in libtiers mapping calls it is, the last error and
 * warning Scotch gave on it since the outermost call began, and the value
 * of stray_count then. */
static _Thread_local int depth;
static _Thread_local char last_error[MESSAGE_MAX];
static _Thread_local char last_warning[MESSAGE_MAX];
static _Thread_local uint64_t stray_seen;

/* Mapping calls in progress in the process.  Scotch may fail on a thread of
 * its own (a context left to start its threads): while a mapping call runs,
 * the last error from a thread outside any call is kept here, so that the
 * thread that called Scotch can report it when it has none of its own. */
static atomic_int active;
static pthread_mutex_t stray_lock = PTHREAD_MUTEX_INITIALIZER;
static char stray_error[MESSAGE_MAX];
static uint64_t stray_count;

/* The name SCOTCH_errorProg gave, for messages printed for the program. */
static pthread_mutex_t prog_lock = PTHREAD_MUTEX_INITIALIZER;
static char prog_name[64];

static void format_message(char *buf, const char *fmt, va_list ap)
{
  vsnprintf(buf, MESSAGE_MAX, fmt, ap);
  size_t len = strlen(buf);
  while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == ' ' || buf[len - 1] == '\r'))
    buf[--len] = '\0';
}

/* Prints a message of the program's own Scotch calls, as libscotcherr does. */
static void print_for_program(const char *kind, const char *text)
{
  char name[sizeof prog_name];
  pthread_mutex_lock(&prog_lock);
  memcpy(name, prog_name, sizeof name);
  pthread_mutex_unlock(&prog_lock);
  fprintf(stderr, "%s%s%s: %s\n", name, name[0] ? ": " : "", kind, text);
  fflush(stderr);
}

SCOTCH_EXPORT void SCOTCH_errorProg(const char *const progname)
{
  pthread_mutex_lock(&prog_lock);
  snprintf(prog_name, sizeof prog_name, "%s", progname ? progname : "");
  pthread_mutex_unlock(&prog_lock);
}

SCOTCH_EXPORT void SCOTCH_errorPrint(const char *const fmt, ...)
{
  char text[MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  format_message(text, fmt, ap);
  va_end(ap);
  if (depth > 0) {
    memcpy(last_error, text, MESSAGE_MAX);
  } else if (atomic_load(&active) > 0) {
    pthread_mutex_lock(&stray_lock);
    memcpy(stray_error, text, MESSAGE_MAX);
    stray_count++;
    pthread_mutex_unlock(&stray_lock);
  } else {
    print_for_program("ERROR", text);
  }
}

SCOTCH_EXPORT void SCOTCH_errorPrintW(const char *const fmt, ...)
{
  char text[MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  format_message(text, fmt, ap);
  va_end(ap);
  if (depth > 0)
    memcpy(last_warning, text, MESSAGE_MAX);
  else if (atomic_load(&active) == 0)
    print_for_program("WARNING", text);
  /* a warning from a thread of Scotch's own during a mapping call is
   * dropped: it did not make the call fail, and tiers_map_scotch_message()
   * is per calling thread */
}

void tiers_map_scotch_enter(void)
{
  if (depth++ > 0)
    return;
  last_error[0] = '\0';
  last_warning[0] = '\0';
  atomic_fetch_add(&active, 1);
  pthread_mutex_lock(&stray_lock);
  stray_seen = stray_count;
  pthread_mutex_unlock(&stray_lock);
}

void tiers_map_scotch_leave(void)
{
  if (--depth == 0)
    atomic_fetch_sub(&active, 1);
}

int tiers_map_scotch_fail(int code, const char *file, int line, const char *fmt, ...)
{
  char what[MESSAGE_MAX], scotch[MESSAGE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  memcpy(scotch, last_error, MESSAGE_MAX);
  if (!scotch[0]) {
    pthread_mutex_lock(&stray_lock);
    if (stray_count != stray_seen)
      memcpy(scotch, stray_error, MESSAGE_MAX);
    pthread_mutex_unlock(&stray_lock);
  }
  if (scotch[0])
    return tiers_error_set(code, file, line, "%s (Scotch: %s)", what, scotch);
  return tiers_error_set(code, file, line, "%s", what);
}

const char *tiers_map_scotch_message(int warning)
{
  return warning ? last_warning : last_error;
}
