// RUN: %cc -O2 -fPIC -S -o - %runtime/cpu_gemm.c | FileCheck %s --check-prefix=V4
// RUN: %cc -O2 -fPIC -S -o - %runtime/cpu_gemm.c | FileCheck %s --check-prefix=V3
// RUN: %cc -O2 -fPIC -S -o - %runtime/cpu_gemm.c | FileCheck %s --check-prefix=AMX
// RUN: %cc -O2 -fPIC -S -o - %runtime/cpu_gemm.c | FileCheck %s --check-prefix=SPLIT

// The CPU GEMM's micro-kernels (tilec/runtime/cpu_gemm.c), as the C compiler that links every
// library builds them: the loop over K broadcasts each element of A's panel against one row
// of B's (two vectors) into the register tile, and touches no stack (no spilled
// accumulator).  Each kernel has a prefix of its own: GCC orders the functions as it likes.

// AMX, bfloat16 operands (the tile intrinsics are GCC's inline asm): four 16 x 16 float32
// accumulator tiles; each K block of 32 loads two tiles of A and two of B and multiplies
// every pair; the accumulators are stored once, after the loop.
// AMX-LABEL: micro_amx_32x32:
// AMX-COUNT-4: tileloadd {{.*}}, %tmm{{[0-3]}}
// AMX: tileloadd {{.*}}, %tmm4
// AMX: tileloadd {{.*}}, %tmm5
// AMX: tileloadd {{.*}}, %tmm6
// AMX: tileloadd {{.*}}, %tmm7
// AMX: tdpbf16ps %tmm6, %tmm4, %tmm0
// AMX: tdpbf16ps %tmm7, %tmm4, %tmm1
// AMX: tdpbf16ps %tmm6, %tmm5, %tmm2
// AMX: tdpbf16ps %tmm7, %tmm5, %tmm3
// AMX: j{{g|ne|l}} .L
// AMX-NOT: tdpbf16ps
// AMX-COUNT-4: tilestored %tmm{{[0-3]}}
// AMX: .size micro_amx_32x32

// AMX, float16 operands split into hi and lo bfloat16: per K block the four products of
// A's hi tiles by B's hi, then (B's lo loaded over B's hi) by B's lo, then (A's lo over A's
// hi) lo by lo, then (B's hi again) lo by hi: sixteen tile products, ten tile loads.
// SPLIT-LABEL: micro_amx_split_32x32:
// SPLIT-COUNT-4: tileloadd {{.*}}, %tmm{{[0-3]}}
// SPLIT: tileloadd {{.*}}, %tmm4
// SPLIT: tileloadd {{.*}}, %tmm5
// SPLIT: tileloadd {{.*}}, %tmm6
// SPLIT: tileloadd {{.*}}, %tmm7
// SPLIT-COUNT-4: tdpbf16ps %tmm{{[67]}}, %tmm{{[45]}}, %tmm{{[0-3]}}
// SPLIT: tileloadd {{.*}}, %tmm6
// SPLIT: tileloadd {{.*}}, %tmm7
// SPLIT-COUNT-4: tdpbf16ps %tmm{{[67]}}, %tmm{{[45]}}, %tmm{{[0-3]}}
// SPLIT: tileloadd {{.*}}, %tmm4
// SPLIT: tileloadd {{.*}}, %tmm5
// SPLIT-COUNT-4: tdpbf16ps %tmm{{[67]}}, %tmm{{[45]}}, %tmm{{[0-3]}}
// SPLIT: tileloadd {{.*}}, %tmm6
// SPLIT: tileloadd {{.*}}, %tmm7
// SPLIT-COUNT-4: tdpbf16ps %tmm{{[67]}}, %tmm{{[45]}}, %tmm{{[0-3]}}
// SPLIT: j{{g|ne|l}} .L
// SPLIT-NOT: tdpbf16ps
// SPLIT-COUNT-4: tilestored %tmm{{[0-3]}}
// SPLIT: .size micro_amx_split_32x32

// x86-64-v4: 14 x 32, 28 zmm accumulators.
// V4-LABEL: micro_14x32:
// V4: vbroadcastss {{.*}}, %zmm
// V4-NOT: %rsp
// V4-COUNT-28: vfmadd231ps %zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// V4-NOT: %rsp
// V4: jne
// V4-NOT: vfmadd
// V4: .size micro_14x32

// x86-64-v3: 6 x 16, 12 ymm accumulators.
// V3-LABEL: micro_6x16:
// V3: vbroadcastss {{.*}}, %ymm
// V3-NOT: %rsp
// V3-COUNT-12: vfmadd231ps %ymm{{[0-9]+}}, %ymm{{[0-9]+}}, %ymm{{[0-9]+}}
// V3-NOT: %rsp
// V3: jne
// V3-NOT: vfmadd
// V3: .size micro_6x16
