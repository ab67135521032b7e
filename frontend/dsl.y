/* The DSL's grammar: parses the tokens of dsl.l into the tree of dsl_ast.h.
 *
 * A pure (reentrant) LALR(1) parser. It only builds the tree; names, kinds
 * and shapes are checked by the evaluator (dsl.c), which gives better
 * messages with the whole program in view.
 *
 *   program   = toplevel*
 *   toplevel  = block | stmt
 *   block     = "block" ident "(" (ident ("," ident)*)? ")" "{" stmt* "}"
 *   stmt      = "model" ident ";"
 *             | "dim" ident "=" expr ("," ident "=" expr)* ";"
 *             | "input" ident ":" type call? ";"
 *             | "param" ident ":" type ("=" expr)? ";"
 *             | "let" ident ("," ident)* "=" expr ";"
 *             | ident "=" expr ";"
 *             | "return" expr ";"
 *             | "loss" expr ";"
 *   type      = ident? "[" (expr ("," expr)*)? "]"
 *   expr      = mul (("+" | "-") mul)*
 *   mul       = unary (("*" | "/" | "@") unary)*
 *   unary     = "-" unary | postfix
 *   postfix   = primary ("." ident)*
 *   primary   = ident | number | call | "(" expr ")"
 *             | "[" (expr ("," expr)*)? "]"
 *             | "repeat" primary call ("as" ident)?
 *   call      = ident "(" (arg ("," arg)*)? ")"
 *   arg       = ident "=" expr | expr
 */
%define api.pure full
%define api.prefix {dsl_}
%define parse.error detailed
%locations
%param {yyscan_t scanner}
%parse-param {Parser *ps}

%code requires {
#include "dsl_ast.h"
typedef void *yyscan_t;
}

%code provides {
int dsl_lex(DSL_STYPE *lval, DSL_LTYPE *lloc, yyscan_t scanner);
}

%code {
#include <stdarg.h>
#include <string.h>

// Deepest expression tree: the evaluator recurses over it.
#define MAX_DEPTH 1000
// The parser's stack limit (bison's default, pinned so that the error for a
// too deep nesting is at the same token with every bison).
#define YYMAXDEPTH 10000

static void dsl_error(DSL_LTYPE *loc, yyscan_t scanner, Parser *ps, const char *msg);

static Node *new_node(Parser *ps, NodeKind kind, DSL_LTYPE loc) {
  Node *n = ir_alloc(ps->arena, sizeof(Node));
  n->kind = kind;
  n->line = n->sline = loc.first_line;
  n->col = n->scol = loc.first_column;
  n->depth = 1;
  return n;
}

// An expression node over lhs and rhs (rhs may be NULL); NULL when the tree
// gets too deep.
static Node *new_expr(Parser *ps, NodeKind kind, DSL_LTYPE loc, Node *lhs, Node *rhs) {
  Node *n = new_node(ps, kind, loc);
  n->lhs = lhs;
  n->rhs = rhs;
  if (lhs && lhs->sline < n->sline) {  // a binary or postfix op starts at its left operand
    n->sline = lhs->sline;
    n->scol = lhs->scol;
  } else if (lhs && lhs->sline == n->sline && lhs->scol < n->scol) {
    n->scol = lhs->scol;
  }
  int d = lhs ? lhs->depth : 0;
  if (rhs && rhs->depth > d)
    d = rhs->depth;
  n->depth = d + 1;
  if (n->depth > MAX_DEPTH) {
    dsl_fail(ps, n->line, n->col, "expression nested too deeply (more than %d levels)", MAX_DEPTH);
    return NULL;
  }
  return n;
}

// The depth of the deepest node of a list.
static int list_depth(Node *n) {
  int d = 0;
  for (; n; n = n->next)
    if (n->depth > d)
      d = n->depth;
  return d;
}

static NodeList list1(Node *n) {
  return (NodeList){n, n};
}

static NodeList append(NodeList l, Node *n) {
  l.tail->next = n;
  l.tail = n;
  return l;
}

// Appends a chain of nodes (a "dim" statement is one node per definition).
static NodeList splice(NodeList l, Node *chain) {
  Node *last = chain;
  while (last->next)
    last = last->next;
  if (l.head)
    l.tail->next = chain;
  else
    l.head = chain;
  l.tail = last;
  return l;
}

static Node *new_name(Parser *ps, const char *name, DSL_LTYPE loc) {
  Node *n = new_node(ps, ND_NAME, loc);
  n->name = name;
  return n;
}

// f(args) as a node of kind ND_CALL or ND_LIST.
static Node *new_call(Parser *ps, NodeKind kind, const char *name, DSL_LTYPE loc, Node *args) {
  Node *n = new_node(ps, kind, loc);
  n->name = name;
  n->args = args;
  n->depth = list_depth(args) + 1;
  if (n->depth > MAX_DEPTH) {
    dsl_fail(ps, n->line, n->col, "expression nested too deeply (more than %d levels)", MAX_DEPTH);
    return NULL;
  }
  return n;
}

// Fails the parse (YYABORT) when a constructor gave NULL.
#define CHECK(x) do { if (!(x)) YYABORT; } while (0)
}

