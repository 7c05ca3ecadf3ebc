// Shapes and work of ops for the cost model: GEMM and convolution dims,
// FLOPs and bytes moved per op class.
#include "planner/op_work.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace echo::planner {
namespace {

// ------------------------------------------------------------ tensor helpers

double Product(const std::vector<int64_t>& dims, size_t begin = 0,
               size_t end = std::string::npos) {
  double product = 1;
  for (size_t i = begin; i < std::min(end, dims.size()); ++i) {
    product *= static_cast<double>(dims[i]);
  }
  return product;
}

double Elements(const Tensor& t) {
  if (HasKnownShape(t)) return Product(t.shape);
  const int64_t element_size = DTypeSize(t.dtype);
  return element_size > 0 ? static_cast<double>(t.size_bytes) / element_size
                          : 0;
}

double IoBytes(const Graph& graph, OpIndex o) {
  double bytes = 0;
  for (TensorIndex t : graph.DistinctInputs(o)) {
    bytes += LogicalBytes(graph.tensor(t));
  }
  for (TensorIndex t : graph.op(o).outputs)
    bytes += LogicalBytes(graph.tensor(t));
  return bytes;
}

double LargestInputElements(const Graph& graph, const Op& op) {
  double largest = 0;
  for (TensorIndex t : op.inputs) {
    largest = std::max(largest, Elements(graph.tensor(t)));
  }
  return largest;
}

double OutputElements(const Graph& graph, const Op& op) {
  double total = 0;
  for (TensorIndex t : op.outputs) total += Elements(graph.tensor(t));
  return total;
}

// The dtype the op computes in: its first typed output, else input.
DType ComputeDType(const Graph& graph, const Op& op) {
  for (const auto* list : {&op.outputs, &op.inputs}) {
    for (TensorIndex t : *list) {
      if (graph.tensor(t).dtype != DType::kUnspecified) {
        return graph.tensor(t).dtype;
      }
    }
  }
  return DType::kFloat32;
}

// ------------------------------------------------------------ attributes

const std::string* FindAttr(const Op& op, absl::string_view key) {
  auto it = op.attributes.find(std::string(key));
  return it == op.attributes.end() ? nullptr : &it->second;
}

std::vector<std::string> AttrItems(const std::string& value) {
  std::vector<std::string> items;
  for (absl::string_view item :
       absl::StrSplit(value, absl::ByAnyChar(",[]() "), absl::SkipEmpty())) {
    items.emplace_back(item);
  }
  return items;
}

std::optional<std::vector<int64_t>> IntListAttr(const Op& op,
                                                absl::string_view key) {
  const std::string* value = FindAttr(op, key);
  if (value == nullptr) return std::nullopt;
  std::vector<int64_t> ints;
  for (const std::string& item : AttrItems(*value)) {
    int64_t parsed = 0;
    if (!absl::SimpleAtoi(item, &parsed)) return std::nullopt;
    ints.push_back(parsed);
  }
  if (ints.empty()) return std::nullopt;
  return ints;
}

std::optional<int64_t> IntAttr(const Op& op, absl::string_view key) {
  std::optional<std::vector<int64_t>> ints = IntListAttr(op, key);
  if (!ints || ints->size() != 1) return std::nullopt;
  return ints->front();
}

bool FlagAttr(const Op& op, absl::string_view key) {
  const std::string* value = FindAttr(op, key);
  bool flag = false;
  return value != nullptr && absl::SimpleAtob(*value, &flag) && flag;
}

// A per-spatial-dim attribute: one value repeats; absent gives `fallback`.
std::optional<std::vector<int64_t>> SpatialAttr(const Op& op,
                                                absl::string_view key,
                                                size_t spatial,
                                                int64_t fallback) {
  if (FindAttr(op, key) == nullptr) {
    return std::vector<int64_t>(spatial, fallback);
  }
  std::optional<std::vector<int64_t>> ints = IntListAttr(op, key);
  if (!ints) return std::nullopt;
  if (ints->size() == 1) return std::vector<int64_t>(spatial, ints->front());
  if (ints->size() != spatial) return std::nullopt;
  return ints;
}

bool AllPositive(const std::vector<int64_t>& dims) {
  return std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d > 0; });
}

