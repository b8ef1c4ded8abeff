#include "args.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Long values are cut in messages so a runaway argument cannot flood the logs. */
#define SHOWN 64

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err != NULL && errlen > 0) {
		va_list ap;

		va_start(ap, fmt);
		(void)vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* An absolute path other than "/", trailing slashes dropped (they would make "/a/" differ from "/a" in messages). */
static int parse_path(const char *key, const char *value, char *dst, size_t dstlen, char *err, size_t errlen)
{
	size_t len = strlen(value);

	if (len == 0)
		return fail(err, errlen, "%s= needs a value", key);
	if (value[0] != '/')
		return fail(err, errlen, "%s=%.*s is not an absolute path", key, SHOWN, value);
	if (len >= dstlen)
		return fail(err, errlen, "%s= is longer than %zu bytes", key, dstlen - 1);
	while (len > 1 && value[len - 1] == '/')
		len--;
	if (len == 1)
		return fail(err, errlen, "%s=%.*s is the host's root", key, SHOWN, value);
	memcpy(dst, value, len);
	dst[len] = '\0';
	return 0;
}

static int parse_old_root(const char *value, struct chroot_args *out, char *err, size_t errlen)
{
	size_t len = strlen(value);

	if (len == 0)
		return fail(err, errlen, "old_root= needs a value");
	if (len >= sizeof(out->old_root))
		return fail(err, errlen, "old_root= is longer than %zu bytes", sizeof(out->old_root) - 1);
	if (strchr(value, '/') != NULL || strcmp(value, ".") == 0 || strcmp(value, "..") == 0)
		return fail(err, errlen, "old_root=%.*s must be a single directory name inside the jail", SHOWN, value);
	memcpy(out->old_root, value, len + 1);
	return 0;
}

static int key_is(const char *arg, size_t keylen, const char *key)
{
	return keylen == strlen(key) && strncmp(arg, key, keylen) == 0;
}

enum { SEEN_JAIL, SEEN_OLD_ROOT, SEEN_JOB_TMP, SEEN_JOB_SHM, SEEN_KEYS };

/* One `key=value`; `seen` catches a key given twice. */
static int parse_one(const char *arg, struct chroot_args *out, int seen[SEEN_KEYS], char *err, size_t errlen)
{
	static const char *const keys[SEEN_KEYS] = {"jail", "old_root", "job_tmp", "job_shm"};
	const char *eq = strchr(arg, '=');
	size_t keylen;
	int k;

	if (eq == NULL)
		return fail(err, errlen, "argument '%.*s' is not key=value", SHOWN, arg);
	keylen = (size_t)(eq - arg);
	for (k = 0; k < SEEN_KEYS && !key_is(arg, keylen, keys[k]); k++)
		;
	if (k == SEEN_KEYS)
		return fail(err, errlen, "unknown argument '%.*s' (known: jail=, old_root=, job_tmp=, job_shm=)",
			    (int)(keylen < SHOWN ? keylen : SHOWN), arg);
	if (seen[k]++)
		return fail(err, errlen, "%s= is given more than once", keys[k]);
	switch (k) {
	case SEEN_JAIL:
		return parse_path("jail", eq + 1, out->jail, sizeof(out->jail), err, errlen);
	case SEEN_OLD_ROOT:
		return parse_old_root(eq + 1, out, err, errlen);
	case SEEN_JOB_TMP:
		return parse_path("job_tmp", eq + 1, out->job_tmp, sizeof(out->job_tmp), err, errlen);
	default:
		return parse_path("job_shm", eq + 1, out->job_shm, sizeof(out->job_shm), err, errlen);
	}
}

int chroot_args_parse(int argc, char *const argv[], struct chroot_args *out, char *err, size_t errlen)
{
	int seen[SEEN_KEYS] = {0};
	int i;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (out == NULL)
		return fail(err, errlen, "internal error: no place for the parsed arguments");
	memset(out, 0, sizeof(*out));
	(void)snprintf(out->old_root, sizeof(out->old_root), "%s", CHROOT_DEFAULT_OLD_ROOT);
	if (argc < 0 || (argc > 0 && argv == NULL))
		return fail(err, errlen, "internal error: malformed argument vector");
	for (i = 0; i < argc; i++) {
		if (argv[i] == NULL)
			return fail(err, errlen, "argument %d is missing", i + 1);
		if (parse_one(argv[i], out, seen, err, errlen) < 0)
			return -1;
	}
	if (!seen[SEEN_JAIL])
		return fail(err, errlen, "jail=<path> is required");
	/* One without the other would isolate half of what a job keeps to itself. */
	if (seen[SEEN_JOB_TMP] != seen[SEEN_JOB_SHM])
		return fail(err, errlen, "job_tmp= and job_shm= go together");
	return 0;
}

#define MAX_WORDS 32

int chroot_args_from_plugstack(const char *plugstack, struct chroot_args *out, char *plugin, char *err, size_t errlen)
{
	char line[4096];
	FILE *f = fopen(plugstack, "re");

	if (f == NULL)
		return fail(err, errlen, "cannot read %.*s: %s", PATH_MAX, plugstack, strerror(errno));
	while (fgets(line, (int)sizeof(line), f) != NULL) {
		char *words[MAX_WORDS], *save = NULL, *w = strtok_r(line, " \t\n", &save);
		int n = 0, rc;

		if (w == NULL || (strcmp(w, "required") != 0 && strcmp(w, "optional") != 0))
			continue;
		w = strtok_r(NULL, " \t\n", &save);
		if (w == NULL || strcmp(basename(w), "chroot.so") != 0)
			continue;
		if (strlen(w) >= PATH_MAX) {
			(void)fclose(f);
			return fail(err, errlen, "the chroot.so path in %.*s is too long", PATH_MAX, plugstack);
		}
		memcpy(plugin, w, strlen(w) + 1);
		while ((w = strtok_r(NULL, " \t\n", &save)) != NULL && w[0] != '#') {
			if (n == MAX_WORDS) {
				(void)fclose(f);
				return fail(err, errlen, "more than %d arguments to chroot.so in %.*s", MAX_WORDS, PATH_MAX,
					    plugstack);
			}
			words[n++] = w;
		}
		(void)fclose(f);
		rc = chroot_args_parse(n, words, out, err, errlen);
		return rc;
	}
	(void)fclose(f);
	return fail(err, errlen, "no line loading chroot.so in %.*s", PATH_MAX, plugstack);
}
