#include "confine.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
 * The system call numbers the filter looks at, for the native ABI and the 32-bit one the same kernel also runs
 * (x86_64: i386, whose numbers differ; x32 shares x86_64's, marked by a high bit the filter masks off; aarch64: arm).
 */
#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#define COMPAT_ARCH AUDIT_ARCH_I386
#define COMPAT_NR_UNSHARE 310
#define COMPAT_NR_CLONE 120
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#define COMPAT_ARCH AUDIT_ARCH_ARM
#define COMPAT_NR_UNSHARE 337
#define COMPAT_NR_CLONE 120
#else
#error "confine.c knows the system call numbers of x86_64 and aarch64 only"
#endif
#define NR_CLONE3 435 /* the same in every ABI above */
#define X32_SYSCALL_BIT_ 0x40000000U
#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the filter reads the low half of the first argument at its offset: little-endian only"
#endif
#define FIRST_ARG_LOW ((unsigned int)offsetof(struct seccomp_data, args[0]))

static int fail(struct jail_error *e, const char *step, const char *what)
{
	e->step = step;
	e->err = errno;
	(void)snprintf(e->what, sizeof(e->what), "%s", what);
	return -1;
}

/* The task's own mount namespace, /sys read-only in it. */
static int read_only_sys(struct jail_error *e)
{
	struct mount_attr attr;
	struct stat root, sys;

	if (stat("/", &root) < 0 || stat("/sys", &sys) < 0)
		return fail(e, "stat-sys", "/sys in the jail");
	if (unshare(CLONE_NEWNS) < 0)
		return fail(e, "unshare-task", "a mount namespace for the task");
	/* Nothing done here may reach slurmstepd's namespace. */
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
		return fail(e, "slave-task", "/ of the task's namespace");
	memset(&attr, 0, sizeof(attr));
	attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
	if (mount_setattr(AT_FDCWD, "/sys", AT_RECURSIVE, &attr, sizeof(attr)) == 0)
		return 0;
	/* A jail whose /sys is a plain directory (not the node's, not a mount) holds nothing to protect. */
	if (errno == EINVAL && sys.st_dev == root.st_dev)
		return 0;
	return fail(e, "read-only-sys", "/sys and every mount under it");
}

/* New user namespaces refused (see confine.h); laid out by hand, so every jump is counted from the next index. */
static int refuse_user_namespaces(struct jail_error *e)
{
	struct sock_filter code[] = {
		/* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		/* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 0, 6), /* else 8 */
		/* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		/* 3 */ BPF_STMT(BPF_ALU | BPF_AND | BPF_K, ~X32_SYSCALL_BIT_),
		/* 4 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_CLONE3, 13, 0),  /* 18 */
		/* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_unshare, 8, 0), /* 14 */
		/* 6 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 7, 0),   /* 14 */
		/* 7 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* 8 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, COMPAT_ARCH, 0, 9), /* else 18: an ABI we do not know */
		/* 9 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		/* 10 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NR_CLONE3, 7, 0),        /* 18 */
		/* 11 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, COMPAT_NR_UNSHARE, 2, 0), /* 14 */
		/* 12 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, COMPAT_NR_CLONE, 1, 0),   /* 14 */
		/* 13 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* 14: unshare or clone, whose flags are the first argument in every ABI above */
		/* 14 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, FIRST_ARG_LOW),
		/* 15 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 1, 0), /* 17 */
		/* 16 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		/* 17 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		/* 18 */ BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
	};
	struct sock_fprog prog = {.len = (unsigned short)(sizeof(code) / sizeof(code[0])), .filter = code};

	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
		return fail(e, "seccomp", "the filter refusing new user namespaces");
	return 0;
}

/* no_new_privs and no capability to come (see confine.h). */
static int no_privileges_to_come(struct jail_error *e)
{
	struct __user_cap_header_struct head;
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	size_t i;
	int cap;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return fail(e, "no-new-privs", "PR_SET_NO_NEW_PRIVS");
	/* PR_CAPBSET_READ fails (EINVAL) past the last capability this kernel knows. */
	for (cap = 0; prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0)
			return fail(e, "bounding-set", "dropping the capability bounding set");
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return fail(e, "ambient-set", "clearing the ambient capabilities");
	memset(&head, 0, sizeof(head));
	memset(data, 0, sizeof(data));
	head.version = _LINUX_CAPABILITY_VERSION_3;
	if (syscall(SYS_capget, &head, data) < 0)
		return fail(e, "inheritable-set", "reading the capabilities");
	for (i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		data[i].inheritable = 0;
	if (syscall(SYS_capset, &head, data) < 0)
		return fail(e, "inheritable-set", "clearing the inheritable capabilities");
	return 0;
}

static int switch_from_env(const char *name, int *out, struct jail_error *e)
{
	const char *value = getenv(name);

	if (value == NULL || value[0] == '\0' || strcmp(value, "no") == 0) {
		*out = 0;
		return 0;
	}
	if (strcmp(value, "yes") == 0) {
		*out = 1;
		return 0;
	}
	e->step = "confine-env";
	e->err = EINVAL;
	(void)snprintf(e->what, sizeof(e->what), "%s=%.64s must be yes or no", name, value);
	return -1;
}

int jail_confine_opts_from_env(struct confine_opts *o, struct jail_error *e)
{
	if (switch_from_env("SLURMCTL_PRIVILEGED_JOBS", &o->privileged_jobs, e) < 0)
		return -1;
	return switch_from_env("SLURMCTL_USER_NAMESPACES", &o->user_namespaces, e);
}

int jail_confine_task(const struct confine_opts *o, struct jail_error *e)
{
	if (read_only_sys(e) < 0)
		return -1;
	if (!o->user_namespaces && refuse_user_namespaces(e) < 0)
		return -1;
	if (!o->privileged_jobs && no_privileges_to_come(e) < 0)
		return -1;
	return 0;
}
