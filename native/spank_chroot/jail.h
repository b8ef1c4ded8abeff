/*
 * Making the jail the root of the calling process's mount namespace: shared by the SPANK plugin (chroot.so: slurmstepd
 * enters the jail) and by job_container/jail (the other processes Slurm starts for a job). No Slurm here.
 */
#ifndef SLURMCTL_JAIL_H
#define SLURMCTL_JAIL_H

#include <limits.h>
#include <stdint.h>
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

/*
 * A job's private /tmp and /dev/shm (spec.jail.privateTmp). The worker pod names, in slurmd's environment (which
 * slurmstepd inherits), two directories on the node, outside the jail: SLURMCTL_JOB_TMP and SLURMCTL_JOB_SHM (the pod
 * mounts an emptyDir at each, the second memory-backed; no process in the jail can reach them). The pod, not
 * plugstack.conf, carries them because the pod is what provides them: a pod made before they existed, or with
 * privateTmp off, has neither, and its jobs share the jail's /tmp and /dev/shm as before.
 *
 * Under each, a job gets `<job id>/` (root's, mode 1777 like any /tmp), made when its first step or joined process
 * enters the jail, and bound onto the jail's /tmp and /dev/shm in that process's mount namespace only, nosuid and
 * nodev: another job, of the same user or not, never sees it. Removed with everything in it when the job ends
 * (job_container/jail's stepd_delete, in the extern step, which ends last).
 *
 * Sizes (spec.workers[].jobTmp): SLURMCTL_JOB_TMP_SIZE and SLURMCTL_JOB_SHM_SIZE, in bytes, make `<job id>/` a tmpfs
 * of that size instead of a plain directory: one per job and node, mounted on the node's side (the worker
 * container's mount namespace, which every slurmstepd of the node starts in) by whichever of the job's processes
 * comes first, so all of the job's steps share it. A write past the size fails with ENOSPC in the job alone; its
 * pages are charged to the memory cgroup of the job's process that wrote them (Slurm's task/cgroup limit). Unmounted
 * (lazily: a step still holding it keeps it until it ends) and removed when the job ends. Each needs its directory.
 */
struct jail_job_dirs {
	char tmp[PATH_MAX]; /* both empty: off */
	char shm[PATH_MAX];
	unsigned long long tmp_size; /* bytes; 0: a plain directory of the node's (no limit) */
	unsigned long long shm_size;
};

/*
 * From the environment: both directories set (absolute paths, not "/"), or neither; a size only with its directory,
 * a decimal number of bytes of at least one page. Returns 0, or -1 with `e` filled.
 */
int jail_job_dirs_from_env(struct jail_job_dirs *dirs, struct jail_error *e);

/*
 * On the node's root, in the mount namespace every slurmstepd of the node shares, before the caller unshares its
 * own: for each sized directory, make the job's `<base>/<job id>` and mount its tmpfs there unless one of the job's
 * processes did already (serialized by a lock on the base). Nothing to do without sizes. Returns 0, or -1 with `e`
 * filled (the caller fails the step).
 */
int jail_job_dirs_mount(const struct jail_job_dirs *dirs, uint32_t job_id, struct jail_error *e);

/*
 * After jail_pivot (the node's root is parked on /<old_root>) and before jail_detach: make the job's directories
 * (their bases made root's and 0700, with any missing parent) and bind them. Anything unexpected (a base that is not
 * root's directory, a symlink) fails with `e` filled, and the caller fails the step rather than run it with the
 * shared /tmp. Nothing to do when `dirs` is off.
 */
int jail_job_dirs_bind(const char *old_root, const struct jail_job_dirs *dirs, uint32_t job_id, struct jail_error *e);

/*
 * On the node's root: unmounts a tmpfs on `<base>/<job id>` (detached: gone once no step holds it) and removes it,
 * and all it holds, following no symlink; gone is success.
 */
int jail_job_dirs_remove(const struct jail_job_dirs *dirs, uint32_t job_id, struct jail_error *e);

#endif
