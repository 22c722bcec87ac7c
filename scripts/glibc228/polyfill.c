/* libdescl_glibc228.so: what the bullseye wheel's ELF files take from glibc 2.29+ and libstdc++
 * GLIBCXX_3.4.26 (gcc 9), rebuilt on what glibc 2.28 and GLIBCXX_3.4.21 have, so that the wheel
 * is manylinux_2_28 (scripts/wheel-glibc228; the bundle's lib/ too: scripts/bundle-glibc228).
 * patch.py renames each reference to the descl_glibc228_ name below (unversioned) and adds this
 * library as DT_NEEDED, so these are used on every system, old or new: the names are ours,
 * glibc's and libstdc++'s never match them.
 * exp/log/pow/log2@GLIBC_2.29 need nothing here: libm still has them as @GLIBC_2.2.5 (the same
 * code behind an errno wrapper), and the references are re-pointed there. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* gettid@GLIBC_2.30 (a weak reference of Rust's std, which falls back to the same syscall). */
pid_t descl_glibc228_gettid(void) { return (pid_t)syscall(SYS_gettid); }

/* pthread_cond_clockwait@GLIBC_2.30, which libstdc++'s headers (gcc 10) inline into
 * std::condition_variable::wait_until/wait_for with a steady_clock deadline: the CLOCK_MONOTONIC
 * deadline becomes a CLOCK_REALTIME one for pthread_cond_timedwait (a std::condition_variable's
 * pthread_cond_t uses the default clock, CLOCK_REALTIME), as libstdc++ itself does where
 * pthread_cond_clockwait is missing. A wall-clock jump during the wait moves the wake-up; the
 * callers check their own clock after a timeout and wait again, so early wake-ups are harmless.
 * Other clocks: EINVAL, as glibc. */
int descl_glibc228_pthread_cond_clockwait(pthread_cond_t *cond, pthread_mutex_t *mutex,
                                          clockid_t clock, const struct timespec *abstime) {
  if (abstime->tv_nsec < 0 || abstime->tv_nsec >= 1000000000L) return EINVAL;
  if (clock == CLOCK_REALTIME) return pthread_cond_timedwait(cond, mutex, abstime);
  if (clock != CLOCK_MONOTONIC) return EINVAL;
  struct timespec mono, real, ts;
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  /* ts = abstime - mono + real, in whole seconds and nanoseconds, saturating far deadlines. */
  long nsec = abstime->tv_nsec - mono.tv_nsec + real.tv_nsec;   /* in (-1e9, 2e9) */
  time_t carry = 0;
  if (nsec < 0) { nsec += 1000000000L; carry = -1; }
  else if (nsec >= 1000000000L) { nsec -= 1000000000L; carry = 1; }
  time_t sec;
  if (__builtin_sub_overflow(abstime->tv_sec, mono.tv_sec, &sec)
      || __builtin_add_overflow(sec, real.tv_sec, &sec)
      || __builtin_add_overflow(sec, carry, &sec)) {
    if (abstime->tv_sec < 0) { sec = 0; nsec = 0; }             /* long past: times out now */
    else { sec = (time_t)(~(unsigned long long)0 >> 1); nsec = 999999999L; }  /* never */
  }
  ts.tv_sec = sec;
  ts.tv_nsec = nsec;
  return pthread_cond_timedwait(cond, mutex, &ts);
}

/* std::__cxx11::basic_stringstream<char>() and basic_ostringstream<char>(), the default
 * constructors gcc 9 added (GLIBCXX_3.4.26): until then they were the openmode constructors'
 * default argument (GLIBCXX_3.4.21), which they equal: in|out, and out. std::_Ios_Openmode is
 * an int-sized enum: _S_in = 8, _S_out = 16. */
void _ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1ESt13_Ios_Openmode(void *, int);
void _ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1ESt13_Ios_Openmode(void *, int);
void descl_glibc228_stringstream_ctor(void *self) {
  _ZNSt7__cxx1118basic_stringstreamIcSt11char_traitsIcESaIcEEC1ESt13_Ios_Openmode(self, 8 | 16);
}
void descl_glibc228_ostringstream_ctor(void *self) {
  _ZNSt7__cxx1119basic_ostringstreamIcSt11char_traitsIcESaIcEEC1ESt13_Ios_Openmode(self, 16);
}
