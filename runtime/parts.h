// A bucket's parts among the ranks that shard it: equal, or (a mixed cluster's uneven state
// shares) in a ratio of small whole numbers, one per rank. One definition for the compiler
// (passes/lower.c sizes each rank's part) and the program (comm_*.c, train.c).
#ifndef MTC_RT_PARTS_H
#define MTC_RT_PARTS_H

// The sum of w[0..n), or n when w is NULL (equal parts): count must divide by it.
static inline long rt_parts_total(const int *w, int n) {
  long total = 0;
  for (int i = 0; w && i < n; i++) total += w[i];
  return w ? total : n;
}

// Rank r's part of count elements split among n ranks in the ratio w (NULL: equally): its
// first element, returned, and its size in *len.
static inline long rt_part(long count, const int *w, int n, int r, long *len) {
  long unit = count / rt_parts_total(w, n), before = 0;
  for (int i = 0; i < r; i++) before += w ? w[i] : 1;
  *len = unit * (w ? w[r] : 1);
  return unit * before;
}

#endif
