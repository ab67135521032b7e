// check.h: the pass/fail bookkeeping of the unit tests that check one
// condition at a time (included by each test's single .c file).
#ifndef MTC_TESTS_CHECK_H
#define MTC_TESTS_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

static int npass, nfail;

// Records one check; prints what failed. Returns ok.
static bool check(bool ok, const char *what, ...) __attribute__((format(printf, 2, 3)));

static bool check(bool ok, const char *what, ...) {
  if (ok) {
    npass++;
    return true;
  }
  nfail++;
  va_list ap;
  va_start(ap, what);
  fputs("FAIL: ", stdout);
  vprintf(what, ap);
  fputc('\n', stdout);
  va_end(ap);
  return false;
}

#endif
