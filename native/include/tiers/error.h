/**
 * @file tiers/error.h
 * @brief Error codes shared by every part of libtiers, and the macro that
 *        checks them.
 *
 * Every libtiers function that can fail returns an int: TIERS_OK (0) on
 * success, or one of the codes below.  The failing function also records a
 * message (with the file and line where it failed) that tiers_last_error()
 * returns; the message is per thread.  No libtiers function calls exit().
 */
#ifndef TIERS_ERROR_H
#define TIERS_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/** Marks the symbols libtiers exports; everything else in it is hidden. */
#define TIERS_API __attribute__((visibility("default")))

/** Return codes of libtiers functions. */
enum tiers_error_code {
  TIERS_OK = 0,              /**< success */
  TIERS_ERR_ARG = 1,         /**< an argument is invalid (NULL, out of range) */
  TIERS_ERR_NOMEM = 2,       /**< memory allocation failed */
  TIERS_ERR_SYS = 3,         /**< a system call failed; the message names it and errno */
  TIERS_ERR_HWLOC = 4,       /**< hwloc refused a request */
  TIERS_ERR_INPUT = 5,       /**< malformed input (topology XML, synthetic string, file) */
  TIERS_ERR_UNSUPPORTED = 6, /**< not possible on this machine or build */
  TIERS_ERR_STATE = 7,       /**< called in the wrong state (use after destroy, ...) */
  TIERS_ERR_MPI = 8          /**< an MPI call failed */
};

/**
 * @brief Short fixed description of an error code.
 * @param code a tiers_error_code
 * @return a static string; "unknown error" for codes not listed above.
 * Thread-safe.
 */
TIERS_API const char *tiers_strerror(int code);

/**
 * @brief The message recorded by the last failing libtiers call on this
 *        thread, or "" when none failed.
 * @return a pointer to thread-local storage, valid until the next failing
 *         call on the same thread.
 */
TIERS_API const char *tiers_last_error(void);

/**
 * @brief Where the last failing libtiers call on this thread failed, as
 *        "file.c:line" (for bug reports; users see tiers_last_error()).
 */
TIERS_API const char *tiers_last_error_where(void);

/**
 * @brief Records an error message for tiers_last_error() and returns @p code.
 *
 * Used through TIERS_ERROR(); the message is formatted like printf.
 * @return @p code, so that a function can `return tiers_error_set(...)`.
 * Thread-safe (the message is per thread).
 */
TIERS_API int tiers_error_set(int code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/** Record an error with file and line and return its code from the caller. */
#define TIERS_ERROR(code, ...) \
  return tiers_error_set((code), __FILE__, __LINE__, __VA_ARGS__)

/**
 * Call a function returning a tiers error code; on failure return that code
 * from the calling function, keeping the first message (the deepest cause).
 */
#define TIERS_CALL(expr)                       \
  do {                                         \
    int tiers_call_rc_ = (expr);               \
    if (tiers_call_rc_ != TIERS_OK)            \
      return tiers_call_rc_;                   \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
