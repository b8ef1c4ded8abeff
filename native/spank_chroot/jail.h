/*
 * Making the jail the root of the calling process's mount namespace: shared by the SPANK plugin (chroot.so: slurmstepd
 * enters the jail) and by job_container/jail (the other processes Slurm starts for a job). No Slurm here.
 */
#ifndef SLURMCTL_JAIL_H
#define SLURMCTL_JAIL_H

#include <limits.h>
#include <sys/types.h>

/* Where entering the jail failed: a short step name, what it was doing, and errno. */
struct jail_error {
	const char *step;
	char what[PATH_MAX + 64];
	int err;
};

/* The identity of a directory: the jail is "/" exactly when stat("/") gives the jail's identity. */
struct jail_ident {
	dev_t dev;
	ino_t ino;
};

/* stat(path) must be a directory: fills `id`. Returns 0, or -1 with `e` filled. */
int jail_identify(const char *path, struct jail_ident *id, struct jail_error *e);

/* Whether "/" of the caller is the directory `id` names. */
int jail_is_root(const struct jail_ident *id);

/*
 * In a mount namespace of the caller's own (it unshared one): keep the namespace from propagating anything back
 * (slave), make `jail` a mount point and move the root there with pivot_root, the old root parked on
 * `/<old_root>` (created if missing). The caller's working directory is "/" afterwards. Returns 0, or -1 with `e`
 * filled. Then either jail_detach (nothing of the node stays reachable) or, when the jail turns out unusable,
 * jail_undo (back on the node's root, so the caller can still report the failure through the node's munge and
 * spool).
 */
int jail_pivot(const char *jail, const char *old_root, struct jail_error *e);
int jail_detach(const char *old_root, struct jail_error *e);
void jail_undo(const char *old_root);

#endif
