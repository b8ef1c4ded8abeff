/*
 * What a job's task runs with once it is in the jail. The worker container is privileged (pivot_root, mount
 * namespaces and binds need it), so root inside the jail would otherwise be root of the node: a root job (where the
 * admin allows one), or a user who reaches a setuid program planted on the shared jail volume. No Slurm here.
 */
#ifndef SLURMCTL_CONFINE_H
#define SLURMCTL_CONFINE_H

#include "jail.h"

struct confine_opts {
	int privileged_jobs; /* the admin's opt-in (plugstack.conf privileged_jobs=yes) */
	int user_namespaces; /* container steps are on (plugstack.conf user_namespaces=yes) */
};

/*
 * In the forked task, as root, before Slurm drops to the job's user and executes the program:
 *  - the task gets a mount namespace of its own in which the jail's /sys and every mount under it (the cgroup
 *    hierarchies included) are read-only: slurmstepd keeps managing the job's cgroups in its own namespace;
 *  - unless `privileged_jobs`: no_new_privs (setuid programs and file capabilities grant nothing) and empty
 *    capability bounding, ambient and inheritable sets (what a root job executes runs with no capability at all);
 *  - unless `user_namespaces`: a seccomp filter refusing new user namespaces (unshare or clone with CLONE_NEWUSER:
 *    EPERM; clone3, whose flags a filter cannot read: ENOSYS, so the C library falls back to clone).
 * Returns 0, or -1 with `e` filled: the caller must end the task.
 */
int jail_confine_task(const struct confine_opts *o, struct jail_error *e);

#endif
