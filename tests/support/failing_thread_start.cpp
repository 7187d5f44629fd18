// Preloaded only (failing_syscalls_preload), never linked into a test
// executable: with TRAINBENCH_TEST_NO_NESTED_THREADS set, a thread started
// by another thread than the main one fails to start with EAGAIN, as it
// does at ulimit -u or when its stack no longer fits under ulimit -v. The
// checkpoint's writer and hashing threads are such threads (the persisting
// thread starts them), which no machine limit can single out on demand.
#include <dlfcn.h>    // dlsym(RTLD_NEXT)
#include <pthread.h>
#include <unistd.h>   // getpid, gettid

#include <cerrno>
#include <cstdlib>    // getenv

namespace {

using PthreadCreate = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

PthreadCreate libc_pthread_create() {
  static const PthreadCreate real = reinterpret_cast<PthreadCreate>(::dlsym(RTLD_NEXT, "pthread_create"));
  return real;
}

}  // namespace

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attributes, void* (*start)(void*),
                              void* argument) {
  if (std::getenv("TRAINBENCH_TEST_NO_NESTED_THREADS") != nullptr && ::gettid() != ::getpid()) return EAGAIN;
  return libc_pthread_create()(thread, attributes, start, argument);
}
