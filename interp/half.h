// 16-bit floating-point storage types (IEEE half, bfloat16) with exact conversions to and from float.
#pragma once
#include <cstdint>
#include <cstring>

namespace terrace {

inline float bits_to_float(uint32_t b) { float f; std::memcpy(&f, &b, 4); return f; }
inline uint32_t float_to_bits(float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; }

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(from_float(f)) {}
  operator float() const { return to_float(bits); }

  static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // Inf/NaN
    if (exp == 0) {
      if (man == 0) return bits_to_float(sign);
      float f = float(man) * (1.0f / 16777216.0f);  // subnormal: man * 2^-24
      return sign ? -f : f;
    }
    return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
  }
  // Round to nearest even, as IEEE conversions do.
  static uint16_t from_float(float f) {
    uint32_t x = float_to_bits(f), sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00);  // rounds to Inf
    if (ax < 0x38800000u) {                                  // subnormal or zero in half
      float v = bits_to_float(ax) * 16777216.0f;             // scale by 2^24
      uint32_t m = uint32_t(v);
      float rem = v - float(m);
      if (rem > 0.5f || (rem == 0.5f && (m & 1))) ++m;
      return uint16_t(sign | m);
    }
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1);  // round to nearest even on bit 13
    return uint16_t(sign | ((r - 0x38000000u) >> 13));
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(from_float(f)) {}
  operator float() const { return bits_to_float(uint32_t(bits) << 16); }
  static uint16_t from_float(float f) {
    uint32_t x = float_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40);  // quiet NaN
    return uint16_t((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
  }
};

}  // namespace terrace
