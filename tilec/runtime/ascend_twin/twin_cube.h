/* The cube core's machine operations behind the Ascend C twin (twin_cube.cpp defines them):
 * GM -> L1 with ND2NZ, LoadData into L0A/L0B, Mmad into L0C, Fixpipe from L0C to GM.  Their
 * parameters are the API structs' fields; kernel_operator.h's Cube section calls these. */
#ifndef TILEC_ASCEND_TWIN_CUBE_H
#define TILEC_ASCEND_TWIN_CUBE_H

#include "twin_state.h"

namespace tilec_twin {

enum Dt : uint8_t { DT_HALF, DT_BF16, DT_F32 };

struct Nd2Nz {
  uint32_t nd_num, n_value, d_value, src_matrix_stride, src_d_value, dst_c0_stride, dst_n_stride,
      dst_matrix_stride;
};
void nd2nz(const char* op, Loc loc, const TensorRef& dst, GmView src, uint32_t elem,
           const Nd2Nz& p);

struct Load2d {
  uint32_t start, repeat, src_stride, dst_gap;
  bool transpose;
};
/* From L1 (src_l1) or from GM (src_gm): one of them is null. */
void load2d(const char* op, Loc loc, const TensorRef& dst, const TensorRef* src_l1,
            const GmView* src_gm, uint32_t elem, const Load2d& p);

struct MmadShape {
  uint32_t m, n, k;
  bool init;  // cmatrixInitVal: C = A x B (else C += A x B)
};
void mmad(const char* op, Loc loc, const TensorRef& dst, const TensorRef& fm,
          const TensorRef& filter, Dt t, const MmadShape& s);

struct Fix {
  uint32_t n, m, src_stride, dst_stride;
  int quant;  // 0 NoQuant, 1 F322F16, 2 F322BF16, else another mode
  bool relu;
  uint32_t nd_num;
  bool row_major;  // CFG_ROW_MAJOR (NZ2ND)
};
void fixpipe(const char* op, Loc loc, GmView dst, const TensorRef& src, Dt out, const Fix& p);

/* Test hook, not Ascend C: copy a local tensor's bytes out unchecked (L1 and L0 have no
 * scalar access). */
void peek(const TensorRef& t, void* out, uint64_t bytes);

}  // namespace tilec_twin

#endif