%union {
  Node *node;
  char *name;
  NodeList list;
}

%token <name> IDENT "identifier"
%token <node> NUMBER "number"
%token MODEL "'model'" DIM "'dim'" INPUT "'input'" PARAM "'param'" BLOCK "'block'"
%token LET "'let'" RETURN "'return'" LOSS "'loss'" REPEAT "'repeat'" AS "'as'"

%type <node> block stmt type expr mul unary postfix primary call arg dim_def kind_opt init_opt
%type <list> toplevels stmts idents idents_opt dim_defs exprs exprs_opt args args_opt

%%

program:
    toplevels               { ps->prog = $1.head; }
  ;

toplevels:
    %empty                  { $$ = (NodeList){NULL, NULL}; }
  | toplevels block         { $$ = splice($1, $2); }
  | toplevels stmt          { $$ = splice($1, $2); }
  ;

block:
    BLOCK IDENT '(' idents_opt ')' '{' stmts '}' {
      $$ = new_node(ps, ND_BLOCK, @2);
      $$->name = $2;
      $$->names = $4.head;
      $$->body = $7.head;
      $$->end_line = @8.first_line;
      $$->end_col = @8.first_column;
    }
  ;

stmts:
    %empty                  { $$ = (NodeList){NULL, NULL}; }
  | stmts stmt              { $$ = splice($1, $2); }
  ;

idents_opt:
    %empty                  { $$ = (NodeList){NULL, NULL}; }
  | idents
  ;

idents:
    IDENT                   { $$ = list1(new_name(ps, $1, @1)); }
  | idents ',' IDENT        { $$ = append($1, new_name(ps, $3, @3)); }
  ;

stmt:
    MODEL IDENT ';'         { $$ = new_node(ps, ND_MODEL, @2); $$->name = $2; }
  | DIM dim_defs ';'        { $$ = $2.head; }
  | INPUT IDENT ':' type kind_opt ';' {
      $$ = new_node(ps, ND_INPUT, @2);
      $$->name = $2;
      $$->type = $4;
      $$->init = $5;
    }
  | PARAM IDENT ':' type init_opt ';' {
      $$ = new_node(ps, ND_PARAM, @2);
      $$->name = $2;
      $$->type = $4;
      $$->init = $5;
    }
  | LET idents '=' expr ';' {
      $$ = new_node(ps, ND_LET, @1);
      $$->names = $2.head;
      $$->lhs = $4;
    }
  | IDENT '=' expr ';'      { $$ = new_node(ps, ND_ASSIGN, @1); $$->name = $1; $$->lhs = $3; }
  | RETURN expr ';'         { $$ = new_node(ps, ND_RETURN, @1); $$->lhs = $2; }
  | LOSS expr ';'           { $$ = new_node(ps, ND_LOSS, @1); $$->lhs = $2; }
  ;

dim_defs:
    dim_def                 { $$ = list1($1); }
  | dim_defs ',' dim_def    { $$ = append($1, $3); }
  ;

