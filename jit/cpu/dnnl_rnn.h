// Tier 1's LSTM, GRU and RNN through oneDNN's recurrent primitives (lstm_forward, gru_forward,
// lbr_gru_forward for linear_before_reset = 1, vanilla_rnn_forward), float32, one primitive per
// signature; and the bound on their fp32 rounding that validation allows (dnnl_rnn_error_bound).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "interp/graph.h"
#include "jit/cpu/dnnl_ops.h"

namespace terrace::jit {

// "" when make_dnnl_rnn runs this LSTM, GRU or RNN node, else the reason. oneDNN expresses the
// ONNX ops with their default activations (LSTM: Sigmoid, Tanh, Tanh; GRU: Sigmoid, Tanh; RNN:
// Tanh, Relu or Sigmoid, one for both directions), layout 0 or 1 (batch first: transposed to
// oneDNN's time-major order and back), without clip and input_forget;
// directions forward, reverse and bidirectional; optional B, sequence_lens (oneDNN runs every
// sequence to the full length: a call whose lengths are not all T runs the interpreter's kernel),
// initial_h, initial_c, LSTM's peepholes P; outputs Y, Y_h, Y_c.
std::string dnnl_rnn_can_compile(const Node& node, const std::vector<DType>& dtypes,
                                 const std::vector<std::optional<size_t>>& ranks);

// The node's primitive for its inputs' shapes, `present[i]` telling whether ONNX input i is
// given (run() then takes the given ones in order, as their float32 buffers); its outputs are the
// node's outputs `outputs` (indices 0 Y, 1 Y_h, 2 Y_c) in that order. Weights and biases are
// laid out in oneDNN's gate order (LSTM: ONNX i, o, f, c to oneDNN i, f, c, o; GRU z, r, h as u,
// r, o) each call, or once when `constants[i]` gives their value. Zero-sized tensors and inputs
// that are not all finite run the interpreter's kernel. Throws Error(NotImplemented) for what
// dnnl_rnn_can_compile refuses, Error(InvalidArgument) for shapes that do not fit, naming the node.
std::unique_ptr<DnnlPrimitive> make_dnnl_rnn(const Node& node, const std::vector<bool>& present,
                                             const std::vector<Shape>& shapes,
                                             const std::vector<const Tensor*>& constants,
                                             const std::vector<int>& outputs);

// Per node output (Y, Y_h, Y_c; undefined where the node has none), a bound on |compiled -
// interpreter| for the node's inputs `inputs` (ONNX order, undefined tensors for absent ones),
// float64. It follows the interpreter's recurrence in double, carrying per hidden unit a bound on
// the compiled state's error: each gate's sum of K = input + hidden + 4 fp32 terms (the products,
// Wb + Rb, the bias add, a peephole) errs by gamma_K times the sum of |terms| plus |R| times the error of the
// state it reads; a sigmoid or tanh scales that by its slope (1/4, 1) and adds its own rounding
// (jit/cpu/dnnl_activation.h); products and sums of gates and states carry first and second order
// terms plus one rounding each. A wrong kernel is off by the size of the gates, far outside.
// Where infinite inputs leave no bound (0 * inf), it is +inf: those calls run the interpreter's
// kernel.
std::vector<Tensor> dnnl_rnn_error_bound(const Node& node, const std::vector<Tensor>& inputs);

}  // namespace terrace::jit
