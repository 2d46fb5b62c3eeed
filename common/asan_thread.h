/*
 * asan_thread.h - what our own threads need in a build with AddressSanitizer (make
 * asan); nothing in any other build.
 *
 * Our threads (the uploader's, the module thread) are created with libc's
 * pthread_create, past ASan's interceptor: going through it would hand them to our own
 * pthread_create wrapper, as application threads. So ASan never clears the shadow of
 * their stacks, as it does for every thread it starts, and a thread that reuses a
 * cached stack finds the redzones of frames that were live on it still poisoned. It
 * happens in every fork child that starts its uploader: glibc hands it the stack of
 * the parent's uploader thread, which was inside a call at the fork; ASan then
 * reported a stack-buffer-underflow in our own correct code (pprof_build's memset).
 * Context: the first call of each of our threads (normal context).
 */
#ifndef DDPROF_COMMON_ASAN_THREAD_H
#define DDPROF_COMMON_ASAN_THREAD_H

#ifdef __SANITIZE_ADDRESS__
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
