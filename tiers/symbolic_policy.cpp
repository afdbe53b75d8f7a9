// The shape histogram decides (issue 36; tiers/tier_manager_core.h): a region whose calls took
// Options::symbolic_after signatures differing in one dim compiles one symbolic version for all its
// sizes; beside it, only a hot size (kHotCalls calls and a quarter of the counted calls) gets an
// exact version, within Options::max_specializations. Every decision is logged under the
// `recompiles` topic with its reason, and the report says where the region's symbolic version stands.
#include <chrono>
#include <mutex>

#include "interp/log.h"
#include "interp/omp_threads.h"
#include "jit/tuning.h"
#include "tiers/jobs.h"
#include "tiers/tier_manager_core.h"
#include "tiers/trace.h"

namespace terrace {

namespace {

// "float32[1,d,768],int64[d]" for the signature of `in` with the symbol's positions named d.
std::string symbolic_shapes(const std::vector<Tensor>& in, const SymbolicDim& sym) {
  std::string s;
  for (size_t i = 0; i < in.size(); ++i) {
    s += std::string(i ? "," : "") + dtype_name(in[i].dtype()) + "[";
    for (int64_t k = 0; k < in[i].rank(); ++k) {
      const bool symbolic =
          std::find(sym.positions.begin(), sym.positions.end(), std::make_pair(int(i), int(k))) != sym.positions.end();
      s += (k ? "," : "") + (symbolic ? std::string("d") : std::to_string(in[i].dim(k)));
    }
    s += "]";
  }
  return s + " with d in [" + std::to_string(sym.lo) + ", " + std::to_string(sym.hi) + "]" +
         (sym.modulus ? ", d % " + std::to_string(sym.modulus) + (sym.divisible ? " == 0" : " != 0") : "");
}

std::string sizes_str(const std::vector<int64_t>& sizes) {
  std::string s;
  for (size_t i = 0; i < sizes.size() && i < 8; ++i) s += (i ? " " : "") + std::to_string(sizes[i]);
  return sizes.size() > 8 ? s + " ..." : s;
}

}  // namespace

int64_t TierManager::Core::count_signature(RegionState& st, const Signature& sig, const std::vector<Tensor>& in) {
  RegionProfile& p = st.profile;
  auto it = p.seen.find(sig);
  if (it == p.seen.end()) {
    if (p.seen.size() >= kMaxSignaturesKept) return kHotCalls;
    it = p.seen.emplace(sig, 0).first;
    p.seen_values[sig] = scalar_values(in);
  }
  ++p.seen_calls;
  return ++it->second;
}

bool TierManager::Core::hot(const RegionState& st, const Signature& sig) const {
  auto it = st.profile.seen.find(sig);
  return it != st.profile.seen.end() && it->second >= kHotCalls && 4 * it->second >= st.profile.seen_calls;
}

bool TierManager::Core::symbolic_takes(const RegionState& st, const std::vector<Tensor>& in) const {
  bool any = false;
  for (const auto& v : *st.load())
    if (v->symbolic && !v->demoted) {
      if (!v->guards.check(in)) return true;
      any = true;
    }
  return !any;  // none yet (compiling): assume it will
}

void TierManager::Core::consider_symbolic(RegionState& st, const Signature& sig, const std::vector<Tensor>& in,
                                          int64_t call) {
  count_signature(st, sig, in);
  using Sym = RegionState::Symbolic;
  if (st.symbolic == Sym::Published) consider_complement(st, in, call);
  if (options_.symbolic_after <= 0 || st.symbolic != Sym::Open || st.entry >= ladder_.size() ||
      st.compiles == RegionState::Compiles::Stopped || int(st.profile.seen.size()) < options_.symbolic_after)
    return;
  const std::string region = "region " + std::to_string(st.region->id) + " (" + st.region->ops() + ")";
  std::vector<Signature> sigs;
  std::vector<ScalarValues> values;
  for (const auto& [s, n] : st.profile.seen) {
    sigs.push_back(s);
    values.push_back(st.profile.seen_values.at(s));
  }
  std::string why;
  std::optional<SymbolicDim> sym = find_symbolic_dim(sigs, values, why);
  if (!sym) {
    st.symbolic = Sym::Refused;
    st.symbolic_why = why;
    log_event(LogTopic::Recompiles, LogLevel::Info, region, ": no symbolic version after ", sigs.size(),
              " signatures: ", why, "; static versions go on");
    return;
  }
  if (int(st.load()->size() + st.compiling.size()) >= options_.max_specializations) return;  // the limit stops it
  // Its code is proven at the sizes it was lowered at; the others rest on the first call at each
  // size agreeing with the interpreter, which validation off would skip.
  if (options_.validate == ValidateMode::Off) {
    st.symbolic = Sym::Refused;
    st.symbolic_why = "validation is off: a symbolic version's first call at each size is validated";
    log_event(LogTopic::Recompiles, LogLevel::Info, region, ": no symbolic version: ", st.symbolic_why);
    return;
  }
  st.symbolic = Sym::Compiling;
  log_event(LogTopic::Recompiles, LogLevel::Info, region, ": ", sym->describe(), " took ", sym->observed.size(),
            " sizes (", sizes_str(sym->observed), "): compiling a symbolic version");
  RegionState* sp = &st;
  const int team = team_to_build();
  std::string failed = jobs_->enqueue([self = shared_from_this(), sp, s = *sym, shapes = compile_inputs(in), call, team] {
    ScopedOmpThreads threads(team);
    self->symbolic_job(*sp, s, shapes, call, false);
  });
  if (failed.empty()) return;
  st.symbolic = Sym::Refused;
  st.symbolic_why = "no compile thread: " + failed;
}

void TierManager::Core::consider_complement(RegionState& st, const std::vector<Tensor>& in, int64_t call) {
  if (!st.class_modulus || st.complement_tried || options_.symbolic_after <= 0) return;
  const auto [input, dim] = st.symbolic_at;
  auto other = [&](const Shape& s) { return (s[size_t(dim)] % st.class_modulus == 0) != st.class_divisible; };
  std::vector<Signature> sigs;
  std::vector<ScalarValues> values;
  for (const auto& [s, n] : st.profile.seen)
    if (other(s.shape(size_t(input)))) {
      sigs.push_back(s);
      values.push_back(st.profile.seen_values.at(s));
    }
  if (int(sigs.size()) < options_.symbolic_after || !other(in[size_t(input)].shape())) return;
  if (int(st.load()->size() + st.compiling.size()) >= options_.max_specializations) return;
  st.complement_tried = true;
  std::string why;
  std::optional<SymbolicDim> sym = find_symbolic_dim(sigs, values, why);
  const std::string region = "region " + std::to_string(st.region->id) + " (" + st.region->ops() + ")";
  if (!sym) {
    log_event(LogTopic::Recompiles, LogLevel::Info, region, ": no symbolic version for the other class: ", why);
    return;
  }
  sym->modulus = st.class_modulus;
  sym->divisible = !st.class_divisible;
  log_event(LogTopic::Recompiles, LogLevel::Info, region, ": ", sigs.size(), " sizes (", sizes_str(sym->observed),
            ") outside its symbolic version's class: compiling one for d % ", sym->modulus,
            sym->divisible ? " == 0" : " != 0");
  RegionState* sp = &st;
  const int team = team_to_build();
  std::string failed = jobs_->enqueue([self = shared_from_this(), sp, s = *sym, shapes = compile_inputs(in), call, team] {
    ScopedOmpThreads threads(team);
    self->symbolic_job(*sp, s, shapes, call, true);
  });
  (void)failed;  // no thread: the first version goes on serving its class
}

int64_t TierManager::Core::note_symbolic_call(RegionState& st, const std::vector<Tensor>& in, int64_t call) {
  const Signature sig(in);
  const int64_t count = count_signature(st, sig, in);
  if (!hot(st, sig)) return count;
  const VersionKey key{st.entry, sig};
  if (st.compiling.count(key) || st.failed.count(key)) return count;
  for (const auto& v : *st.load())
    if (!v->symbolic && v->rung == key.rung && v->signature == sig) return count;
  if (int(st.load()->size() + st.compiling.size()) >= options_.max_specializations) return count;  // the symbolic one serves it
  log_event(LogTopic::Recompiles, LogLevel::Info, "region ", st.region->id, " (", st.region->ops(), "): ", sig.str(),
            " is hot (", st.profile.seen.at(sig), " of ", st.profile.seen_calls,
            " counted calls): compiling an exact version beside the symbolic one");
  if (std::string why = enqueue_compile(st, key, in, call); !why.empty()) st.failed.insert(key);
  return count;
}

void TierManager::Core::symbolic_job(RegionState& st, SymbolicDim sym, std::vector<Tensor> in, int64_t call,
                                     bool complement) {
  Backend& backend = *ladder_[st.entry];
  const auto t0 = std::chrono::steady_clock::now();
  const double tuned_before = jit::tuning_ms_on_this_thread();
  TraceSpan span(options_.trace.get(), "compile", "compile symbolic region", st.region->id);
  std::unique_ptr<CompiledRegion> code;
  std::string why;
  try {
    code = backend.compile_symbolic(graph_, *st.region, in, sym, why);
  } catch (const std::bad_alloc&) {
    why = "the host ran out of memory while compiling";
  } catch (const std::exception& e) {
    why = e.what();
  }
  const double ms = ms_since(t0);
  const std::string region = "region " + std::to_string(st.region->id) + " (" + st.region->ops() + ")";
  std::lock_guard<std::mutex> lock(st.mu);
  st.compile_ms += ms;
  st.tune_ms += jit::tuning_ms_on_this_thread() - tuned_before;
  if (!code) {
    if (!complement) {
      st.symbolic = RegionState::Symbolic::Refused;
      st.symbolic_why = why;
    }
    log_event(LogTopic::Recompiles, LogLevel::Info, region, ": no symbolic version", complement ? " for the other class" : "",
              ": ", why, "; static versions go on");
    return;
  }
  auto v = std::make_shared<Version>();
  v->signature = Signature(in);
  std::vector<int> by_value;  // shape values the lowering read that are not the size: as compiled
  for (int i : code->value_inputs)
    if (std::find(sym.values.begin(), sym.values.end(), i) == sym.values.end()) by_value.push_back(i);
  v->guards = GuardSet::symbolic(in, sym.positions, sym.lo, sym.hi, sym.values, by_value, sym.modulus, sym.divisible);
  v->symbolic = true;
  v->sym_at = sym.positions.front();
  v->shapes = symbolic_shapes(in, sym);
  const std::string shapes = v->shapes;
  st.symbolic = RegionState::Symbolic::Published;
  if (!complement) {
    st.class_modulus = sym.modulus;
    st.class_divisible = sym.divisible;
    st.symbolic_at = sym.positions.front();
  }
  publish_version(st, std::move(v), st.entry, std::move(code), ms, call);
  log_event(LogTopic::Recompiles, LogLevel::Info, region, ": symbolic version for ", shapes, " published (compiled in ",
            ms, " ms); exact versions now only for hot sizes");
}

}  // namespace terrace
