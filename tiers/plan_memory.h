// Memory a call plan lays out (tiers/call_plan.h): the values passed between a plan's regions
// placed by liveness in one block per device, as each region's own intermediates are placed in its
// arena (region_program.h), instead of a fresh buffer per region output per call. A tier gives the
// block (Backend::memory_block: host memory by default, tier 2 its device's); a call leases one
// block per device from the plan's pool and gives it back when the last tensor over it goes.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "interp/tensor.h"

namespace terrace {

// Per output of a compiled region (CompiledRegion::output_storage): a buffer of its own that no
// other output views (kOwnOutput: a call plan may place it), a view of region input k (k >= 0),
// or a buffer shared otherwise (kSharedOutput: a constant, or one that another output views).
inline constexpr int kOwnOutput = -1, kSharedOutput = -2;

// One block of a tier's memory.
class MemoryBlock {
 public:
  virtual ~MemoryBlock() = default;
  // A tensor at `offset` in the block (offset + nbytes within it, offset aligned to
  // kPlacementAlign) that holds `keep` while it lives: the lease that keeps the block.
  virtual Tensor view(size_t offset, DType dtype, const Shape& shape, std::shared_ptr<void> keep) const = 0;
};

// Every placed value starts at a multiple of this: a cache line, and the alignment device kernels
// that move rows by vectors want.
inline constexpr size_t kPlacementAlign = 256;

// A block of `bytes` of host memory.
std::unique_ptr<MemoryBlock> host_memory_block(size_t bytes);

// Offsets for buffers of `bytes[i]` live from step first[i] to step last[i] (inclusive), each
// rounded up to `align`, so that two overlap in memory only when their lives do not: largest
// first, each at the lowest offset free over its life. Returns the block size they need.
size_t pack_by_liveness(const std::vector<size_t>& bytes, const std::vector<int>& first, const std::vector<int>& last,
                        size_t align, std::vector<size_t>& offset);

// The blocks of one device for one call plan, reused call after call: a call leases one (a new
// one when every block is leased by calls in flight).
class BlockPool : public std::enable_shared_from_this<BlockPool> {
 public:
  explicit BlockPool(size_t bytes) : bytes_(bytes) {}
  size_t bytes() const { return bytes_; }
  // A lease on a block: the block goes back to the pool when the last copy of the lease (each
  // tensor over the block holds one) is dropped. `make` makes a new block when none waits.
  template <class MakeBlock>
  std::shared_ptr<const MemoryBlock> lease(const MakeBlock& make) {
    std::unique_ptr<MemoryBlock> block = take();
    if (!block) block = make(bytes_);
    MemoryBlock* raw = block.release();
    return std::shared_ptr<const MemoryBlock>(raw, [pool = shared_from_this()](const MemoryBlock* b) {
      pool->give(std::unique_ptr<MemoryBlock>(const_cast<MemoryBlock*>(b)));
    });
  }
  size_t blocks() const;  // made so far (leased or waiting)

 private:
  std::unique_ptr<MemoryBlock> take();  // null (counted as one to make) when none waits
  void give(std::unique_ptr<MemoryBlock> block);
  const size_t bytes_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<MemoryBlock>> waiting_;  // guarded by mu_
  size_t made_ = 0;                                    // guarded by mu_
};

}  // namespace terrace