bool Finite(double value) { return value >= 0 && std::isfinite(value); }

// Framework view ops: no kernel runs. Ops that may copy (reshape, flatten)
// are free only when the client marks their outputs as views (size 0).
constexpr absl::string_view kViewOpTypes[] = {
    "aten::view",       "aten::_unsafe_view", "aten::view_as",
    "aten::t",          "aten::transpose",    "aten::permute",
    "aten::expand",     "aten::expand_as",    "aten::squeeze",
    "aten::unsqueeze",  "aten::slice",        "aten::select",
    "aten::as_strided", "aten::detach",       "aten::alias",
    "aten::narrow",     "aten::split",        "aten::split_with_sizes",
    "aten::chunk",      "aten::unbind",       "aten::diagonal",
    "aten::movedim",
};

bool IsView(const Graph& graph, const Op& op) {
  if (std::find(std::begin(kViewOpTypes), std::end(kViewOpTypes), op.op_type) !=
      std::end(kViewOpTypes)) {
    return true;
  }
  return !op.outputs.empty() &&
         std::all_of(op.outputs.begin(), op.outputs.end(),
                     [&graph](TensorIndex t) {
                       return graph.tensor(t).size_bytes == 0;
                     });
}

// FLOPs per element for memory-bound classes, and what counts the elements.
double DefaultFlopsPerElement(OpClass op_class) {
  switch (op_class) {
    case OpClass::kRandom:
      return 2;           // generate, then mask
    case OpClass::kNorm:  // mean, variance, normalize, affine
    case OpClass::kSoftmax:
      return 5;  // max, subtract, exp, sum, divide
    case OpClass::kElementwise:
    case OpClass::kReduction:
      return 1;
    default:
      return 0;
  }
}

// Adds the bytes of an operand of 8-byte elements shaped `dims` then `more`
// to `bytes`; false when that overflows int64. Shapes from attributes are
// not tensors whose sizes the graph checked, and the profiler allocates
// these operands.
bool AddOperandBytes(std::initializer_list<int64_t> dims,
                     const std::vector<int64_t>& more, int64_t* bytes) {
  int64_t count = 8;
  for (int64_t d : dims) {
    if (__builtin_mul_overflow(count, d, &count)) return false;
  }
  for (int64_t d : more) {
    if (__builtin_mul_overflow(count, d, &count)) return false;
  }
  return !__builtin_add_overflow(*bytes, count, bytes);
}

bool GemmOperandsFit(const GemmShape& g) {
  int64_t bytes = 0;
  return AddOperandBytes({g.batch, g.m, g.k}, {}, &bytes) &&
         AddOperandBytes({g.batch, g.k, g.n}, {}, &bytes) &&
         AddOperandBytes({g.batch, g.m, g.n}, {}, &bytes);
}

// cuDNN takes 32-bit dims; within them, the output sizes below stay within
// int64.
bool Fits32(const std::vector<int64_t>& dims) {
  return std::all_of(dims.begin(), dims.end(), [](int64_t d) {
    return d >= -std::numeric_limits<int32_t>::max() &&
           d <= std::numeric_limits<int32_t>::max();
  });
}

bool ConvOperandsFit(const ConvShape& c) {
  int64_t bytes = 0;
  return Fits32({c.out_channels}) && Fits32(c.out_spatial) &&
         AddOperandBytes({c.batch, c.in_channels}, c.in_spatial, &bytes) &&
         AddOperandBytes({c.out_channels, c.in_channels / c.groups}, c.kernel,
                         &bytes) &&
         AddOperandBytes({c.batch, c.out_channels}, c.out_spatial, &bytes);
}

}  // namespace

