/*
 * own_thread.c - stacks for the profiler's own threads (see own_thread.h for why).
 * Context: normal context; the creating or joining thread.
 */
#include "own_thread.h"

#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/asan.h"
#include "common/raw_syscall.h"

__thread bool own_thread_self __attribute__((tls_model("initial-exec")));

int own_thread_stack_attr(struct own_stack *s, pthread_attr_t *attr, size_t bytes)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	bytes = (bytes + page - 1) & ~(page - 1);
	if (s->in_use)
		return -EBUSY;
	if (s->base && s->bytes != bytes + page) {
		munmap(s->base, s->bytes);
		s->base = NULL;
	}
	if (!s->base) {
		/* Reserved, not committed: the thread touches tens of KiB of it. */
		void *p = mmap(NULL, bytes + page, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
		if (p == MAP_FAILED)
			return -errno;
		/* A guard page below the stack, as glibc gives its own stacks. */
		if (mprotect(p, page, PROT_NONE) != 0) {
			int e = errno;
			munmap(p, bytes + page);
			return -e;
		}
		s->base = p;
		s->bytes = bytes + page;
	}
	int rc = pthread_attr_setstack(attr, (char *)s->base + page, s->bytes - page);
	if (rc != 0)
		return -rc;
	s->in_use = true;
	return 0;
}

void own_thread_stack_release(struct own_stack *s)
{
	s->in_use = false;
}

/* The first frame of every thread of ours. */
static void *own_thread_main(void *arg)
{
	struct own_stack *s = arg;
	asan_thread_forget_stack(); /* common/asan.h */
	own_thread_self = true;
	return s->fn(s->arg);
}

int own_thread_create(struct own_stack *s, size_t bytes, own_thread_create_fn create, pthread_t *t,
		      void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	int rc = own_thread_stack_attr(s, &attr, bytes);
	if (rc != 0) {
		pthread_attr_destroy(&attr);
		return rc;
	}
	/* The new thread inherits the creator's mask: every signal blocked, then the
	 * creator's mask back. */
	sigset_t all, old;
	sigfillset(&all);
	sigemptyset(&old);
	raw_sigmask(SIG_SETMASK, &all, &old);
	s->fn = fn;
	s->arg = arg;
	rc = create(t, &attr, own_thread_main, s);
	raw_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (rc != 0)
		own_thread_stack_release(s);
	return -rc;
}
