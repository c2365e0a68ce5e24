/* Scalar types of the Ascend C CPU twin: `half` (IEEE binary16) and `bfloat16_t`, and the
 * rounding of a float32 into them (and into int32 / float32) under every Cast RoundMode.
 *
 * Written for tilec from the public Ascend C documentation (Cast: "precision conversion
 * rules"); no CANN code.  Both types are 2-byte trivially copyable wrappers of their bits,
 * so arrays of them have the same layout as NumPy's float16 / ml_dtypes' bfloat16.
 * Arithmetic goes through float: `a * b` is a float; assigning it back rounds to nearest even.
 */
#ifndef TILEC_ASCEND_TWIN_TYPES_H
#define TILEC_ASCEND_TWIN_TYPES_H

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tilec_twin {

/* The rounding of Cast (RoundMode minus CAST_NONE, which each conversion maps to one of these). */
enum class Rounding { RINT, FLOOR, CEIL, ROUND, TRUNC, ODD };

constexpr uint32_t float_bits(float f) { return __builtin_bit_cast(uint32_t, f); }
constexpr float bits_float(uint32_t b) { return __builtin_bit_cast(float, b); }

/* float32 -> a binary format with `ebits` exponent and `mbits` mantissa bits (half: 5/10,
 * bfloat16: 8/7), rounded by `mode`.  Overflow gives the largest finite value when `saturate`
 * (what the Cast documentation says the hardware does by default), otherwise what IEEE 754
 * gives for the direction (inf when rounding away from zero).  NaN stays a quiet NaN. */
constexpr uint16_t narrow_float(float f, int ebits, int mbits, Rounding mode, bool saturate) {
  const uint32_t b = float_bits(f);
  const uint32_t sign = b >> 31;
  const uint32_t e = (b >> 23) & 0xFFu;
  const uint32_t m = b & 0x7FFFFFu;
  const uint32_t sign_bit = sign << (ebits + mbits);
  const uint32_t emax_field = (1u << ebits) - 1;
  const uint32_t mant_mask = (1u << mbits) - 1;
  const uint16_t inf = uint16_t(sign_bit | (emax_field << mbits));
  const uint16_t max_finite = uint16_t(sign_bit | ((emax_field - 1) << mbits) | mant_mask);
  if (e == 0xFFu) return m ? uint16_t(inf | (1u << (mbits - 1))) : inf;
  if (e == 0 && m == 0) return uint16_t(sign_bit);

  const int bias = (1 << (ebits - 1)) - 1;
  const int exp = e ? int(e) - 127 : -126;  // value = sig * 2^(exp - 23)
  const uint64_t sig = e ? (m | 0x800000u) : m;
  const int lead = exp - 23 + (63 - __builtin_clzll(sig));  // floor(log2 |value|)
  bool overflow = lead > bias;
  uint32_t r = 0;
  if (!overflow) {
    const int target_exp = lead < 1 - bias ? 1 - bias : lead;  // subnormal below the normal range
    const int shift = target_exp - mbits - exp + 23;           // right shift of sig
    uint64_t q = 0, rem = 0, half_point = 0;
    if (shift <= 0) {
      q = sig << -shift;
    } else if (shift >= 62) {
      rem = sig;
      half_point = uint64_t(1) << 61;  // larger than any sig: below half an ulp
    } else {
      q = sig >> shift;
      rem = sig & ((uint64_t(1) << shift) - 1);
      half_point = uint64_t(1) << (shift - 1);
    }
    r = (uint32_t(target_exp + bias - 1) << mbits) + uint32_t(q);
    bool up = false;
    if (rem) {
      switch (mode) {
        case Rounding::RINT: up = rem > half_point || (rem == half_point && (r & 1u)); break;
        case Rounding::ROUND: up = rem >= half_point; break;
        case Rounding::TRUNC: up = false; break;
        case Rounding::FLOOR: up = sign != 0; break;
        case Rounding::CEIL: up = sign == 0; break;
        case Rounding::ODD: up = (r & 1u) == 0; break;
      }
    }
    r += up ? 1u : 0u;
    overflow = r >= (emax_field << mbits);
  }
  if (overflow) {
    if (saturate) return max_finite;
    switch (mode) {
      case Rounding::RINT:
      case Rounding::ROUND: return inf;
      case Rounding::FLOOR: return sign ? inf : max_finite;
      case Rounding::CEIL: return sign ? max_finite : inf;
      default: return max_finite;
    }
  }
  return uint16_t(sign_bit | r);
}

/* The exact float32 value of a binary16 / bfloat16 bit pattern. */
constexpr float widen_float(uint16_t h, int ebits, int mbits) {
  const uint32_t sign = uint32_t(h >> (ebits + mbits)) << 31;
  const uint32_t emax_field = (1u << ebits) - 1;
  uint32_t e = (h >> mbits) & emax_field;
  uint32_t m = h & ((1u << mbits) - 1);
  const int bias = (1 << (ebits - 1)) - 1;
  if (e == emax_field) return bits_float(sign | 0x7F800000u | (m << (23 - mbits)));
  if (e == 0) {
    if (m == 0) return bits_float(sign);
    int exp = 1 - bias;
    while (!(m & (1u << mbits))) {
      m <<= 1;
      --exp;
    }
    m &= (1u << mbits) - 1;
    return bits_float(sign | (uint32_t(exp + 127) << 23) | (m << (23 - mbits)));
  }
  return bits_float(sign | (uint32_t(int(e) - bias + 127) << 23) | (m << (23 - mbits)));
}

constexpr uint16_t f32_to_f16(float f, Rounding mode = Rounding::RINT, bool saturate = false) {
  return narrow_float(f, 5, 10, mode, saturate);
}
constexpr float f16_to_f32(uint16_t h) { return widen_float(h, 5, 10); }
constexpr uint16_t f32_to_bf16(float f, Rounding mode = Rounding::RINT, bool saturate = false) {
  return narrow_float(f, 8, 7, mode, saturate);
}
constexpr float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }

