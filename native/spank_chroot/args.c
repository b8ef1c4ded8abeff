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

static int parse_jail(const char *value, struct chroot_args *out, char *err, size_t errlen)
{
	size_t len = strlen(value);

	if (len == 0)
		return fail(err, errlen, "jail= needs a value");
	if (value[0] != '/')
		return fail(err, errlen, "jail=%.*s is not an absolute path", SHOWN, value);
	if (len >= sizeof(out->jail))
		return fail(err, errlen, "jail= is longer than %zu bytes", sizeof(out->jail) - 1);
	/* Trailing slashes would make "/jail/" differ from "/jail" in messages and mount paths. */
	while (len > 1 && value[len - 1] == '/')
		len--;
	if (len == 1)
		return fail(err, errlen, "jail=%.*s is the host's root", SHOWN, value);
	memcpy(out->jail, value, len);
	out->jail[len] = '\0';
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

/* One `key=value`; `seen_*` catch a key given twice. */
static int parse_one(const char *arg, struct chroot_args *out, int *seen_jail, int *seen_old_root, char *err,
		     size_t errlen)
{
	const char *eq = strchr(arg, '=');
	size_t keylen;

	if (eq == NULL)
		return fail(err, errlen, "argument '%.*s' is not key=value", SHOWN, arg);
	keylen = (size_t)(eq - arg);
	if (key_is(arg, keylen, "jail")) {
		if ((*seen_jail)++)
			return fail(err, errlen, "jail= is given more than once");
		return parse_jail(eq + 1, out, err, errlen);
	}
	if (key_is(arg, keylen, "old_root")) {
		if ((*seen_old_root)++)
			return fail(err, errlen, "old_root= is given more than once");
		return parse_old_root(eq + 1, out, err, errlen);
	}
	return fail(err, errlen, "unknown argument '%.*s' (known: jail=, old_root=)", (int)(keylen < SHOWN ? keylen : SHOWN),
		    arg);
}

int chroot_args_parse(int argc, char *const argv[], struct chroot_args *out, char *err, size_t errlen)
{
	int seen_jail = 0, seen_old_root = 0;
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
		if (parse_one(argv[i], out, &seen_jail, &seen_old_root, err, errlen) < 0)
			return -1;
	}
	if (!seen_jail)
		return fail(err, errlen, "jail=<path> is required");
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
