// numpy's .npy and .npz files <-> Tensor, for the CLI's inputs, expected outputs and written outputs.
#pragma once
#include <string>
#include <string_view>

#include "interp/tensor.h"
#include "tiers/session.h"

namespace terrace::cli {

// Whether the bytes start as a .npy file ("\x93NUMPY") or a zip archive (an .npz).
bool is_npy(std::string_view bytes);
bool is_zip(std::string_view bytes);

// The tensor in the bytes of a .npy file (format versions 1 to 3): dtype little-endian (or
// byte-order-free) f2, f4, f8, i1, i2, i4, i8, u1, u2, u4, u8 or b1, in C order. InvalidArgument
// naming `what` otherwise: Fortran order, big-endian, another dtype, a header that does not parse,
// data shorter or longer than the shape says.
Tensor tensor_from_npy(std::string_view bytes, const std::string& what);

// The bytes of a .npy file holding `t` (format version 1, or 2 where the header needs it).
// InvalidArgument naming `what` for the dtypes numpy has none for (bfloat16, float8, int4, string).
std::string tensor_to_npy(const Tensor& t, const std::string& what);

// The arrays of an .npz file (numpy.savez: a zip archive of stored .npy members), in archive
// order, each named as its member without ".npy". InvalidArgument naming `what` for a compressed
// member (numpy.savez_compressed: deflate is not read, and the message says to use numpy.savez),
// an encrypted one, a CRC mismatch, or an archive that does not parse.
NamedTensors tensors_from_npz(std::string_view bytes, const std::string& what);

}  // namespace terrace::cli
