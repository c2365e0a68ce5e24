// RUN: %cc -O2 -fPIC -S -o - %runtime/cpu_gemm.c | FileCheck %s

// The CPU GEMM's micro-kernels (tilec/runtime/cpu_gemm.c), as the C compiler that links every
// library builds them: the loop over K broadcasts each element of A's panel against one row
// of B's (two vectors) into the register tile, and touches no stack (no spilled
// accumulator).

// AMX, bfloat16 operands (GCC emits it first, its tile intrinsics as inline asm): four
// 16 x 16 float32 accumulator tiles; each K block of 32 loads two tiles of A and two of B
// and multiplies every pair; the accumulators are stored once, after the loop.
// CHECK-LABEL: micro_amx_32x32:
// CHECK-COUNT-4: tileloadd {{.*}}, %tmm{{[0-3]}}
// CHECK: tileloadd {{.*}}, %tmm4
// CHECK: tileloadd {{.*}}, %tmm5
// CHECK: tileloadd {{.*}}, %tmm6
// CHECK: tileloadd {{.*}}, %tmm7
// CHECK: tdpbf16ps %tmm6, %tmm4, %tmm0
// CHECK: tdpbf16ps %tmm7, %tmm4, %tmm1
// CHECK: tdpbf16ps %tmm6, %tmm5, %tmm2
// CHECK: tdpbf16ps %tmm7, %tmm5, %tmm3
// CHECK: j{{g|ne|l}} .L
// CHECK-NOT: tdpbf16ps
// CHECK-COUNT-4: tilestored %tmm{{[0-3]}}
// CHECK: .size micro_amx_32x32

// x86-64-v4: 14 x 32, 28 zmm accumulators.
// CHECK-LABEL: micro_14x32:
// CHECK: vbroadcastss {{.*}}, %zmm
// CHECK-NOT: %rsp
// CHECK-COUNT-28: vfmadd231ps %zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK-NOT: %rsp
// CHECK: jne
// CHECK-NOT: vfmadd
// CHECK: .size micro_14x32

// x86-64-v3: 6 x 16, 12 ymm accumulators.
// CHECK-LABEL: micro_6x16:
// CHECK: vbroadcastss {{.*}}, %ymm
// CHECK-NOT: %rsp
// CHECK-COUNT-12: vfmadd231ps %ymm{{[0-9]+}}, %ymm{{[0-9]+}}, %ymm{{[0-9]+}}
// CHECK-NOT: %rsp
// CHECK: jne
// CHECK-NOT: vfmadd
// CHECK: .size micro_6x16
