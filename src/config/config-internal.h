/* What the files of src/config/ share: the option tables and their typed field access (options.c),
 * the loaders of profiles and tenants (load.c, tenants.c), the file reader (load.c). Nothing here
 * is for other modules (docs/internals/style.md §2). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "config.h"
#include "util/buf.h"
#include "util/err.h"

#define CFG_MAX_FILE_BYTES   (1u << 20)
#define CFG_MAX_PROFILES     64
#define CFG_MAX_TENANTS      4096
#define CFG_MAX_E2B_KEYS     8 /* per tenant */
#define CFG_MAX_TENANT_LIMIT 1000000

/* e2b.templates is well formed and names configured profiles (validate.c). */
int cfg_e2b_templates_check(const struct cfg *c, struct err *reterr);

enum cfg_type {
    CFG_STRING,
    CFG_UINT,
    CFG_U64,
    CFG_DOUBLE,
};

enum {
    CFG_IMMUTABLE = 0,
    /* SIGHUP applies a new value (cfg_reload_commit() exchanges the field; the server tells the
     * module that copied it at start); any other row that changes is kept and logged by name. */
    CFG_RELOADABLE = 1 << 0,
    CFG_NONEMPTY = 1 << 1, /* strings: "" is invalid */
    CFG_SECRET = 1 << 2,   /* a change is reported without its values */
};

struct cfg_option {
    const char *name; /* dotted JSON path */
    const char *def;
    const char *help;
    size_t offset;
    double min, max; /* numeric bounds, inclusive */
    enum cfg_type type;
    unsigned flags;
};

/* The daemon-wide rows (fields of struct cfg) and the rows of each profile (struct cfg_profile). */
extern const struct cfg_option cfg_options[];
extern const size_t cfg_n_options;
extern const struct cfg_option cfg_profile_options[];
extern const size_t cfg_n_profile_options;

/* The field row o describes inside base (a struct cfg or a struct cfg_profile). */
void *cfg_field(void *base, const struct cfg_option *o);
int cfg_check_range(const struct cfg_option *o, double v, struct err *reterr);
/* Sets a field from its textual form (defaults, environment, flags): -EINVAL with a message. */
int cfg_set_from_string(void *base, const struct cfg_option *o, const char *value,
                        struct err *reterr);
/* Sets a field from a JSON value of the row's JSON type; where names the key in messages. */
int cfg_set_from_json(void *base, const struct cfg_option *o, json_t *v, const char *where,
                      struct err *reterr);
/* A new reference to the field's value as JSON. */
json_t *cfg_field_to_json(void *base, const struct cfg_option *o);
/* Whether the field of row o holds the same value in a and b. */
bool cfg_field_equal(const void *a, const void *b, const struct cfg_option *o);
/* The field's value as text for a log line (strings quoted and cut to fit), into out[n]. */
void cfg_field_format(const void *base, const struct cfg_option *o, char *out, size_t n);
/* Exchanges the field of row o between a and b (strings: their pointers). */
void cfg_field_swap(void *a, void *b, const struct cfg_option *o);
/* Sets the field of row o in dst to src's value (strings copied). */
void cfg_field_copy(void *dst, const void *src, const struct cfg_option *o);
void cfg_free_strings(void *base, const struct cfg_option *tab, size_t n);
void cfg_apply_defaults(void *base, const struct cfg_option *tab, size_t n);
const struct cfg_option *cfg_option_find(const char *name);
/* True when some option lives under "prefix." (so "engine" is a section, not an unknown key). */
bool cfg_is_section(const char *prefix);
/* "engine.socket" -> "ENGINE_SOCKET". */
void cfg_env_name(const char *opt, char *out, size_t n);
/* Whether flag or table name name ("engine-socket", "engine.socket") is row opt. */
bool cfg_flag_matches(const char *opt, const char *name);

/* Frees a NULL-terminated array of strings (NULL is fine). */
void cfg_strv_free(char **v);
/* A copy of a NULL-terminated array of strings (NULL for NULL). */
char **cfg_strv_dup(char *const *v);
bool cfg_strv_equal(char *const *a, char *const *b);
void cfg_profile_done(struct cfg_profile *p);
void cfg_profiles_clear(struct cfg *c);
void cfg_tenants_clear(struct cfg *c);
/* Appends a profile named name holding the defaults; returns it (valid until the next add). */
struct cfg_profile *cfg_profile_add(struct cfg *c, const char *name);

int cfg_load_profiles(struct cfg *c, json_t *obj, struct err *reterr);
int cfg_load_tenants(struct cfg *c, json_t *arr, struct err *reterr);
/* Parses len bytes of what (named in messages) as JSON of at most max bytes, duplicate keys
 * refused: 0 with a new reference in *ret, -EMSGSIZE or -EINVAL. */
int cfg_parse_document(const char *what, const char *data, size_t len, size_t max, json_t **ret,
                       struct err *reterr);
/* Reads all of path into *b (at most b->max bytes). Blocking: start-up and reload only. */
int cfg_read_file(const char *path, struct buf *b, struct err *reterr);
