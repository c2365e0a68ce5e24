/* The Cube part of the Ascend C API in the twin (included by kernel_operator.h): the parameter
 * structs and calls of the public API pages (asc-devkit docs/zh/api, 矩阵计算（ISASI）and
 * 核间同步), for Atlas A2 (dav-2201).  Field names, types and defaults follow the pages; the
 * semantics live in twin_cube.cpp. */
#ifndef TILEC_ASCEND_TWIN_CUBE_API_H
#define TILEC_ASCEND_TWIN_CUBE_API_H

namespace AscendC {

/* DataCopy GM -> L1 with ND2NZ (table 3 of its page). */
struct Nd2NzParams {
  Nd2NzParams() {}
  Nd2NzParams(uint16_t ndNumIn, uint16_t nValueIn, uint16_t dValueIn,
              uint16_t srcNdMatrixStrideIn, uint16_t srcDValueIn, uint16_t dstNzC0StrideIn,
              uint16_t dstNzNStrideIn, uint16_t dstNzMatrixStrideIn)
      : ndNum(ndNumIn),
        nValue(nValueIn),
        dValue(dValueIn),
        srcNdMatrixStride(srcNdMatrixStrideIn),
        srcDValue(srcDValueIn),
        dstNzC0Stride(dstNzC0StrideIn),
        dstNzNStride(dstNzNStrideIn),
        dstNzMatrixStride(dstNzMatrixStrideIn) {}
  uint16_t ndNum = 0;
  uint16_t nValue = 0;
  uint16_t dValue = 0;
  uint16_t srcNdMatrixStride = 0;
  uint16_t srcDValue = 0;
  uint16_t dstNzC0Stride = 0;
  uint16_t dstNzNStride = 0;
  uint16_t dstNzMatrixStride = 0;
};

/* LoadData (2D), table 2 of its page: units of 512-byte fractals. */
struct LoadData2DParams {
  LoadData2DParams() {}
  LoadData2DParams(uint16_t startIndexIn, uint8_t repeatTimesIn, uint16_t srcStrideIn,
                   uint8_t sidIn, uint16_t dstGapIn, bool ifTransposeIn, uint8_t addrModeIn)
      : startIndex(startIndexIn),
        repeatTimes(repeatTimesIn),
        srcStride(srcStrideIn),
        sid(sidIn),
        dstGap(dstGapIn),
        ifTranspose(ifTransposeIn),
        addrMode(addrModeIn) {}
  uint16_t startIndex = 0;
  uint8_t repeatTimes = 0;
  uint16_t srcStride = 0;
  uint8_t sid = 0;
  uint16_t dstGap = 0;
  bool ifTranspose = false;
  uint8_t addrMode = 0;
};

/* Mmad, table 4 of its page. */
struct MmadParams {
  uint16_t m = 0;
  uint16_t n = 0;
  uint16_t k = 0;
  bool isBias = false;
  int32_t fmOffset = 0;
  bool enSsparse = false;
  bool enWinogradA = false;
  bool enWinogradB = false;
  uint8_t unitFlag = 0;
  bool kDirectionAlign = false;
  bool cmatrixSource = false;
  bool cmatrixInitVal = true;
};

enum class QuantMode_t { NoQuant, F322F16, F322BF16, DEQF16, VDEQF16, QF322B8_PRE, VQF322B8_PRE,
                         REQ8, VREQ8 };

/* Fixpipe L0C -> GM on dav-2201 (table 4 of its page). */
struct FixpipeParamsV220 {
  uint16_t nSize = 0;
  uint16_t mSize = 0;
  uint16_t srcStride = 0;
  uint32_t dstStride = 0;
  QuantMode_t quantPre = QuantMode_t::NoQuant;
  uint64_t deqScalar = 0;
  uint16_t ndNum = 1;
  uint16_t srcNdStride = 0;
  uint16_t dstNdStride = 0;
  bool reluEn = false;
  uint8_t unitFlag = 0;
  bool isChannelSplit = false;
};

enum class CO2Layout : uint8_t { NZ, ROW_MAJOR, COLUMN_MAJOR };
struct FixpipeConfig {
  CO2Layout format;
};
inline constexpr FixpipeConfig CFG_NZ{CO2Layout::NZ};
inline constexpr FixpipeConfig CFG_ROW_MAJOR{CO2Layout::ROW_MAJOR};

namespace twin_detail {
template <typename T>
constexpr tw::Dt cube_type() {
  static_assert(tw::one_of<T, half, bfloat16_t, float>,
                "the twin's Cube takes half, bfloat16_t or float operands");
  return std::is_same_v<T, half> ? tw::DT_HALF : std::is_same_v<T, bfloat16_t> ? tw::DT_BF16
                                                                              : tw::DT_F32;
}
}  // namespace twin_detail

template <typename T>
inline void DataCopy(const LocalTensor<T>& dst, const GlobalTensor<T>& src, const Nd2NzParams& p,
                     TwinLoc loc = TwinLoc::here()) {
  twin_detail::cube_type<T>();
  tilec_twin::nd2nz("DataCopy", loc, dst.twin_ref(), src.twin_view(), sizeof(T),
                    tilec_twin::Nd2Nz{p.ndNum, p.nValue, p.dValue, p.srcNdMatrixStride,
                                      p.srcDValue, p.dstNzC0Stride, p.dstNzNStride,
                                      p.dstNzMatrixStride});
}

template <typename T>
inline void LoadData(const LocalTensor<T>& dst, const LocalTensor<T>& src,
                     const LoadData2DParams& p, TwinLoc loc = TwinLoc::here()) {
  twin_detail::cube_type<T>();
  const tilec_twin::TensorRef s = src.twin_ref();
  tilec_twin::load2d("LoadData", loc, dst.twin_ref(), &s, nullptr, sizeof(T),
                     tilec_twin::Load2d{p.startIndex, p.repeatTimes, p.srcStride, p.dstGap,
                                        p.ifTranspose});
}
template <typename T>
inline void LoadData(const LocalTensor<T>& dst, const GlobalTensor<T>& src,
                     const LoadData2DParams& p, TwinLoc loc = TwinLoc::here()) {
  twin_detail::cube_type<T>();
  const tilec_twin::GmView g = src.twin_view();
  tilec_twin::load2d("LoadData", loc, dst.twin_ref(), nullptr, &g, sizeof(T),
                     tilec_twin::Load2d{p.startIndex, p.repeatTimes, p.srcStride, p.dstGap,
                                        p.ifTranspose});
}

/* C (L0C, float) = A (L0A) x B (L0B) [+ C]: half x half, bfloat16_t x bfloat16_t and
 * float x float accumulate in float (the page's data types for Atlas A2). */
template <typename T, typename U>
inline void Mmad(const LocalTensor<T>& dst, const LocalTensor<U>& fm, const LocalTensor<U>& filter,
                 const MmadParams& p, TwinLoc loc = TwinLoc::here()) {
  static_assert(std::is_same_v<T, float>, "the twin's Mmad accumulates in float");
  tilec_twin::mmad("Mmad", loc, dst.twin_ref(), fm.twin_ref(), filter.twin_ref(),
                   twin_detail::cube_type<U>(),
                   tilec_twin::MmadShape{p.m, p.n, p.k, p.cmatrixInitVal});
}

template <typename T, typename U, const FixpipeConfig& config = CFG_ROW_MAJOR>
inline void Fixpipe(const GlobalTensor<T>& dst, const LocalTensor<U>& src,
                    const FixpipeParamsV220& p, TwinLoc loc = TwinLoc::here()) {
  static_assert(std::is_same_v<U, float>, "the twin's Fixpipe reads a float L0C");
  const int q = p.quantPre == QuantMode_t::NoQuant    ? 0
                : p.quantPre == QuantMode_t::F322F16  ? 1
                : p.quantPre == QuantMode_t::F322BF16 ? 2
                                                      : 3;
  tilec_twin::fixpipe("Fixpipe", loc, dst.twin_view(), src.twin_ref(),
                      twin_detail::cube_type<T>(),
                      tilec_twin::Fix{p.nSize, p.mSize, p.srcStride, p.dstStride, q, p.reluEn,
                                      p.ndNum, config.format == CO2Layout::ROW_MAJOR});
}

/* Cross-core flags (CrossCoreSetFlag page): the set is issued on `pipe`, after that pipe's
 * earlier instructions. */
template <uint8_t modeId, pipe_t pipe>
inline void CrossCoreSetFlag(uint16_t flagId, TwinLoc loc = TwinLoc::here()) {
  static_assert(pipe != PIPE_S && pipe != PIPE_ALL,
                "CrossCoreSetFlag takes PIPE_V, M, MTE1, MTE2, MTE3 or FIX in modes 0-2");
  tilec_twin::cross_set(modeId, twin_detail::twin_pipe(pipe), flagId, loc);
}
template <uint8_t modeId = 2, pipe_t pipe = PIPE_S>
inline void CrossCoreWaitFlag(uint16_t flagId, TwinLoc loc = TwinLoc::here()) {
  tilec_twin::cross_wait(flagId, loc);
}

}  // namespace AscendC

namespace tilec_twin {
/* Test hook, not Ascend C: the bytes of a local tensor (L1 and L0 have no scalar access). */
template <typename T>
inline void peek(const AscendC::LocalTensor<T>& t, T* out, uint32_t count) {
  peek(t.twin_ref(), out, uint64_t(count) * sizeof(T));
}
}  // namespace tilec_twin

#endif
