// ParamLayout: validation of the unit list, offsets, the gradient-writer rules schedulers rely on,
// element lookup, block/tensor views, and the counter-based initialisation (param_layout.hpp).
#include "hzp/workloads/param_layout.hpp"

#include <algorithm>
#include <cmath>

#include "data/counter_rng.hpp"
#include "hzp/core/error.hpp"

namespace hzp::workloads {
namespace {

// Stream tag of parameter initialisation, so its draws are unrelated to the data sources' (which
// fold other tags into possibly the same seed).
constexpr std::uint64_t kTagInit = 0x504152414D494E49ull;  // "PARAMINI"

void check_shard(const Unit& unit, const ParamTensor& t) {
  const ParamShard& s = t.shard;
  if (!s.sharded()) {
    HZP_CHECK(t.global_shape.ndim == 0 || t.global_shape == t.shape, "unit ", unit.name, ": tensor ", t.name,
              " is whole but declares global shape ", to_string(t.global_shape), " != its shape ", to_string(t.shape));
    return;
  }
  const Shape& g = t.global_shape;
  bool ok = s.dim < t.shape.ndim && s.count >= 1 && s.index >= 0 && s.index < s.count && g.ndim == t.shape.ndim &&
            !s.group.empty() && t.global_offset >= 0;
  for (int d = 0; ok && d < g.ndim; ++d) ok = g[d] == t.shape[d] * (d == s.dim ? s.count : 1);
  HZP_CHECK(ok, "unit ", unit.name, ": tensor ", t.name, " of shape ", to_string(t.shape), " claims to be piece ",
            s.index, " of ", s.count, " along dim ", s.dim, " of ", to_string(g), " over group \"", s.group,
            "\" at global offset ", t.global_offset,
            "; a piece has its global shape's rank, the cut dimension 1/count of it, the others equal, a group "
            "and a global offset >= 0");
}

}  // namespace

std::int64_t ParamTensor::index_in_full(std::int64_t local) const {
  if (!shard.sharded()) return local;
  // Row-major strides: elements before the cut dimension step over `count` pieces' worth of rows.
  std::int64_t inner = 1;
  for (int d = shard.dim + 1; d < shape.ndim; ++d) inner *= shape[d];
  const std::int64_t piece = shape[shard.dim] * inner;  // one slab of this piece along the cut dimension
  const std::int64_t outer = local / piece, within = local % piece;
  return (outer * shard.count + shard.index) * piece + within;
}

ParamLayout::ParamLayout(std::vector<Unit> units) : units_(std::move(units)) {
  const int n = num_units();
  HZP_CHECK(n > 0, "a layout needs at least one unit");
  offsets_.assign(static_cast<std::size_t>(n) + 1, 0);
  for (int u = 0; u < n; ++u) {
    const Unit& unit = units_[u];
    HZP_CHECK(!unit.name.empty(), "unit ", u, " has no name");
    std::int64_t next = 0;
    for (const ParamTensor& t : unit.tensors) {
      HZP_CHECK(t.offset == next, "unit ", unit.name, ": tensor ", t.name, " starts at ", t.offset,
                ", expected ", next, " (tensors are contiguous, in order, without padding)");
      HZP_CHECK(t.numel() > 0, "unit ", unit.name, ": tensor ", t.name, " is empty");
      check_shard(unit, t);
      next += t.numel();
    }
    HZP_CHECK(next == unit.numel, "unit ", unit.name, ": tensors hold ", next, " elements but numel is ",
              unit.numel);
    HZP_CHECK(unit.runs || unit.uses.empty(), "unit ", unit.name, " does not run here but lists uses");
    for (std::size_t i = 0; i < unit.uses.size(); ++i) {
      const int v = unit.uses[i];
      HZP_CHECK(v >= 0 && v < n && v != u, "unit ", unit.name, " uses unit ", v, " (", n,
                " units; a unit never lists itself)");
      HZP_CHECK(std::count(unit.uses.begin(), unit.uses.end(), v) == 1, "unit ", unit.name,
                " lists unit ", v, " twice in uses");
    }
    offsets_[u + 1] = offsets_[u] + unit.numel;
  }
  total_ = offsets_.back();
}

const Unit& ParamLayout::unit(int u) const {
  HZP_CHECK(u >= 0 && u < num_units(), "unit index ", u, " out of range [0, ", num_units(), ")");
  return units_[u];
}

std::int64_t ParamLayout::unit_offset(int u) const {
  HZP_CHECK(u >= 0 && u <= num_units(), "unit index ", u, " out of range [0, ", num_units(), "]");
  return offsets_[u];
}

std::vector<int> ParamLayout::param_blocks(int u) const {
  std::vector<int> r{u};
  const Unit& x = unit(u);
  r.insert(r.end(), x.uses.begin(), x.uses.end());
  return r;
}

std::vector<int> ParamLayout::grad_writers(int b) const {
  (void)unit(b);  // range check
  std::vector<int> r;
  for (int u = num_units() - 1; u >= 0; --u) {
    if (!units_[u].runs) continue;
    const auto& uses = units_[u].uses;
    if (u == b || std::find(uses.begin(), uses.end(), b) != uses.end()) r.push_back(u);
  }
  return r;
}

std::vector<int> ParamLayout::grads_final_after(int u) const {
  std::vector<int> r;
  for (int b : grad_blocks(u))
    if (last_grad_writer(b) == u) r.push_back(b);
  return r;
}

std::vector<int> ParamLayout::params_last_used_in_forward(int u) const {
  std::vector<int> r;
  for (int b : param_blocks(u)) {
    int last = -1;
    for (int v = 0; v < num_units(); ++v) {
      if (!units_[v].runs) continue;
      const auto& uses = units_[v].uses;
      if (v == b || std::find(uses.begin(), uses.end(), b) != uses.end()) last = v;
    }
    if (last == u) r.push_back(b);
  }
  return r;
}

ParamLayout stage_layout(const ParamLayout& full, const StageCut& cut) {
  const int n = full.num_units();
  const std::vector<int>& stage = cut.stage_of_unit;
  HZP_CHECK(static_cast<int>(stage.size()) == n && std::find(stage.begin(), stage.end(), cut.stage) != stage.end(),
            "stage_layout: a cut of ", stage.size(), " units for a model of ", n, ", stage ", cut.stage,
            " running at least one");
  std::vector<bool> runs(static_cast<std::size_t>(n)), held(static_cast<std::size_t>(n)),
      shared(static_cast<std::size_t>(n), false);
  std::vector<std::vector<int>> holders(static_cast<std::size_t>(n));
  for (int u = 0; u < n; ++u) held[u] = runs[u] = stage[u] == cut.stage;
  for (int u = 0; u < n; ++u)
    for (int v : full.unit(u).uses) {
      if (runs[u]) held[v] = true;
      if (stage[u] != stage[v]) shared[v] = true;
      holders[v].push_back(stage[u]);
    }
  for (int u = 0; u < n; ++u) {
    std::vector<int>& h = holders[u];
    if (!shared[u]) {
      h.clear();
      continue;
    }
    h.push_back(stage[u]);
    std::sort(h.begin(), h.end());
    h.erase(std::unique(h.begin(), h.end()), h.end());
  }
  std::vector<Unit> units;
  for (int u = 0; u < n; ++u) {
    Unit x = full.unit(u);
    x.runs = runs[u];
    x.shared = shared[u];
    x.held_on_stages = std::move(holders[u]);
    if (!runs[u]) x.uses.clear();
    if (!held[u]) {
      x.absent_tensors = static_cast<int>(x.tensors.size());
      x.absent_numel = x.numel;
      x.tensors.clear();
      x.numel = 0;
    }
    // The stage's flat offsets differ from the full model's: each tensor keeps the index its values hash.
    for (std::size_t t = 0; t < x.tensors.size(); ++t)
      if (x.tensors[t].global_offset < 0) x.tensors[t].global_offset = full.tensor_offset(u, static_cast<int>(t));
    units.push_back(std::move(x));
  }
  return ParamLayout(std::move(units));
}

ParamLayout::Location ParamLayout::locate(std::int64_t i) const {
  HZP_CHECK(i >= 0 && i < total_, "flat index ", i, " out of range [0, ", total_, ")");
  const auto it = std::upper_bound(offsets_.begin(), offsets_.end(), i);
  const int u = static_cast<int>(it - offsets_.begin()) - 1;
  const std::int64_t in_unit = i - offsets_[u];
  const auto& ts = units_[u].tensors;
  // Tensors are few per unit (≤ 9 for a Llama block): a linear scan is simpler than a search.
  for (int t = static_cast<int>(ts.size()) - 1; t >= 0; --t)
    if (ts[t].offset <= in_unit) return {u, t, in_unit - ts[t].offset};
  HZP_THROW(PreconditionError, "flat index ", i, " falls in no tensor of unit ", units_[u].name);
}

const ParamTensor* ParamLayout::find(std::string_view name, int* unit_out) const {
  for (int u = 0; u < num_units(); ++u)
    for (const ParamTensor& t : units_[u].tensors)
      if (t.name == name) {
        if (unit_out) *unit_out = u;
        return &t;
      }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------------
// Initialisation
// ---------------------------------------------------------------------------------------------------

namespace {

template <typename T>
void init_range(const ParamLayout& layout, std::int64_t begin, std::span<T> out, std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(out.size());
  HZP_CHECK(begin >= 0 && begin + n <= layout.total_numel(), "init_params: range [", begin, ", ", begin + n,
            ") outside the layout's [0, ", layout.total_numel(), ")");
  if (n == 0) return;
  const std::uint64_t key = rng::fold(seed, kTagInit);
  std::int64_t i = begin;
  const std::int64_t end = begin + n;
  while (i < end) {
    // Walk tensor by tensor so the init spec is looked up once per run of elements.
    const ParamLayout::Location loc = layout.locate(i);
    const ParamTensor& t = layout.unit(loc.unit).tensors[loc.tensor];
    const std::int64_t tensor_begin = i - loc.index;
    const std::int64_t run_end = std::min(end, tensor_begin + t.numel());
    // The unsharded model's index of the tensor's element 0 (a whole tensor: its own).
    const std::int64_t base = t.global_offset >= 0 ? t.global_offset : tensor_begin;
    for (; i < run_end; ++i) {
      double v = 0;
      switch (t.init.kind) {
        case ParamInit::Kind::normal: {
          const std::int64_t g = base + t.index_in_full(i - tensor_begin);
          v = t.init.std * rng::Stream(rng::fold(key, static_cast<std::uint64_t>(g))).normal();
          break;
        }
        case ParamInit::Kind::ones: v = 1.0; break;
        case ParamInit::Kind::zeros: v = 0.0; break;
      }
      out[static_cast<std::size_t>(i - begin)] = static_cast<T>(v);
    }
  }
}

}  // namespace

void init_params(const ParamLayout& layout, std::int64_t global_begin, std::span<float> out, std::uint64_t seed) {
  init_range(layout, global_begin, out, seed);
}
void init_params(const ParamLayout& layout, std::int64_t global_begin, std::span<double> out, std::uint64_t seed) {
  init_range(layout, global_begin, out, seed);
}

// ---------------------------------------------------------------------------------------------------
// Views
// ---------------------------------------------------------------------------------------------------

namespace {

template <typename View>
View block_of(const ParamLayout& layout, int u, View flat) {
  HZP_CHECK(flat.numel() == layout.total_numel(), "flat parameter buffer has ", flat.numel(),
            " elements, the layout ", layout.total_numel());
  using Byte = std::conditional_t<std::is_same_v<View, TensorView>, std::byte, const std::byte>;
  auto* base = static_cast<Byte*>(flat.data()) + layout.unit_offset(u) * static_cast<std::int64_t>(dtype_size(flat.dtype()));
  return View(base, Shape{layout.unit_numel(u)}, flat.dtype(), flat.device());
}

template <typename View>
View tensor_of(const ParamLayout& layout, int u, int t, View block) {
  const Unit& unit = layout.unit(u);
  HZP_CHECK(t >= 0 && t < static_cast<int>(unit.tensors.size()), "unit ", unit.name, " has no tensor ", t);
  HZP_CHECK(block.numel() == unit.numel, "block of unit ", unit.name, " has ", block.numel(),
            " elements, expected ", unit.numel);
  const ParamTensor& p = unit.tensors[t];
  using Byte = std::conditional_t<std::is_same_v<View, TensorView>, std::byte, const std::byte>;
  auto* base = static_cast<Byte*>(block.data()) + p.offset * static_cast<std::int64_t>(dtype_size(block.dtype()));
  return View(base, p.shape, block.dtype(), block.device());
}

}  // namespace

TensorView unit_block(const ParamLayout& layout, int u, TensorView flat) { return block_of(layout, u, flat); }
ConstTensorView unit_block(const ParamLayout& layout, int u, ConstTensorView flat) {
  return block_of(layout, u, flat);
}
ConstTensorView tensor_in_block(const ParamLayout& layout, int u, int t, ConstTensorView block) {
  return tensor_of(layout, u, t, block);
}
TensorView tensor_in_block(const ParamLayout& layout, int u, int t, TensorView block) {
  return tensor_of(layout, u, t, block);
}

}  // namespace hzp::workloads
