// Device memory for tier 2: a stream-ordered pool (cuMemAllocAsync from the device's default pool,
// kept from returning memory to the OS: 1.2 us per allocate/free pair against 94 us and more for
// cuMemAlloc, GPU-NOTES.md), and pinned host buffers for transfers.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "interp/tensor.h"

#include "jit/cuda/cuda_driver.h"

namespace terrace::jit::cuda {

// A device allocation, freed in order on the stream it was allocated on. Out of memory is
// Error(OutOfMemory) saying how many bytes were asked for and how many are free;
// TERRACE_FAULT=oom:gpu makes every allocation fail so, for tests of the fallback.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, CUstream stream);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  CUdeviceptr ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void swap(DeviceBuffer& o) noexcept;
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
  CUstream stream_ = nullptr;
};

// Page-locked host memory (cuMemHostAlloc), so that copies to and from the device run
// asynchronously at full bandwidth. Grows on demand; its contents do not survive a growth.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  // At least `bytes` of pinned memory.
  void* reserve(size_t bytes);
  size_t capacity() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Device memory owned by tensors (Tensor::on_device): tier 2's region outputs, which stay on the
// device for the next GPU region, and callers' bound inputs. All of a session's device work runs in
// order on one stream; the storage is freed in order on it when the last tensor over it goes.
class BufferRecycler;

// Device memory whose work is ordered on one stream: a tensor over it is read by later work on
// that stream without a synchronisation.
class StreamStorage : public DeviceStorage {
 public:
  virtual const std::shared_ptr<Stream>& stream() const = 0;
};

class DeviceTensorStorage final : public StreamStorage {
 public:
  DeviceTensorStorage(size_t bytes, const std::shared_ptr<Stream>& stream);
  // A storage over `buffer` (allocated on `stream`) that hands it back to `recycler` when the
  // last tensor over it is dropped, instead of freeing it.
  DeviceTensorStorage(DeviceBuffer buffer, const std::shared_ptr<Stream>& stream,
                      std::shared_ptr<BufferRecycler> recycler);
  ~DeviceTensorStorage() override;
  uint64_t address() const override { return buffer_.ptr(); }
  size_t bytes() const override { return buffer_.bytes(); }
  // A copy to host after the stream's earlier work (synchronises the stream).
  void read(void* dst, size_t bytes) const override;
  std::string where() const override { return "cuda:0"; }
  const std::shared_ptr<Stream>& stream() const override { return stream_; }

 private:
  std::shared_ptr<Stream> stream_;  // outlives the buffer, which frees on it
  DeviceBuffer buffer_;
  std::shared_ptr<BufferRecycler> recycler_;  // null: the buffer is freed with the storage
};

// The device buffers of one stream's tensors, taken back when the tensors are dropped and handed
// out again to new tensors of the same size on that stream: no stream-ordered free and
// allocation in between (1-2 us of GPU time a call for a tier-2 region's output). A buffer comes
// back when the last tensor over it is dropped, in whatever thread; its next user's work is
// ordered after the last work on the stream that wrote it, as a pool allocation's is after a
// free on the stream. At most `keep` buffers wait; the rest are freed.
class BufferRecycler : public std::enable_shared_from_this<BufferRecycler> {
 public:
  BufferRecycler(std::shared_ptr<Stream> stream, size_t keep);
  // An uninitialised device tensor on the stream, over a waiting buffer of its size if any.
  Tensor tensor(DType dtype, const Shape& shape);

 private:
  friend class DeviceTensorStorage;
  void give_back(DeviceBuffer&& buffer);
  std::shared_ptr<Stream> stream_;
  size_t keep_;
  std::mutex mu_;
  std::vector<DeviceBuffer> waiting_;
};

// A device tensor over `bytes` at `address` of memory ordered on `stream` that `keep` keeps
// allocated while the tensor lives (a call plan's block, tiers/plan_memory.h).
Tensor device_view(CUdeviceptr address, DType dtype, const Shape& shape, const std::shared_ptr<Stream>& stream,
                   std::shared_ptr<void> keep);
// An uninitialised device tensor on `stream`.
Tensor device_tensor(DType dtype, const Shape& shape, const std::shared_ptr<Stream>& stream);
// A device copy of host tensor `host`, ordered on `stream` (the host data is read before return).
Tensor upload(const Tensor& host, const std::shared_ptr<Stream>& stream);

// Asynchronous copies on `stream` (the host side must stay valid until the stream reaches them).
void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes, const Stream& stream);
void copy_to_host(void* dst, CUdeviceptr src, size_t bytes, const Stream& stream);

}  // namespace terrace::jit::cuda