// ---------------------------------------------------------------- shapes

bool HasKnownShape(const Tensor& t) {
  if (t.dtype == DType::kUnspecified) return false;
  return !t.shape.empty() || t.size_bytes == DTypeSize(t.dtype);
}

double LogicalBytes(const Tensor& t) {
  if (HasKnownShape(t)) return Product(t.shape) * DTypeSize(t.dtype);
  return static_cast<double>(t.size_bytes);
}

std::optional<GemmShape> InferGemmShape(const Graph& graph, OpIndex o) {
  const Op& op = graph.op(o);
  if (op.op_class != OpClass::kGemm) return std::nullopt;
  GemmShape shape;
  shape.dtype = ComputeDType(graph, op);
  auto m = IntAttr(op, "m"), n = IntAttr(op, "n"), k = IntAttr(op, "k");
  if (m && n && k) {
    shape.m = *m;
    shape.n = *n;
    shape.k = *k;
    shape.batch = IntAttr(op, "batch").value_or(1);
  } else {
    if (op.outputs.size() != 1) return std::nullopt;
    const Tensor& out = graph.tensor(op.outputs[0]);
    if (!HasKnownShape(out) || out.shape.empty()) return std::nullopt;
    static constexpr absl::string_view kBiasFirst[] = {
        "aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::addmv"};
    const size_t first = std::find(std::begin(kBiasFirst), std::end(kBiasFirst),
                                   op.op_type) != std::end(kBiasFirst)
                             ? 1
                             : 0;
    const Tensor* left = nullptr;
    const Tensor* right = nullptr;
    for (size_t i = first; i < op.inputs.size() && right == nullptr; ++i) {
      const Tensor& t = graph.tensor(op.inputs[i]);
      if (!HasKnownShape(t) || t.shape.empty()) continue;
      if (left == nullptr) {
        if (t.shape.size() >= 2) left = &t;
      } else {
        right = &t;
      }
    }
    if (left == nullptr) return std::nullopt;
    shape.dtype = left->dtype;
    const std::vector<int64_t>& o_dims = out.shape;
    const int64_t lead = static_cast<int64_t>(
        o_dims.size() >= 2 ? Product(o_dims, 0, o_dims.size() - 2) : 1);
    shape.m = o_dims.size() >= 2 ? o_dims[o_dims.size() - 2] : o_dims[0];
    shape.n = o_dims.size() >= 2 ? o_dims.back() : 1;
    const std::vector<int64_t>& a = left->shape;
    const int64_t last = a.back(), second = a[a.size() - 2];
    shape.k = (last == shape.m && second != shape.m) ? second : last;
    if (k) shape.k = *k;
    const bool batched =
        right != nullptr && right->shape.size() >= 3 && a.size() >= 3;
    if (batched) {
      shape.batch = lead;
    } else {
      shape.m *= lead;
    }
  }
  if (shape.batch <= 0 || shape.m <= 0 || shape.n <= 0 || shape.k <= 0 ||
      !GemmOperandsFit(shape)) {
    return std::nullopt;
  }
  return shape;
}

double ConvShape::ForwardFlops() const {
  const double kernel_volume = Product(kernel);
  if (transposed) {
    return 2.0 * batch * in_channels * Product(in_spatial) *
           (out_channels / groups) * kernel_volume;
  }
  return 2.0 * batch * out_channels * Product(out_spatial) *
         (in_channels / groups) * kernel_volume;
}

double ConvShape::Flops() const {
  if (!backward) return ForwardFlops();
  double flops =
      ForwardFlops() * ((grad_input ? 1 : 0) + (grad_weight ? 1 : 0));
  if (grad_bias)
    flops += static_cast<double>(batch) * out_channels * Product(out_spatial);
  return flops;
}

