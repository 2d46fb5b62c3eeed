/*
 * identity.c - the process's start identity (see identity.h).
 * Context: normal context.
 */
#include "common/identity.h"

#include <stdatomic.h>
#include <sys/types.h>
#include <unistd.h>

/* Written once by the constructor, before any other thread of ours exists. */
static uid_t start_euid;
static gid_t start_egid;
static _Atomic bool noted;

void identity_note_start(void)
{
	start_euid = geteuid();
	start_egid = getegid();
	/* Release pairs with identity_changed's acquire: the ids are written. */
	atomic_store_explicit(&noted, true, memory_order_release);
}

bool identity_changed(void)
{
	/* Acquire pairs with identity_note_start's release. */
	if (!atomic_load_explicit(&noted, memory_order_acquire))
		return false;
	return geteuid() != start_euid || getegid() != start_egid;
}
