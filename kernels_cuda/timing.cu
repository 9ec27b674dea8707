// timing — the spin kernel behind qwenref/timing.py's queued measurements.
//
// spin_wait: one thread busy-waits `ns` nanoseconds on %globaltimer (sleeping 500 ns between
//   reads, so it takes no issue slots from other work). Launched just before a timed batch, it
//   holds the GPU while the host queues the batch's launches; the CUDA events around the batch
//   then time the GPU, not the host's launch rate. Launch: grid 1, block 1; moves no bytes.
extern "C" __global__ void spin_wait(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(500);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