dim_def:
    IDENT '=' expr          { $$ = new_node(ps, ND_DIM, @1); $$->name = $1; $$->lhs = $3; }
  ;

kind_opt:
    %empty                  { $$ = NULL; }
  | call
  ;

init_opt:
    %empty                  { $$ = NULL; }
  | '=' expr                { $$ = $2; }
  ;

type:
    '[' exprs_opt ']'       { $$ = new_node(ps, ND_TYPE, @1); $$->args = $2.head; }
  | IDENT '[' exprs_opt ']' { $$ = new_node(ps, ND_TYPE, @1); $$->name = $1; $$->args = $3.head; }
  ;

expr:
    mul
  | expr '+' mul            { CHECK($$ = new_expr(ps, ND_ADD, @2, $1, $3)); }
  | expr '-' mul            { CHECK($$ = new_expr(ps, ND_SUB, @2, $1, $3)); }
  ;

mul:
    unary
  | mul '*' unary           { CHECK($$ = new_expr(ps, ND_MUL, @2, $1, $3)); }
  | mul '/' unary           { CHECK($$ = new_expr(ps, ND_DIV, @2, $1, $3)); }
  | mul '@' unary           { CHECK($$ = new_expr(ps, ND_MATMUL, @2, $1, $3)); }
  ;

unary:
    postfix
  | '-' unary               { CHECK($$ = new_expr(ps, ND_NEG, @1, $2, NULL)); }
  ;

postfix:
    primary
  | postfix '.' IDENT       {
      // Only .T exists; the evaluator says so for any other name.
      CHECK($$ = new_expr(ps, ND_T, @2, $1, NULL));
      $$->name = $3;
    }
  ;

primary:
    IDENT                   { $$ = new_name(ps, $1, @1); }
  | NUMBER
  | call
  | '(' expr ')'            { $$ = $2; $$->sline = @1.first_line; $$->scol = @1.first_column; }
  | '[' exprs_opt ']'       { CHECK($$ = new_call(ps, ND_LIST, NULL, @1, $2.head)); }
  | REPEAT primary call     { CHECK($$ = new_expr(ps, ND_REPEAT, @1, $2, $3)); }
  | REPEAT primary call AS IDENT {
      CHECK($$ = new_expr(ps, ND_REPEAT, @1, $2, $3));
      $$->as = $5;
    }
  ;

call:
    IDENT '(' args_opt ')'  { CHECK($$ = new_call(ps, ND_CALL, $1, @1, $3.head)); }
  ;

args_opt:
    %empty                  { $$ = (NodeList){NULL, NULL}; }
  | args
  ;

args:
    arg                     { $$ = list1($1); }
  | args ',' arg            { $$ = append($1, $3); }
  ;

arg:
    expr                    { CHECK($$ = new_expr(ps, ND_ARG, @1, $1, NULL)); }
  | IDENT '=' expr          { CHECK($$ = new_expr(ps, ND_ARG, @1, $3, NULL)); $$->name = $1; }
  ;

exprs_opt:
    %empty                  { $$ = (NodeList){NULL, NULL}; }
  | exprs
  ;

exprs:
    expr                    { $$ = list1($1); }
  | exprs ',' expr          { $$ = append($1, $3); }
  ;

%%

// A syntax error from the parser: keep bison's text (what was found, what
// was expected) at the offending token.
// At the end of the file, says which bracket is still open.
static void dsl_error(DSL_LTYPE *loc, yyscan_t scanner, Parser *ps, const char *msg) {
  (void)scanner;
  if (strcmp(msg, "memory exhausted") == 0)
    msg = "expression nested too deeply (the parser's stack is full)";
  int i = ps->nopen - 1;
  if (strstr(msg, "unexpected end of file") && i >= 0)
    dsl_fail(ps, loc->first_line, loc->first_column, "%s (the '%c' at %d:%d is not closed)", msg,
             ps->open_ch[i], ps->open_line[i], ps->open_col[i]);
  else
    dsl_fail(ps, loc->first_line, loc->first_column, "%s", msg);
}
