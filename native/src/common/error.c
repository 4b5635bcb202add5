#include "tiers/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_message[512];
static _Thread_local char last_where[128];

const char *tiers_strerror(int code)
{
  switch (code) {
  case TIERS_OK: return "success";
  case TIERS_ERR_ARG: return "invalid argument";
  case TIERS_ERR_NOMEM: return "out of memory";
  case TIERS_ERR_SYS: return "system call failed";
  case TIERS_ERR_HWLOC: return "hwloc error";
  case TIERS_ERR_INPUT: return "malformed input";
  case TIERS_ERR_UNSUPPORTED: return "not supported";
  case TIERS_ERR_STATE: return "invalid state";
  case TIERS_ERR_MPI: return "MPI error";
  default: return "unknown error";
  }
}

const char *tiers_last_error(void) { return last_message; }

const char *tiers_last_error_where(void) { return last_where; }

int tiers_error_set(int code, const char *file, int line, const char *fmt, ...)
{
  const char *base = strrchr(file, '/');
  base = base ? base + 1 : file;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_message, sizeof last_message, fmt, ap);
  va_end(ap);
  snprintf(last_where, sizeof last_where, "%s:%d", base, line);
  return code;
}