std::optional<ConvShape> InferConvShape(const Graph& graph, OpIndex o) {
  const Op& op = graph.op(o);
  if (op.op_class != OpClass::kConv) return std::nullopt;
  ConvShape c;
  const std::string op_type = absl::AsciiStrToLower(op.op_type);
  c.backward = absl::StrContains(op_type, "backward");
  const size_t x_index = c.backward ? 1 : 0;
  if (op.inputs.size() <= x_index) return std::nullopt;
  const Tensor& x = graph.tensor(op.inputs[x_index]);
  if (!HasKnownShape(x) || x.shape.size() < 3) return std::nullopt;
  const size_t rank = x.shape.size(), spatial = rank - 2;
  auto same_rank = [&](const Tensor* t) {
    return t != nullptr && HasKnownShape(*t) && t->shape.size() == rank
               ? t
               : nullptr;
  };
  const Tensor* w = same_rank(op.inputs.size() > x_index + 1
                                  ? &graph.tensor(op.inputs[x_index + 1])
                                  : nullptr);
  const Tensor* y = same_rank(
      c.backward
          ? &graph.tensor(op.inputs[0])
          : (op.outputs.empty() ? nullptr : &graph.tensor(op.outputs[0])));
  c.dtype = x.dtype;
  c.transposed =
      FlagAttr(op, "transposed") || absl::StrContains(op_type, "transpose");
  c.groups = IntAttr(op, "groups").value_or(1);
  c.batch = x.shape[0];
  c.in_channels = x.shape[1];
  c.in_spatial.assign(x.shape.begin() + 2, x.shape.end());
  if (w != nullptr) {
    c.kernel.assign(w->shape.begin() + 2, w->shape.end());
  } else {
    std::optional<std::vector<int64_t>> kernel =
        SpatialAttr(op, "kernel", spatial, 0);
    if (!kernel) return std::nullopt;
    c.kernel = *kernel;
  }
  auto stride = SpatialAttr(op, "stride", spatial, 1);
  auto padding = SpatialAttr(op, "padding", spatial, 0);
  auto dilation = SpatialAttr(op, "dilation", spatial, 1);
  auto output_padding = SpatialAttr(op, "output_padding", spatial, 0);
  if (!stride || !padding || !dilation || !output_padding) return std::nullopt;
  c.stride = *stride;
  c.padding = *padding;
  c.dilation = *dilation;
  if (!Fits32({c.groups, c.batch, c.in_channels}) || !Fits32(c.in_spatial) ||
      !Fits32(c.kernel) || !Fits32(c.stride) || !Fits32(c.padding) ||
      !Fits32(c.dilation) || !Fits32(*output_padding) ||
      (w != nullptr && !Fits32(w->shape))) {
    return std::nullopt;
  }
  if (y != nullptr) {
    c.out_channels = y->shape[1];
    c.out_spatial.assign(y->shape.begin() + 2, y->shape.end());
  } else if (w != nullptr && !c.backward) {
    c.out_channels = c.transposed ? w->shape[1] * c.groups : w->shape[0];
    for (size_t i = 0; i < spatial; ++i) {
      const int64_t span = c.dilation[i] * (c.kernel[i] - 1);
      c.out_spatial.push_back(
          c.transposed ? (c.in_spatial[i] - 1) * c.stride[i] -
                             2 * c.padding[i] + span + (*output_padding)[i] + 1
                       : (c.in_spatial[i] + 2 * c.padding[i] - span - 1) /
                                 std::max<int64_t>(c.stride[i], 1) +
                             1);
    }
  } else {
    return std::nullopt;
  }
  if (c.backward) {
    if (const std::string* mask = FindAttr(op, "output_mask")) {
      std::vector<std::string> items = AttrItems(*mask);
      bool flags[3] = {false, false, false};
      for (size_t i = 0; i < items.size() && i < 3; ++i) {
        if (!absl::SimpleAtob(items[i], &flags[i])) return std::nullopt;
      }
      c.grad_input = flags[0];
      c.grad_weight = flags[1];
      c.grad_bias = flags[2];
    } else {
      for (TensorIndex t : op.outputs) {
        const Tensor& out = graph.tensor(t);
        auto matches = [&out](const Tensor* ref) {
          if (ref == nullptr) return false;
          return HasKnownShape(out) ? out.shape == ref->shape
                                    : out.size_bytes == LogicalBytes(*ref);
        };
        if (matches(&x)) {
          c.grad_input = true;
        } else if (matches(w)) {
          c.grad_weight = true;
        } else if (HasKnownShape(out) && out.shape.size() == 1) {
          c.grad_bias = true;
        }
      }
    }
    if (!c.grad_input && !c.grad_weight && !c.grad_bias) return std::nullopt;
  }
  if (c.batch <= 0 || c.in_channels <= 0 || c.out_channels <= 0 ||
      c.groups <= 0 || c.in_channels % c.groups != 0 ||
      c.out_channels % c.groups != 0 || !AllPositive(c.kernel) ||
      !AllPositive(c.in_spatial) || !AllPositive(c.out_spatial) ||
      !AllPositive(c.stride) || !AllPositive(c.dilation) ||
      !ConvOperandsFit(c)) {
    return std::nullopt;
  }
  return c;
}

