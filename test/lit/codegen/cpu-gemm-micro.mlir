// RUN: %cc -O2 -fPIC -S -o - %runtime/cpu_gemm.c | FileCheck %s

// The CPU GEMM's micro-kernels (tilec/runtime/cpu_gemm.c), as the C compiler that links every
// library builds them: the loop over K broadcasts each element of A's panel against one row
// of B's (two vectors) into the register tile, and touches no stack (no spilled
// accumulator).

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
