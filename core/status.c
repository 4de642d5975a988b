/* Status table, thread-local error messages and version. */
#include "core_impl.h"

#include <stdio.h>
#include <string.h>

#define NG_ERR_MSG_CAP 1024

static _Thread_local char tls_msg[NG_ERR_MSG_CAP];

const char *ng_version(void) {
#define NG_STR2_(x) #x
#define NG_STR_(x) NG_STR2_(x)
  return NG_STR_(NG_VERSION_MAJOR) "." NG_STR_(NG_VERSION_MINOR) "." NG_STR_(NG_VERSION_PATCH);
#undef NG_STR_
#undef NG_STR2_
}

const char *ng_status_name(ng_status status) {
  switch (status) {
#define NG_STATUS_NAME_(name, desc)                                                                \
  case NG_##name:                                                                                  \
    return #name;
    NG_STATUS_MAP(NG_STATUS_NAME_)
#undef NG_STATUS_NAME_
  default:
    return "UNKNOWN";
  }
}

const char *ng_status_str(ng_status status) {
  switch (status) {
#define NG_STATUS_STR_(name, desc)                                                                 \
  case NG_##name:                                                                                  \
    return desc;
    NG_STATUS_MAP(NG_STATUS_STR_)
#undef NG_STATUS_STR_
  default:
    return "unknown status";
  }
}

const char *ng_last_error(void) {
  return tls_msg;
}

ng_status ng__err(ng_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
  va_end(ap);
  return status;
}

ng_status ng__err_errno(ng_status status, int errnum, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof tls_msg)
    snprintf(tls_msg + n, sizeof tls_msg - (size_t)n, ": %s", strerror(errnum));
  return status;
}

void ng__err_prefix(const char *fmt, ...) {
  char prefix[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  size_t plen = strlen(prefix), olen = strlen(tls_msg);
  if (plen + 2 >= sizeof tls_msg)
    return;
  if (plen + 2 + olen >= sizeof tls_msg)
    olen = sizeof tls_msg - plen - 3;
  memmove(tls_msg + plen + 2, tls_msg, olen);
  tls_msg[plen + 2 + olen] = '\0';
  memcpy(tls_msg, prefix, plen);
  tls_msg[plen] = ':';
  tls_msg[plen + 1] = ' ';
}

void ng__strlcpy(char *dst, const char *src, size_t cap) {
  if (cap == 0)
    return;
  size_t n = strlen(src);
  if (n >= cap)
    n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}
