/*
 * What a job's task runs with once it is in the jail. The worker container is privileged (pivot_root, mount
 * namespaces and binds need it), so root inside the jail would otherwise be root of the node: a root job (where the
 * admin allows one), or a user who reaches a setuid program planted on the shared jail volume. No Slurm here.
 */
#ifndef SLURMCTL_CONFINE_H
#define SLURMCTL_CONFINE_H

#include "jail.h"

struct confine_opts {
	int privileged_jobs; /* the admin's opt-in: SLURMCTL_PRIVILEGED_JOBS=yes */
	int user_namespaces; /* container steps are on: SLURMCTL_USER_NAMESPACES=yes */
};

/*
 * From the environment slurmd gave slurmstepd (read in slurm_spank_init, before any task): the worker pod names the
 * opt-ins, as it names the job directories (jail.h), so a plugin only ever meets the settings of the pod it came in:
 * an older plugin, which knows none, never fails a job over an argument it cannot parse, and a job's own
 * environment (applied when the task executes) never reaches them. Each unset, empty or `no` is off, `yes` is on;
 * anything else returns -1 with `e` filled (the step fails: a typo must not loosen or tighten anything silently).
 */
int jail_confine_opts_from_env(struct confine_opts *o, struct jail_error *e);

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
