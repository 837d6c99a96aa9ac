/*
 * The desktop clock a replay sets (decision 201): preloaded (LD_PRELOAD) into every
 * program of a sandbox whose profile asks for it.
 *
 * The worker keeps a 32-byte record in a file it updates in place
 * (`DESKGYM_CLOCK_FILE`, mapped shared): two offsets in nanoseconds, one for the wall
 * clocks (CLOCK_REALTIME and kin: may be negative, a replay starts on the original's
 * date) and one for the clocks that count up from boot (CLOCK_MONOTONIC, BOOTTIME),
 * and a hold: the host's CLOCK_MONOTONIC instant at which every desktop clock stops
 * until the worker moves it (0: none). A replay holds the clocks at the time the
 * original's next action came, so an app whose timer waits for a pause in the input
 * (LibreOffice updates its toolbars 200 ms after the last key) sees the original's
 * pauses however slowly the replay runs (decision 211). The worker writes the record
 * under a sequence count (odd while it writes), so a read never mixes two versions
 * and no desktop clock goes back. A read costs a vDSO read and two loads (a second
 * vDSO read while held); no lock, no file read, no allocation, so it is safe from
 * signal handlers and from inside an allocator (Chromium's PartitionAlloc reads the
 * clock under its lock).
 *
 * Waits with an absolute deadline (condition variables, semaphores, timed locks,
 * clock_nanosleep, timerfds) get the deadline back in the kernel's time, so a
 * program that computes "now + 16 ms" on the desktop's clock waits 16 ms; a deadline
 * past a hold waits at least what it still has to go, and at least 1 ms, in the
 * kernel's time (a held clock would otherwise find it passed and spin). Relative
 * timeouts (poll, epoll, nanosleep) need nothing: what a program computes from a
 * held clock is never shorter than what is left.
 *
 * This file must stay free of anything that allocates or locks on the clock path.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define NSEC 1000000000LL

/* The file's layout: native-endian 64-bit words, as `src/clock.rs` writes them. */
struct offsets {
  uint64_t seq; /* odd while the worker writes the rest */
  int64_t wall;
  int64_t mono;
  int64_t hold; /* host CLOCK_MONOTONIC ns the desktop clocks stop at; 0: none */
};

static const struct offsets zero;
/* The mapped file, or &zero when there is none (the clock is then the host's). */
static const struct offsets *_Atomic mapped;

static const struct offsets *offsets(void) {
  const struct offsets *p = __atomic_load_n(&mapped, __ATOMIC_ACQUIRE);
  if (p) return p;
  const struct offsets *m = &zero;
  const char *path = getenv("DESKGYM_CLOCK_FILE");
  int fd = path ? open(path, O_RDONLY | O_CLOEXEC) : -1;
  if (fd >= 0) {
    void *a = mmap(NULL, sizeof(struct offsets), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (a != MAP_FAILED) m = a;
  }
  const struct offsets *expected = NULL;
  if (!__atomic_compare_exchange_n(&mapped, &expected, m, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE)) {
    if (m != &zero) munmap((void *)m, sizeof(struct offsets));
    return expected;
  }
  return m;
}

/* Whether `clk` counts from boot (1), is a wall clock (0), or is neither (-1: CPU time
 * and unknown clocks, which the desktop's clock leaves alone). */
static int family(clockid_t clk) {
  switch (clk) {
  case CLOCK_REALTIME:
  case CLOCK_REALTIME_COARSE:
  case CLOCK_REALTIME_ALARM:
  case CLOCK_TAI:
    return 0;
  case CLOCK_MONOTONIC:
  case CLOCK_MONOTONIC_RAW:
  case CLOCK_MONOTONIC_COARSE:
  case CLOCK_BOOTTIME:
  case CLOCK_BOOTTIME_ALARM:
    return 1;
  default:
    return -1;
  }
}

/* One consistent reading of the record: `clk`'s offset and the hold. */
static void snapshot(clockid_t clk, int64_t *offset, int64_t *hold) {
  const struct offsets *o = offsets();
  int f = family(clk);
  for (;;) {
    uint64_t seq = __atomic_load_n(&o->seq, __ATOMIC_ACQUIRE);
    if (seq & 1) continue;
    int64_t off = f == 0 ? __atomic_load_n(&o->wall, __ATOMIC_RELAXED)
                  : f == 1 ? __atomic_load_n(&o->mono, __ATOMIC_RELAXED)
                           : 0;
    int64_t h = __atomic_load_n(&o->hold, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&o->seq, __ATOMIC_RELAXED) == seq) {
      *offset = off;
      *hold = f < 0 ? 0 : h;
      return;
    }
  }
}

static void shift(struct timespec *t, int64_t by) {
  int64_t ns = (int64_t)t->tv_sec * NSEC + t->tv_nsec + by;
  if (ns < 0) ns = 0;
  t->tv_sec = ns / NSEC;
  t->tv_nsec = ns % NSEC;
}

