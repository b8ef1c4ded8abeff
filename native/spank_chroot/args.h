/*
 * Parsing of the chroot plugin's plugstack.conf arguments, kept apart from the SPANK code so a small harness can run
 * it under AddressSanitizer without Slurm.
 */
#ifndef SLURMCTL_CHROOT_ARGS_H
#define SLURMCTL_CHROOT_ARGS_H

#include <limits.h>
#include <stddef.h>

#define CHROOT_DEFAULT_OLD_ROOT ".slurmctl-old-root"

struct chroot_args {
	char jail[PATH_MAX];          /* absolute path of the jail's root on the node */
	char old_root[NAME_MAX + 1];  /* directory inside the jail that receives the old root during pivot_root */
};

/*
 * Fill `out` from `jail=<absolute path>` (required) and `old_root=<name>` (optional, one path component).
 * Returns 0, or -1 with a message naming the offending argument in `err` (always NUL-terminated when errlen > 0).
 * Allocates nothing.
 */
int chroot_args_parse(int argc, char *const argv[], struct chroot_args *out, char *err, size_t errlen);

/*
 * The same, from the first active line of a plugstack.conf that loads chroot.so (`required|optional <path>/chroot.so
 * key=value...`): how job_container/jail finds the jail the SPANK plugin uses, so the two can never disagree. The
 * plugin's path goes to `plugin` (PATH_MAX bytes). Returns 0, or -1 with a message in `err`.
 */
int chroot_args_from_plugstack(const char *plugstack, struct chroot_args *out, char *plugin, char *err, size_t errlen);

#endif
