/*
 * asan.h - what the code needs to know of a build with AddressSanitizer (make asan);
 * nothing in any other build.
 *
 * DDPROF_ASAN: 1 in such a build (gcc defines __SANITIZE_ADDRESS__, clang answers
 * __has_feature), else 0. Tests that check what ASan changes on purpose (the layout of
 * our data, the speed of a stress loop) read it.
 *
 * asan_thread_forget_stack: our threads (the uploader's, the module thread) are
 * created with libc's pthread_create, past ASan's interceptor: going through it would
 * hand them to our own pthread_create wrapper, as application threads. So ASan never
 * clears the shadow of their stacks, as it does for every thread it starts, and a
 * thread that reuses a cached stack finds the redzones of frames that were live on it
 * still poisoned. It happens in fork children that start their uploader: glibc hands
 * the new thread the stack of the parent's uploader thread, which was inside a call at
 * the fork, and ASan then reports a stack-buffer-underflow in our own correct code
 * (pprof_build's memset, elf_image_open).
 * Context: asan_thread_forget_stack is the first call of each of our threads.
 */
#ifndef DDPROF_COMMON_ASAN_H
#define DDPROF_COMMON_ASAN_H

#if defined(__SANITIZE_ADDRESS__)
#define DDPROF_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DDPROF_ASAN 1
#endif
#endif
#ifndef DDPROF_ASAN
#define DDPROF_ASAN 0
#endif

#if DDPROF_ASAN
#include <pthread.h>
#include <sanitizer/asan_interface.h>

/* Clears the poison of the calling thread's whole stack, as ASan does for a thread it
 * starts (frames live now lose their redzones: only the thread's entry frames). */
static inline void asan_thread_forget_stack(void)
{
	pthread_attr_t attr;
	void *lo;
	size_t size;
	if (pthread_getattr_np(pthread_self(), &attr) != 0)
		return;
	if (pthread_attr_getstack(&attr, &lo, &size) == 0)
		__asan_unpoison_memory_region(lo, size);
	pthread_attr_destroy(&attr);
}
#else
static inline void asan_thread_forget_stack(void)
{
}
#endif

#endif
