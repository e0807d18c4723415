/* What spatch cannot parse in kernel sources without help (its own macro
 * file knows most of the kernel's): the cleanup.h guards, whose bodies
 * are statements. */
#define scoped_guard(...) if (1)
#define scoped_cond_guard(...) if (1)
#define guard(...) int __guard
