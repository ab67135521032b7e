// The DSL's syntax tree, shared by the parser (dsl.y, which builds it) and
// the evaluator (dsl.c, which walks it and builds IR).
//
// Every node lives in the parse's IrArena and is freed with it. Statements,
// arguments, list elements and names are chained through `next`.
#ifndef MTC_FRONTEND_DSL_AST_H
#define MTC_FRONTEND_DSL_AST_H

#include <stdbool.h>
#include <stdint.h>

#include "ir.h"

typedef enum NodeKind {
  // ---- expressions ----
  ND_NUM,     // 42, 0.02
  ND_NAME,    // x, C
  ND_ADD,     // lhs + rhs
  ND_SUB,     // lhs - rhs
  ND_MUL,     // lhs * rhs
  ND_DIV,     // lhs / rhs
  ND_MATMUL,  // lhs @ rhs
  ND_NEG,     // -lhs
  ND_T,       // lhs.T
  ND_CALL,    // name(args)
  ND_LIST,    // [args]
  ND_REPEAT,  // repeat lhs name(args) as as_name
  ND_ARG,     // a call argument: name = lhs (name NULL: positional)
  // ---- declarations and statements ----
  ND_MODEL,   // model name;
  ND_DIM,     // dim name = lhs;   (one node per definition)
  ND_TYPE,    // name[args]  (name: dtype or NULL)
  ND_INPUT,   // input name: type kind;     (kind in init, may be NULL)
  ND_PARAM,   // param name: type = init;   (init may be NULL)
  ND_BLOCK,   // block name(params) { body }
  ND_LET,     // let names = lhs;
  ND_ASSIGN,  // name = lhs;
  ND_RETURN,  // return lhs;
  ND_LOSS,    // loss lhs;
} NodeKind;

typedef struct Node Node;
struct Node {
  NodeKind kind;
  Node *next;          // next statement, argument, list element or name
  int line, col;       // where it is: the operator of a binary op, else its first token
  int sline, scol;     // where the whole expression starts (its '(' when parenthesized)
  int depth;           // expression nesting depth (bounded by the parser)
  const char *name;    // ND_NAME, ND_CALL, ND_REPEAT (block), ND_ARG, decls
  Node *lhs, *rhs;     // operands; ND_REPEAT: lhs = count
  Node *args;          // ND_CALL, ND_REPEAT, ND_LIST, ND_TYPE
  Node *names;         // ND_LET: the bound names (ND_NAME); ND_BLOCK: params
  Node *body;          // ND_BLOCK: statements
  Node *type;          // ND_INPUT, ND_PARAM
  Node *init;          // ND_INPUT: data kind; ND_PARAM: initializer
  const char *as;      // ND_REPEAT: the `as NAME` prefix (NULL: block name)
  int end_line, end_col; // ND_BLOCK: its closing '}'
  double num;          // ND_NUM
  int64_t ival;        // ND_NUM when is_int
  bool is_int;         // ND_NUM: written without '.' or exponent
};

// A list under construction (the parser appends in O(1)).
typedef struct NodeList {
  Node *head, *tail;
} NodeList;

// State shared by the scanner and the parser.
typedef struct Parser {
  IrArena *arena;      // the AST's arena
  IrDiag *diag;
  const char *file;    // the caller's file name (outlives the parse)
  bool failed;         // an error was reported (only the first is kept)
  Node *prog;          // the result: the top-level statements
  int line, col;       // scanner position of the next character
  int nopen;           // brackets ( [ { open in the scanner; the innermost 256:
  char open_ch[256];
  int open_line[256], open_col[256];
} Parser;

// Reports an error at line:col unless one was reported already; returns -1.
int dsl_fail(Parser *ps, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

// Scans and parses text (dsl.l runs the generated scanner and parser); 0 on
// success with ps->prog set, -1 with ps->diag filled.
int dsl_run(Parser *ps, const char *text);

#endif
