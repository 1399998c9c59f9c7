#define DI_ISA_NS isa_scalar
#include "kernels/cpu/gemm_portable.inc"
