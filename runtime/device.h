// The memory the kernels run on: host memory in the CPU build (device_cpu.c),
// one GPU's in the CUDA build (device_cuda.cu). train.c reads and writes the
// arena only through a host copy of it, the stage: it fills the stage's bytes
// at the arena's offsets (weights, inputs) and puts them to the device, and
// gets from the device the bytes it reads (the loss, weights to save). In the
// CPU build the stage is the arena itself and putting and getting do nothing.
// Errors end the program with one message (this is a program's runtime).
#ifndef MTC_RT_DEVICE_H
#define MTC_RT_DEVICE_H

// Picks this rank's device (its place among the ranks of its node, from
// mpirun's environment, modulo the devices there) and starts it. Before any
// other call, and before rt_comm_init (whose NCCL communicators live on it).
void rt_device_init(void);
// "cpu", or the GPU's name.
const char *rt_device_name(void);

// What a device profile says of the device (mtc calibrate): its memory, the
// cache its kernels share (a GPU's L2; a CPU core's L2, 0 where not known),
// and its parallel units (a GPU's SMs; the CPU's cores online).
typedef struct RtDeviceInfo {
  int gpu;   // 1 in the CUDA build
  long mem_bytes, cache_bytes, units;
} RtDeviceInfo;
RtDeviceInfo rt_device_info(void);

// The arena, zeroed, and beside it the workspace the GPU kernels take their
// scratch from (ignored by the CPU build).
char *rt_device_alloc(long arena_bytes, long workspace_bytes);
// The bytes rt_device_alloc takes for them: the plan's device memory.
long rt_device_planned(long arena_bytes, long workspace_bytes);
void rt_device_free(char *arena, long arena_bytes);
// The arena's host copy (the arena itself in the CPU build): zero until
// written, its pages taken only where written.
char *rt_device_stage(char *arena, long arena_bytes);
void rt_device_free_stage(char *stage, char *arena, long arena_bytes);

// stage[off, off + bytes) to the arena, and back.
void rt_device_put(char *arena, const char *stage, long off, long bytes);
void rt_device_get(char *stage, const char *arena, long off, long bytes);
// Waits until the device has finished what was launched (step times).
void rt_device_sync(void);

// Host memory the device copies to and from (offloaded optimizer state):
// pinned in the CUDA build. Zeroed.
char *rt_device_host_alloc(long bytes);
void rt_device_host_free(char *p);

// Memory as measured: the bytes of device memory the arena and workspace took
// (CUDA build: the device's free memory before and after their allocation;
// CPU build: the arena's resident pages), and a line that names how it was
// measured.
long rt_device_measured(const char *arena, long arena_bytes);
const char *rt_device_measure_how(void);
// The device memory taken since just before the arena's allocation, the
// arena included: beyond it, CUDA's code loaded at first launch and whatever
// a library allocated on its own. -1 in the CPU build.
long rt_device_measured_since(void);

#endif
