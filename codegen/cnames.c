// Names from a model in the emitted C. A model file comes from anywhere, so
// every byte of a name is data: it reaches model.c only as an identifier mtc
// makes (cg_ident), inside a string literal (cg_put_string), or in a comment
// after the same escaping (cg_put_comment_name). Nothing else of a name is
// written.
#define _POSIX_C_SOURCE 200809L
#include "codegen.h"

#include <ctype.h>
#include <string.h>

// Identifiers a model's name must not become: C's keywords (C11 and C23; GNU's
// asm and typeof), the macros and typedefs of the headers model.c includes
// (stddef.h, stdint.h, stdbool.h through the runtime's), GCC's predefined
// lowercase macros (GNU modes), and what model.c itself defines at file scope
// or as locals. The runtime's own names start with rt_, RT_, mtc_ or MTC_
// (cg_reserved refuses those prefixes).
static const char *const reserved[] = {
    // C11 keywords (those starting with '_' cannot occur: cg_ident starts with a letter)
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while",
    // C23 keywords and the C11 macros that became them; GNU keywords
    "alignas", "alignof", "bool", "constexpr", "false", "nullptr", "static_assert",
    "thread_local", "true", "typeof", "typeof_unqual", "noreturn", "complex", "imaginary", "I",
    "asm",
    // GCC's predefined macros without underscores (-std=gnu11)
    "linux", "unix", "i386",
    // stddef.h
    "NULL", "offsetof", "size_t", "ptrdiff_t", "wchar_t", "max_align_t",
    // stdint.h: types
    "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t", "uint32_t", "uint64_t",
    "int_least8_t", "int_least16_t", "int_least32_t", "int_least64_t", "uint_least8_t",
    "uint_least16_t", "uint_least32_t", "uint_least64_t", "int_fast8_t", "int_fast16_t",
    "int_fast32_t", "int_fast64_t", "uint_fast8_t", "uint_fast16_t", "uint_fast32_t",
    "uint_fast64_t", "intptr_t", "uintptr_t", "intmax_t", "uintmax_t",
    // stdint.h: macros other than INTn_/UINTn_... (cg_reserved matches those by pattern)
    "SIZE_MAX", "PTRDIFF_MIN", "PTRDIFF_MAX", "SIG_ATOMIC_MIN", "SIG_ATOMIC_MAX", "WCHAR_MIN",
    "WCHAR_MAX", "WINT_MIN", "WINT_MAX",
    // model.c: its functions, tables and types, and the locals of its functions
    "Buffers", "HostBuffers", "bind", "bind_host", "forward", "backward", "update", "init_host",
    "ghost", "train",
    "init_copies", "dims", "inputs", "params", "grad_offsets", "buckets", "b", "hb", "h", "l",
    "arena", "host", "main",
    // the fields of the model table it fills by name (.n_dims = ...), so that a model's name
    // never shares a token with them
    "name", "n_dims", "arena_bytes", "persistent_bytes", "peak_live_bytes", "workspace_bytes",
    "n_inputs", "n_params", "loss_offset", "tokens_per_step", "flops_per_step", "defaults",
    "has_adam_state", "host_bytes", "dp", "tp", "micro_batches", "layout", "n_buckets",
    "n_slots", "model_state_bytes", "model_host_bytes", "swap_host_bytes",
    "planner_state_bytes", "planner_host_bytes", "planner_swap_bytes", "planner_comm_bytes",
    "loss_partial_axes", "grid_side", "tp_sub", "tp_grid", "replica_micro", "dp_parts", "rank_end",
    "planner_comm_micro_bytes", "planner_comm_ghost_bytes", "batch_rows", "replica_rows",
    // the fields of rt_hparams the update reads (h->lr, ...)
    "optimizer", "lr", "beta1", "beta2", "eps", "weight_decay", "step", "grad_scale",
    "planner_device", "planner_step_s", "planner_time_s",
    "logits_offset", "logits_dtype",
    "logits_rows", "logits_vocab", "adam_offsets", "dropout_step_offset", "weights_file", "init_seed", NULL};

static bool starts_with(const char *s, const char *prefix) {
  return !strncmp(s, prefix, strlen(prefix));
}

// stdint.h's limit and constant macros: INT..., UINT... ending in _MAX, _MIN or _C
// (C reserves every such name for the library).
static bool stdint_macro(const char *s) {
  if (!starts_with(s, "INT") && !starts_with(s, "UINT"))
    return false;
  size_t n = strlen(s);
  return (n > 4 && (!strcmp(s + n - 4, "_MAX") || !strcmp(s + n - 4, "_MIN"))) ||
         (n > 2 && !strcmp(s + n - 2, "_C"));
}

static bool runtime_prefix(const char *s) {
  return starts_with(s, "rt_") || starts_with(s, "RT_") || starts_with(s, "mtc_") ||
         starts_with(s, "MTC_");
}

bool cg_reserved(const char *s) {
  for (int i = 0; reserved[i]; i++)
    if (!strcmp(s, reserved[i]))
      return true;
  return runtime_prefix(s) || stdint_macro(s) || s[0] == '_' || !isalpha((unsigned char)s[0]);
}

const char *cg_ident(IrArena *arena, const char *name, IrStrSet *taken, size_t max) {
  size_t n = strnlen(name, max);
  char *s = ir_alloc(arena, n + 20), *p = s;
  if (runtime_prefix(name))
    *p++ = 'm', *p++ = '_';  // the runtime's prefixes: rt_matmul -> m_rt_matmul
  else if (!isalpha((unsigned char)name[0]))
    *p++ = 't';  // a letter first: no digit, and none of C's reserved _X or __ prefixes
  for (size_t k = 0; k < n; k++) {
    unsigned char c = (unsigned char)name[k];
    char out = c < 0x80 && isalnum(c) ? (char)c : '_';
    if (out == '_' && p > s && p[-1] == '_')
      continue;  // one '_' for a run of them
    *p++ = out;
  }
  *p = '\0';
  if (cg_reserved(s))
    *p++ = '_', *p = '\0';  // int -> int_, l -> l_, NULL -> NULL_
  for (int dup = 1; ir_strset_has(taken, s); dup++)
    snprintf(p, 12, p[-1] == '_' ? "%d" : "_%d", dup);
  ir_strset_add(taken, s);
  return s;
}

void cg_put_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '?': fputs("\\?", f); break;  // no trigraph (??/ is a backslash in C11)
    case '\n': fputs("\\n", f); break;
    case '\t': fputs("\\t", f); break;
    default:
      if (*p < 0x20 || *p >= 0x7f)
        fprintf(f, "\\%03o", *p);  // three digits: the next character is never taken in
      else
        fputc(*p, f);
    }
  }
  fputc('"', f);
}

// Characters a name may show in a // comment as they are: no backslash (a
// line splice at a line's end), '?' (trigraphs: ??/ is a backslash), control
// (a newline ends the comment) or non-ASCII bytes.
static bool plain(const char *s) {
  if (!*s)
    return false;
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (!isalnum(*p) && !strchr("_.:-+@[], /", *p))
      return false;
  return true;
}

void cg_put_comment_name(FILE *f, const char *s) {
  if (plain(s))
    fputs(s, f);
  else
    cg_put_string(f, s);  // quoted and escaped: it ends in '"', on this line
}
