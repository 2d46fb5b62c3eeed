/*
 * thread_stack.h - the uploader thread's stack (see thread_stack.c for why it is ours).
 * Context: normal context.
 */
#ifndef DDPROF_UPLOADER_THREAD_STACK_H
#define DDPROF_UPLOADER_THREAD_STACK_H

#include <pthread.h>

/* Gives attr our stack for the thread about to start. On any failure (no mapping, a
 * kernel without MADV_WIPEONFORK) attr is left alone: glibc allocates the stack, as it
 * would without us. */
void thread_stack_apply(pthread_attr_t *attr);

#endif
