// Call plans' memory (tiers/plan_memory.h).
#include "tiers/plan_memory.h"

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "interp/error.h"

namespace terrace {

namespace {
class HostBlock final : public MemoryBlock {
 public:
  explicit HostBlock(size_t bytes) : bytes_(std::max<size_t>(bytes, kPlacementAlign)) {
    data_ = static_cast<unsigned char*>(std::aligned_alloc(kPlacementAlign, bytes_));
    TERRACE_CHECK(data_, OutOfMemory, "cannot allocate ", bytes_, " bytes for a call plan's values");
  }
  ~HostBlock() override { std::free(data_); }
  Tensor view(size_t offset, DType dtype, const Shape& shape, std::shared_ptr<void> keep) const override {
    const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
    TERRACE_CHECK(offset + bytes <= bytes_, Internal, "a placed value at ", offset, " of ", bytes,
                  " bytes passes the end of its block (", bytes_, " bytes)");
    return Tensor::adopt(dtype, shape, data_ + offset, bytes, std::move(keep));
  }

 private:
  size_t bytes_;
  unsigned char* data_ = nullptr;
};
}  // namespace

std::unique_ptr<MemoryBlock> host_memory_block(size_t bytes) { return std::make_unique<HostBlock>(bytes); }

size_t pack_by_liveness(const std::vector<size_t>& bytes, const std::vector<int>& first, const std::vector<int>& last,
                        size_t align, std::vector<size_t>& offset) {
  const size_t n = bytes.size();
  auto rounded = [&](size_t i) { return (std::max<size_t>(bytes[i], 1) + align - 1) / align * align; };
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rounded(a) > rounded(b); });
  offset.assign(n, 0);
  size_t total = 0;
  std::vector<size_t> placed;
  std::vector<std::pair<size_t, size_t>> busy;  // [begin, end) of those live at the same time
  for (size_t i : order) {
    busy.clear();
    for (size_t o : placed)
      if (first[o] <= last[i] && first[i] <= last[o]) busy.emplace_back(offset[o], offset[o] + rounded(o));
    std::sort(busy.begin(), busy.end());
    size_t at = 0;
    for (const auto& [b, e] : busy) {
      if (at + rounded(i) <= b) break;
      at = std::max(at, e);
    }
    offset[i] = at;
    total = std::max(total, at + rounded(i));
    placed.push_back(i);
  }
  return total;
}

std::unique_ptr<MemoryBlock> BlockPool::take() {
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.empty()) {
    ++made_;
    return nullptr;
  }
  std::unique_ptr<MemoryBlock> b = std::move(waiting_.back());
  waiting_.pop_back();
  return b;
}

void BlockPool::give(std::unique_ptr<MemoryBlock> block) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.push_back(std::move(block));
}

size_t BlockPool::blocks() const {
  std::lock_guard<std::mutex> lock(mu_);
  return made_;
}

}  // namespace terrace
