// Checks libdescl_glibc228.so's functions against what they stand in for (glibc >= 2.30's
// gettid and pthread_cond_clockwait, libstdc++'s default string-stream constructors), run by
// scripts/glibc228/polyfill on the build system before the library goes into the wheel or the
// bundle.
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <new>
#include <sstream>
#include <thread>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

extern "C" {
pid_t descl_glibc228_gettid(void);
int descl_glibc228_pthread_cond_clockwait(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                                          const struct timespec *);
void descl_glibc228_stringstream_ctor(void *);
void descl_glibc228_ostringstream_ctor(void *);
}

static int failures = 0;
#define CHECK(c)                                                                    \
  do {                                                                              \
    if (!(c)) {                                                                     \
      std::fprintf(stderr, "polyfill_test: FAIL line %d: %s\n", __LINE__, #c);      \
      failures++;                                                                   \
    }                                                                               \
  } while (0)

static double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
static timespec mono_in(long ms) {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) { t.tv_nsec -= 1000000000L; t.tv_sec++; }
  return t;
}

int main() {
  CHECK(descl_glibc228_gettid() == (pid_t)syscall(SYS_gettid));
  CHECK(descl_glibc228_gettid() == getpid());   // the main thread
  pid_t other = 0;
  std::thread([&] { other = descl_glibc228_gettid(); }).join();
  CHECK(other > 0 && other != getpid());

  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  pthread_mutex_lock(&m);
  // A monotonic deadline 150 ms ahead times out after ~150 ms.
  auto t0 = std::chrono::steady_clock::now();
  timespec d = mono_in(150);
  CHECK(descl_glibc228_pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d) == ETIMEDOUT);
  double waited = ms_since(t0);
  std::printf("polyfill_test: CLOCK_MONOTONIC +150 ms timed out after %.1f ms\n", waited);
  CHECK(waited >= 140 && waited < 1000);
  // A deadline already past, and a realtime one, and a far one woken by a signal.
  d = mono_in(-5000);
  t0 = std::chrono::steady_clock::now();
  CHECK(descl_glibc228_pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d) == ETIMEDOUT);
  CHECK(ms_since(t0) < 100);
  timespec r;
  clock_gettime(CLOCK_REALTIME, &r);
  r.tv_nsec += 50000000L;
  if (r.tv_nsec >= 1000000000L) { r.tv_nsec -= 1000000000L; r.tv_sec++; }
  CHECK(descl_glibc228_pthread_cond_clockwait(&c, &m, CLOCK_REALTIME, &r) == ETIMEDOUT);
  bool flag = false;
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    pthread_mutex_lock(&m); flag = true; pthread_cond_signal(&c); pthread_mutex_unlock(&m);
  });
  d = mono_in(10000);
  t0 = std::chrono::steady_clock::now();
  int rc = 0;
  while (!flag && rc == 0) rc = descl_glibc228_pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d);
  CHECK(rc == 0 && flag && ms_since(t0) < 5000);
  pthread_mutex_unlock(&m);
  waker.join();
  pthread_mutex_lock(&m);
  timespec far = {(time_t)(~0ULL >> 1), 0};
  std::thread waker2([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    pthread_mutex_lock(&m); flag = false; pthread_cond_signal(&c); pthread_mutex_unlock(&m);
  });
  rc = 0;
  while (flag && rc == 0) rc = descl_glibc228_pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &far);
  CHECK(rc == 0 && !flag);
  pthread_mutex_unlock(&m);
  waker2.join();
  d = mono_in(10);
  CHECK(descl_glibc228_pthread_cond_clockwait(&c, &m, CLOCK_PROCESS_CPUTIME_ID, &d) == EINVAL);
  d.tv_nsec = 1000000000L;
  CHECK(descl_glibc228_pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d) == EINVAL);

  // The constructors build streams that behave as default-constructed ones.
  alignas(std::stringstream) unsigned char sbuf[sizeof(std::stringstream)];
  descl_glibc228_stringstream_ctor(sbuf);
  auto *ss = std::launder(reinterpret_cast<std::stringstream *>(sbuf));
  *ss << "pi " << 3.25 << ' ' << 42;
  std::string word; double x = 0; int n = 0;
  *ss >> word >> x >> n;   // in|out: what was written reads back
  CHECK(word == "pi" && x == 3.25 && n == 42 && ss->str() == "pi 3.25 42");
  ss->~basic_stringstream();
  alignas(std::ostringstream) unsigned char obuf[sizeof(std::ostringstream)];
  descl_glibc228_ostringstream_ctor(obuf);
  auto *os = std::launder(reinterpret_cast<std::ostringstream *>(obuf));
  *os << "x=" << 7;
  std::ostringstream ref;
  ref << "x=" << 7;
  CHECK(os->str() == ref.str() && os->str() == "x=7");
  os->~basic_ostringstream();

  if (failures) return 1;
  std::printf("polyfill_test: OK\n");
  return 0;
}