// ---------------------------------------------------------------- work

OpWork EstimateOpWork(const Graph& graph, OpIndex o) {
  const Op& op = graph.op(o);
  OpWork work;
  work.dtype = ComputeDType(graph, op);
  work.bytes_moved = IoBytes(graph, o);
  const double flops_per_element =
      FindAttr(op, "flops_per_element") != nullptr
          ? static_cast<double>(IntAttr(op, "flops_per_element").value_or(0))
          : DefaultFlopsPerElement(op.op_class);
  switch (op.op_class) {
    case OpClass::kGemm:
      work.matrix = true;
      if (std::optional<GemmShape> gemm = InferGemmShape(graph, o)) {
        work.known = true;
        work.flops = gemm->Flops();
        work.dtype = gemm->dtype;
      }
      break;
    case OpClass::kConv:
      work.matrix = true;
      if (std::optional<ConvShape> conv = InferConvShape(graph, o)) {
        work.known = true;
        work.flops = conv->Flops();
        work.dtype = conv->dtype;
      }
      break;
    case OpClass::kCollective:
      break;  // network-bound: nothing here to model it with
    case OpClass::kDataMovement:
      work.known = true;
      if (IsView(graph, op)) {
        work.free = true;
        work.bytes_moved = 0;
      }
      break;
    case OpClass::kEmbedding: {
      // A lookup reads only the gathered rows of its table (the largest
      // input): bytes = other inputs + rows read + rows written. Its
      // backward writes the whole table gradient and adds every row.
      work.known = true;
      double largest_input = 0, output_bytes = 0;
      for (TensorIndex t : graph.DistinctInputs(o)) {
        largest_input = std::max(largest_input, LogicalBytes(graph.tensor(t)));
      }
      for (TensorIndex t : op.outputs)
        output_bytes += LogicalBytes(graph.tensor(t));
      if (largest_input >= output_bytes) {
        work.bytes_moved += output_bytes - largest_input;
      } else {
        work.flops = LargestInputElements(graph, op);
      }
      break;
    }
    case OpClass::kElementwise:
    case OpClass::kRandom:
      work.known = true;
      work.flops = flops_per_element * OutputElements(graph, op);
      break;
    default:  // reduction, norm, softmax, other: per input element
      work.known = true;
      work.flops = flops_per_element * LargestInputElements(graph, op);
      break;
  }
  if (Finite(op.flops) && !work.free) {
    work.flops = op.flops;
    if (op.op_class != OpClass::kCollective) work.known = true;
  }
  return work;
}

}  // namespace echo::planner