static int64_t ns_of(const struct timespec *t) {
  return (int64_t)t->tv_sec * NSEC + t->tv_nsec;
}

static int host_time(clockid_t clk, struct timespec *tp);

/* How far the desktop's clocks stand behind their offsets now: the time since the
 * hold, if there is one and it has passed. */
static int64_t held_for(int64_t hold) {
  struct timespec m;
  if (!hold || host_time(CLOCK_MONOTONIC, &m) != 0) return 0;
  int64_t d = ns_of(&m) - hold;
  return d > 0 ? d : 0;
}

/* `abs` on `clk`'s desktop clock, as the kernel's time (NULL stays NULL). Past a
 * hold, at least what the deadline still has to go from the held time, and 1 ms. */
static const struct timespec *real_deadline(clockid_t clk, const struct timespec *abs,
                                            struct timespec *buf) {
  if (!abs) return NULL;
  int64_t off, hold;
  snapshot(clk, &off, &hold);
  *buf = *abs;
  shift(buf, -off);
  int64_t held = held_for(hold);
  if (held) {
    struct timespec now;
    if (host_time(clk, &now) == 0) {
      int64_t left = ns_of(abs) - (ns_of(&now) + off - held);
      if (left > 0) {
        int64_t at = ns_of(&now) + (left > 1000000 ? left : 1000000);
        if (at > ns_of(buf)) {
          buf->tv_sec = at / NSEC;
          buf->tv_nsec = at % NSEC;
        }
      }
    }
  }
  return buf;
}

/* The next definition of `name` (glibc's), resolved once. */
#define REAL(ret, name, ...)                                              \
  static ret (*real_##name)(__VA_ARGS__);                                \
  static ret (*resolve_##name(void))(__VA_ARGS__) {                      \
    if (!real_##name) real_##name = dlsym(RTLD_NEXT, #name);             \
    return real_##name;                                                  \
  }

REAL(int, clock_gettime, clockid_t, struct timespec *)
REAL(int, pthread_cond_timedwait, pthread_cond_t *, pthread_mutex_t *,
     const struct timespec *)
REAL(int, pthread_cond_clockwait, pthread_cond_t *, pthread_mutex_t *, clockid_t,
     const struct timespec *)
REAL(int, sem_timedwait, sem_t *, const struct timespec *)
REAL(int, sem_clockwait, sem_t *, clockid_t, const struct timespec *)
REAL(int, pthread_mutex_timedlock, pthread_mutex_t *, const struct timespec *)
REAL(int, pthread_mutex_clocklock, pthread_mutex_t *, clockid_t, const struct timespec *)
REAL(int, pthread_rwlock_timedrdlock, pthread_rwlock_t *, const struct timespec *)
REAL(int, pthread_rwlock_timedwrlock, pthread_rwlock_t *, const struct timespec *)
REAL(int, pthread_rwlock_clockrdlock, pthread_rwlock_t *, clockid_t,
     const struct timespec *)
REAL(int, pthread_rwlock_clockwrlock, pthread_rwlock_t *, clockid_t,
     const struct timespec *)
REAL(int, clock_nanosleep, clockid_t, int, const struct timespec *, struct timespec *)
REAL(int, timerfd_create, int, int)
REAL(int, timerfd_settime, int, int, const struct itimerspec *, struct itimerspec *)
REAL(int, pthread_timedjoin_np, pthread_t, void **, const struct timespec *)
REAL(int, pthread_clockjoin_np, pthread_t, void **, clockid_t, const struct timespec *)

/* Resolves everything before the program's own code runs (its allocator included). */
__attribute__((constructor)) static void init(void) {
  offsets();
  resolve_clock_gettime();
  resolve_pthread_cond_timedwait();
  resolve_pthread_cond_clockwait();
  resolve_sem_timedwait();
  resolve_sem_clockwait();
  resolve_pthread_mutex_timedlock();
  resolve_pthread_mutex_clocklock();
  resolve_pthread_rwlock_timedrdlock();
  resolve_pthread_rwlock_timedwrlock();
  resolve_pthread_rwlock_clockrdlock();
  resolve_pthread_rwlock_clockwrlock();
  resolve_clock_nanosleep();
  resolve_timerfd_create();
  resolve_timerfd_settime();
  resolve_pthread_timedjoin_np();
  resolve_pthread_clockjoin_np();
}

/* The host's time on `clk` (the vDSO through glibc; the syscall before init). */
static int host_time(clockid_t clk, struct timespec *tp) {
  int (*f)(clockid_t, struct timespec *) = real_clock_gettime;
  if (f) return f(clk, tp);
  return (int)syscall(SYS_clock_gettime, clk, tp);
}

EXPORT int clock_gettime(clockid_t clk, struct timespec *tp) {
  int r = host_time(clk, tp);
  if (r == 0) {
    int64_t off, hold;
    snapshot(clk, &off, &hold);
    shift(tp, off - held_for(hold));
  }
  return r;
}

EXPORT int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  (void)tz;
  /* glibc declares `tv` non-null, but old programs pass NULL for the time zone
   * alone: read it through a volatile so the check is not optimised away. */
  struct timeval *volatile out = tv;
  struct timespec t;
  if (clock_gettime(CLOCK_REALTIME, &t) != 0) return -1;
  if (out) {
    out->tv_sec = t.tv_sec;
    out->tv_usec = t.tv_nsec / 1000;
  }
  return 0;
}

EXPORT time_t time(time_t *out) {
  struct timespec t;
  if (clock_gettime(CLOCK_REALTIME, &t) != 0) return (time_t)-1;
  if (out) *out = t.tv_sec;
  return t.tv_sec;
}

EXPORT int timespec_get(struct timespec *ts, int base) {
  if (base != TIME_UTC || clock_gettime(CLOCK_REALTIME, ts) != 0) return 0;
  return base;
}

/* The clock a condition variable waits on: glibc keeps it in bit 1 of __wrefs
 * (pthread_condattr_setclock), read from the headers this file is compiled with. */
static clockid_t cond_clock(const pthread_cond_t *c) {
  return (c->__data.__wrefs & 2) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
}

EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                  const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_cond_timedwait()(c, m, real_deadline(cond_clock(c), abs, &b));
}

EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clk,
                                  const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_cond_clockwait()(c, m, clk, real_deadline(clk, abs, &b));
}

EXPORT int sem_timedwait(sem_t *s, const struct timespec *abs) {
  struct timespec b;
  return resolve_sem_timedwait()(s, real_deadline(CLOCK_REALTIME, abs, &b));
}

EXPORT int sem_clockwait(sem_t *s, clockid_t clk, const struct timespec *abs) {
  struct timespec b;
  return resolve_sem_clockwait()(s, clk, real_deadline(clk, abs, &b));
}

EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_mutex_timedlock()(m, real_deadline(CLOCK_REALTIME, abs, &b));
}

EXPORT int pthread_mutex_clocklock(pthread_mutex_t *m, clockid_t clk,
                                   const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_mutex_clocklock()(m, clk, real_deadline(clk, abs, &b));
}

EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t *l, const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_rwlock_timedrdlock()(l, real_deadline(CLOCK_REALTIME, abs, &b));
}

EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t *l, const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_rwlock_timedwrlock()(l, real_deadline(CLOCK_REALTIME, abs, &b));
}

EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t *l, clockid_t clk,
                                      const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_rwlock_clockrdlock()(l, clk, real_deadline(clk, abs, &b));
}

EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t *l, clockid_t clk,
                                      const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_rwlock_clockwrlock()(l, clk, real_deadline(clk, abs, &b));
}

EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req,
                           struct timespec *rem) {
  struct timespec b;
  if (flags & TIMER_ABSTIME) req = real_deadline(clk, req, &b);
  return resolve_clock_nanosleep()(clk, flags, req, rem);
}

EXPORT int pthread_timedjoin_np(pthread_t t, void **ret, const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_timedjoin_np()(t, ret, real_deadline(CLOCK_REALTIME, abs, &b));
}

EXPORT int pthread_clockjoin_np(pthread_t t, void **ret, clockid_t clk,
                                const struct timespec *abs) {
  struct timespec b;
  return resolve_pthread_clockjoin_np()(t, ret, clk, real_deadline(clk, abs, &b));
}

/* Each timerfd's clock, for its absolute settings (fds past the table keep theirs). */
#define TIMERFDS 4096
static unsigned char timerfd_clock[TIMERFDS];

EXPORT int timerfd_create(int clk, int flags) {
  int fd = resolve_timerfd_create()(clk, flags);
  if (fd >= 0 && fd < TIMERFDS) __atomic_store_n(&timerfd_clock[fd], (unsigned char)clk, __ATOMIC_RELAXED);
  return fd;
}

EXPORT int timerfd_settime(int fd, int flags, const struct itimerspec *v,
                           struct itimerspec *old) {
  struct itimerspec b;
  if ((flags & TFD_TIMER_ABSTIME) && v && fd >= 0 && fd < TIMERFDS &&
      (v->it_value.tv_sec || v->it_value.tv_nsec)) {
    b = *v;
    real_deadline(__atomic_load_n(&timerfd_clock[fd], __ATOMIC_RELAXED), &v->it_value,
                  &b.it_value);
    if (!b.it_value.tv_sec && !b.it_value.tv_nsec) b.it_value.tv_nsec = 1;
    v = &b;
  }
  return resolve_timerfd_settime()(fd, flags, v, old);
}
