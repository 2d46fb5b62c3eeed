/*
 * lock_edges.c - the lock calls whose results a profiler's lock hooks must not change:
 * robust mutexes through every state (owner died: EOWNERDEAD, made consistent; owner
 * died and unlocked without pthread_mutex_consistent: ENOTRECOVERABLE from then on, for
 * lock, timedlock, clocklock and trylock; process-shared in shared memory, its owner a
 * fork child that exits holding it), priority-inheritance and priority-protect mutexes,
 * and every lock entry point given arguments libc refuses (an unsupported clock, a
 * deadline's nanoseconds out of range), on free and on held locks. Each line is a call
 * and its result (and the lock's state after where it matters); the output is compared
 * with the program's alone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SHOW(what, rc) printf("%-44s %s\n", (what), strerror(rc))

static pthread_mutex_t robust;

static void *lock_and_die(void *arg)
{
	pthread_mutex_lock(arg);
	return NULL;
}

static void robust_init(pthread_mutex_t *m, int pshared)
{
	pthread_mutexattr_t a;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	pthread_mutexattr_setpshared(&a, pshared);
	pthread_mutex_init(m, &a);
	pthread_mutexattr_destroy(&a);
}

static struct timespec in_ms(clockid_t c, long ms)
{
	struct timespec t;
	clock_gettime(c, &t);
	t.tv_sec += ms / 1000;
	t.tv_nsec += (ms % 1000) * 1000000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

static void robust_paths(void)
{
	robust_init(&robust, PTHREAD_PROCESS_PRIVATE);
	pthread_t t;
	pthread_create(&t, NULL, lock_and_die, &robust);
	pthread_join(t, NULL);
	SHOW("robust: lock, owner died", pthread_mutex_lock(&robust));
	SHOW("robust: consistent", pthread_mutex_consistent(&robust));
	SHOW("robust: unlock", pthread_mutex_unlock(&robust));
	SHOW("robust: lock again", pthread_mutex_lock(&robust));
	SHOW("robust: unlock again", pthread_mutex_unlock(&robust));
	/* Dies again; this time unlocked without consistent: not recoverable. */
	pthread_create(&t, NULL, lock_and_die, &robust);
	pthread_join(t, NULL);
	struct timespec rt = in_ms(CLOCK_REALTIME, 200), mt = in_ms(CLOCK_MONOTONIC, 200);
	SHOW("robust: timedlock, owner died", pthread_mutex_timedlock(&robust, &rt));
	SHOW("robust: unlock without consistent", pthread_mutex_unlock(&robust));
	SHOW("robust: lock, not recoverable", pthread_mutex_lock(&robust));
	SHOW("robust: timedlock, not recoverable", pthread_mutex_timedlock(&robust, &rt));
	SHOW("robust: clocklock, not recoverable",
	     pthread_mutex_clocklock(&robust, CLOCK_MONOTONIC, &mt));
	SHOW("robust: lock, still not recoverable", pthread_mutex_lock(&robust));
	SHOW("robust: trylock, not recoverable", pthread_mutex_trylock(&robust));

	/* Process-shared, in shared memory: the owner is a fork child that exits. */
	pthread_mutex_t *shared =
	    mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	robust_init(shared, PTHREAD_PROCESS_SHARED);
	pid_t pid = fork();
	if (pid == 0) {
		pthread_mutex_lock(shared);
		_exit(0);
	}
	int st;
	waitpid(pid, &st, 0);
	SHOW("shared robust: lock, owner process exited", pthread_mutex_lock(shared));
	SHOW("shared robust: consistent", pthread_mutex_consistent(shared));
	SHOW("shared robust: unlock", pthread_mutex_unlock(shared));
	pid = fork();
	if (pid == 0) {
		int rc = pthread_mutex_lock(shared);
		pthread_mutex_unlock(shared);
		_exit(rc);
	}
	waitpid(pid, &st, 0);
	printf("%-44s %d\n", "shared robust: child's lock", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static void protocol_paths(void)
{
	for (int proto = PTHREAD_PRIO_INHERIT; proto <= PTHREAD_PRIO_PROTECT; proto++) {
		pthread_mutexattr_t a;
		pthread_mutex_t m;
		pthread_mutexattr_init(&a);
		pthread_mutexattr_setprotocol(&a, proto);
		pthread_mutex_init(&m, &a);
		const char *name = proto == PTHREAD_PRIO_INHERIT ? "pi" : "pp";
		char what[64];
		snprintf(what, sizeof(what), "%s: lock", name);
		SHOW(what, pthread_mutex_lock(&m));
		snprintf(what, sizeof(what), "%s: relock (default type)", name);
		struct timespec rt = in_ms(CLOCK_REALTIME, 50);
		SHOW(what, pthread_mutex_timedlock(&m, &rt));
		snprintf(what, sizeof(what), "%s: unlock", name);
		SHOW(what, pthread_mutex_unlock(&m));
		pthread_mutex_destroy(&m);
		pthread_mutexattr_destroy(&a);
	}
}

static void *hold_rwlock(void *arg)
{
	pthread_rwlock_wrlock(arg);
	usleep(300000);
	pthread_rwlock_unlock(arg);
	return NULL;
}

static void *hold_mutex(void *arg)
{
	pthread_mutex_lock(arg);
	usleep(300000);
	pthread_mutex_unlock(arg);
	return NULL;
}

static void invalid_arguments(void)
{
	struct timespec bad_ns = in_ms(CLOCK_REALTIME, 100), neg_ns = bad_ns;
	bad_ns.tv_nsec = 1000000000L;
	neg_ns.tv_nsec = -1;
	struct timespec ok = in_ms(CLOCK_MONOTONIC, 100);
	const clockid_t bad_clock = CLOCK_PROCESS_CPUTIME_ID;
	for (int held = 0; held <= 1; held++) {
		pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
		pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
		pthread_t hm, hl;
		if (held) {
			pthread_create(&hm, NULL, hold_mutex, &m);
			pthread_create(&hl, NULL, hold_rwlock, &l);
			usleep(100000);
		}
		const char *s = held ? "held" : "free";
		char what[80];
#define TRY(label, call, unlock)                                                                   \
	do {                                                                                       \
		int rc_ = (call);                                                                  \
		snprintf(what, sizeof(what), "%s %s", label, s);                                   \
		SHOW(what, rc_);                                                                   \
		if (rc_ == 0)                                                                      \
			unlock;                                                                    \
	} while (0)
		TRY("mutex_clocklock bad clock", pthread_mutex_clocklock(&m, bad_clock, &ok),
		    pthread_mutex_unlock(&m));
		TRY("rwlock_timedrdlock ns 1e9", pthread_rwlock_timedrdlock(&l, &bad_ns),
		    pthread_rwlock_unlock(&l));
		TRY("rwlock_timedwrlock ns -1", pthread_rwlock_timedwrlock(&l, &neg_ns),
		    pthread_rwlock_unlock(&l));
		TRY("rwlock_clockrdlock bad clock", pthread_rwlock_clockrdlock(&l, bad_clock, &ok),
		    pthread_rwlock_unlock(&l));
		TRY("rwlock_clockwrlock bad clock", pthread_rwlock_clockwrlock(&l, bad_clock, &ok),
		    pthread_rwlock_unlock(&l));
		TRY("rwlock_clockrdlock ns 1e9",
		    pthread_rwlock_clockrdlock(&l, CLOCK_REALTIME, &bad_ns),
		    pthread_rwlock_unlock(&l));
		if (held) {
			/* The mutex's deadline is checked only when it must wait. */
			TRY("mutex_timedlock ns 1e9", pthread_mutex_timedlock(&m, &bad_ns),
			    pthread_mutex_unlock(&m));
			pthread_join(hm, NULL);
			pthread_join(hl, NULL);
		}
		TRY("mutex_trylock after", pthread_mutex_trylock(&m), pthread_mutex_unlock(&m));
		TRY("rwlock_trywrlock after", pthread_rwlock_trywrlock(&l),
		    pthread_rwlock_unlock(&l));
	}
	pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
	pthread_mutex_lock(&cm);
	SHOW("cond_timedwait ns 1e9", pthread_cond_timedwait(&cv, &cm, &bad_ns));
	SHOW("cond_clockwait bad clock", pthread_cond_clockwait(&cv, &cm, bad_clock, &ok));
	pthread_mutex_unlock(&cm);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	robust_paths();
	protocol_paths();
	invalid_arguments();
	printf("done\n");
	return 0;
}
