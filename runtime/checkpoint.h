// Checkpoints of a training run (train --checkpoint-dir, --resume): a folder
// per checkpoint, DIR/step_00000010, holding
//
//   model.safetensors   the weights and constants by name (what --save writes;
//                       --load reads it)
//   adam_m.safetensors  AdamW's first and second moments by parameter name
//   adam_v.safetensors  (absent for SGD)
//   state.json          the step, the data position, the dropout counter, the
//                       seed, the model's name and the layout it was written by
//
// written into DIR/step_00000010.tmp and renamed when whole (a rename is
// atomic), then named in DIR/latest (a one-line file, also replaced by a
// rename). So a run killed at any moment leaves the last whole checkpoint as
// latest. The tensors are whole (gathered over the ranks), so a checkpoint
// resumes on any layout of the same model.
//
// This file keeps the folders and state.json; train.c writes the tensors.
#ifndef MTC_RT_CHECKPOINT_H
#define MTC_RT_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data.h"

typedef struct rt_ckpt_state {
  char model[256];      // the model's name
  char layout[256];     // as the program says it ("dp 2 x tp 1, ZeRO-3"), for messages
  char optimizer[16];   // "adamw" or "sgd"
  long step;            // steps done
  uint64_t seed;        // the run's --seed (its data order)
  bool has_data;        // the run read --data: its position follows
  rt_data_pos data;
  long window_tokens;   // tokens per window (the global batch's) when has_data
  long dropout_step;    // the dropout masks' counter (-1: the model has none)
} rt_ckpt_state;

// The folder of step's checkpoint in dir, and its temporary name.
void rt_ckpt_path(const char *dir, long step, bool tmp, char *out, size_t cap);

// Creates dir (and its parents) if need be, and the temporary folder of
// step's checkpoint, emptied of anything an earlier attempt left there.
int rt_ckpt_begin(const char *dir, long step, char *err, size_t cap);

// Writes state.json into the temporary folder, renames it to its final name
// (replacing an older checkpoint of the same step), points DIR/latest at it and
// removes all but the newest `keep` checkpoints (0: keeps all).
int rt_ckpt_commit(const char *dir, const rt_ckpt_state *s, int keep, char *err, size_t cap);

// The checkpoint to resume from: DIR/latest's, or DIR itself when it holds a
// state.json; its folder into path and its state into s.
int rt_ckpt_open(const char *dir, char *path, size_t pcap, rt_ckpt_state *s, char *err,
                 size_t cap);

#endif
