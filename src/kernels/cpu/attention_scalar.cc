#define DI_ISA_NS isa_scalar
#include "kernels/cpu/attention_portable.inc"