/* float -> float rounded to an integral value. */
inline float round_integral(float x, Rounding mode) {
  switch (mode) {
    case Rounding::FLOOR: return std::floor(x);
    case Rounding::CEIL: return std::ceil(x);
    case Rounding::ROUND: return std::round(x);
    case Rounding::TRUNC: return std::trunc(x);
    default: return std::nearbyint(x);  // RINT: the default FP environment rounds to even
  }
}

/* float -> int32, rounded by `mode`, saturating; NaN gives 0 (the hardware's choice is not
 * documented). */
inline int32_t float_to_int32(float x, Rounding mode) {
  if (std::isnan(x)) return 0;
  const double r = double(round_integral(x, mode));
  if (r >= 2147483647.0) return std::numeric_limits<int32_t>::max();
  if (r <= -2147483648.0) return std::numeric_limits<int32_t>::min();
  return int32_t(r);
}

/* int32 -> float32 rounded by `mode` (|i| > 2^24 is inexact). */
inline float int32_to_float(int32_t i, Rounding mode) {
  const float nearest = float(i);  // round to nearest even
  const double exact = double(i);
  if (double(nearest) == exact) return nearest;
  const float below = double(nearest) < exact ? nearest : std::nextafter(nearest, -INFINITY);
  const float above = double(nearest) > exact ? nearest : std::nextafter(nearest, INFINITY);
  switch (mode) {
    case Rounding::FLOOR: return below;
    case Rounding::CEIL: return above;
    case Rounding::TRUNC: return i < 0 ? above : below;
    case Rounding::ROUND: {
      const double d_below = exact - double(below), d_above = double(above) - exact;
      if (d_below == d_above) return i < 0 ? below : above;
      return d_below < d_above ? below : above;
    }
    case Rounding::ODD: return (float_bits(below) & 1u) ? below : above;
    default: return nearest;
  }
}

template <typename A>
using if_arithmetic = std::enable_if_t<std::is_arithmetic_v<A>, int>;

}  // namespace tilec_twin

/* IEEE 754 binary16, the `half` of Ascend C.  Conversions from any arithmetic type round to
 * nearest even (overflow to inf); the conversion to float is exact. */
struct half {
  uint16_t bits;
  half() = default;
  template <typename A, tilec_twin::if_arithmetic<A> = 0>
  constexpr half(A value) : bits(tilec_twin::f32_to_f16(float(value))) {}
  constexpr operator float() const { return tilec_twin::f16_to_f32(bits); }
  static constexpr half from_bits(uint16_t b) {
    half h{};
    h.bits = b;
    return h;
  }
  half& operator+=(float v) { return *this = half(float(*this) + v); }
  half& operator-=(float v) { return *this = half(float(*this) - v); }
  half& operator*=(float v) { return *this = half(float(*this) * v); }
  half& operator/=(float v) { return *this = half(float(*this) / v); }
};

/* bfloat16: the top 16 bits of a float32; conversions from float round to nearest even. */
struct bfloat16_t {
  uint16_t bits;
  bfloat16_t() = default;
  template <typename A, tilec_twin::if_arithmetic<A> = 0>
  constexpr bfloat16_t(A value) : bits(tilec_twin::f32_to_bf16(float(value))) {}
  constexpr operator float() const { return tilec_twin::bf16_to_f32(bits); }
  static constexpr bfloat16_t from_bits(uint16_t b) {
    bfloat16_t h{};
    h.bits = b;
    return h;
  }
  bfloat16_t& operator+=(float v) { return *this = bfloat16_t(float(*this) + v); }
  bfloat16_t& operator-=(float v) { return *this = bfloat16_t(float(*this) - v); }
  bfloat16_t& operator*=(float v) { return *this = bfloat16_t(float(*this) * v); }
  bfloat16_t& operator/=(float v) { return *this = bfloat16_t(float(*this) / v); }
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>, "half layout");
static_assert(sizeof(bfloat16_t) == 2 && std::is_trivially_copyable_v<bfloat16_t>, "bf16 layout");

#endif
