// Built with -mavx2 -mfma -mf16c; only called when the CPU has them.
#define DI_ISA_NS isa_avx2
#include "kernels/cpu/attention_portable.inc"
