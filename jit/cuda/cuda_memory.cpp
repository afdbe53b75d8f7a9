// jit/cuda/cuda_memory.h: the stream-ordered pool and pinned buffers.
#include "jit/cuda/cuda_memory.h"

#include <cstdint>
#include <mutex>
#include <utility>

#include "interp/error.h"
#include "interp/log.h"

namespace terrace::jit::cuda {

namespace {

// The default pool keeps what is freed instead of returning it to the OS at each synchronisation
// (its release threshold is 0 by default): allocation then costs about a microsecond.
void keep_pool_memory() {
  static std::once_flag once;
  std::call_once(once, [] {
    CUmemoryPool pool = nullptr;
    TERRACE_CU(cuDeviceGetDefaultMemPool, &pool, device().device);
    cuuint64_t threshold = UINT64_MAX;
    TERRACE_CU(cuMemPoolSetAttribute, pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
  });
}

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes, CUstream stream) : bytes_(bytes), stream_(stream) {
  if (fault_enabled("oom:gpu"))
    fail(ErrorCode::OutOfMemory, "device allocation of ", bytes, " bytes: injected by TERRACE_FAULT=oom:gpu");
  keep_pool_memory();
  if (bytes == 0) return;
  CUresult r = driver().cuMemAllocAsync(&ptr_, bytes, stream_);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    size_t free = 0, total = 0;
    driver().cuMemGetInfo(&free, &total);
    fail(ErrorCode::OutOfMemory, "cuMemAllocAsync: ", bytes, " bytes asked for, ", free, " of ", total,
         " free on ", device().name);
  }
  check(r, "cuMemAllocAsync");
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFreeAsync(ptr_, stream_);
}

void DeviceBuffer::swap(DeviceBuffer& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  std::swap(stream_, o.stream_);
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) driver().cuMemFreeHost(data_);
}

void* PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_ && data_) return data_;
  if (data_) TERRACE_CU(cuMemFreeHost, data_);
  data_ = nullptr;
  bytes_ = 0;
  device();
  TERRACE_CU(cuMemHostAlloc, &data_, bytes ? bytes : 1, 0);
  bytes_ = bytes;
  return data_;
}

DeviceTensorStorage::DeviceTensorStorage(size_t bytes, const std::shared_ptr<Stream>& stream)
    : stream_(stream), buffer_(bytes, stream->get()) {}

DeviceTensorStorage::DeviceTensorStorage(DeviceBuffer buffer, const std::shared_ptr<Stream>& stream,
                                         std::shared_ptr<BufferRecycler> recycler)
    : stream_(stream), buffer_(std::move(buffer)), recycler_(std::move(recycler)) {}

DeviceTensorStorage::~DeviceTensorStorage() {
  device();  // the context current on the thread that drops the last tensor
  if (recycler_ && buffer_.bytes()) recycler_->give_back(std::move(buffer_));
  buffer_ = DeviceBuffer();
}

BufferRecycler::BufferRecycler(std::shared_ptr<Stream> stream, size_t keep) : stream_(std::move(stream)), keep_(keep) {}

Tensor BufferRecycler::tensor(DType dtype, const Shape& shape) {
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  DeviceBuffer buffer;
  // TERRACE_FAULT=oom:gpu fails every request, as an allocation (below) would fail.
  if (!fault_enabled("oom:gpu")) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
      if (it->bytes() == bytes) {
        buffer = std::move(*it);
        waiting_.erase(it);
        break;
      }
  }
  if (bytes && !buffer.bytes()) buffer = DeviceBuffer(bytes, stream_->get());
  return Tensor::on_device(dtype, shape, std::make_shared<DeviceTensorStorage>(std::move(buffer), stream_, shared_from_this()));
}

void BufferRecycler::give_back(DeviceBuffer&& buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  if (waiting_.size() < keep_) waiting_.push_back(std::move(buffer));
  // else: freed here, on its stream, as the buffer goes out of scope
}

void DeviceTensorStorage::read(void* dst, size_t bytes) const {
  TERRACE_CHECK(bytes <= buffer_.bytes(), Internal, "reading ", bytes, " bytes of a ", buffer_.bytes(),
                "-byte device buffer");
  device();
  copy_to_host(dst, buffer_.ptr(), bytes, *stream_);
  stream_->synchronize();
}

namespace {
class ViewStorage final : public StreamStorage {
 public:
  ViewStorage(CUdeviceptr address, size_t bytes, std::shared_ptr<Stream> stream, std::shared_ptr<void> keep)
      : address_(address), bytes_(bytes), stream_(std::move(stream)), keep_(std::move(keep)) {}
  uint64_t address() const override { return address_; }
  size_t bytes() const override { return bytes_; }
  void read(void* dst, size_t bytes) const override {
    TERRACE_CHECK(bytes <= bytes_, Internal, "reading ", bytes, " bytes of a ", bytes_, "-byte device view");
    device();
    copy_to_host(dst, address_, bytes, *stream_);
    stream_->synchronize();
  }
  std::string where() const override { return "cuda:0"; }
  const std::shared_ptr<Stream>& stream() const override { return stream_; }

 private:
  CUdeviceptr address_;
  size_t bytes_;
  std::shared_ptr<Stream> stream_;
  std::shared_ptr<void> keep_;
};
}  // namespace

Tensor device_view(CUdeviceptr address, DType dtype, const Shape& shape, const std::shared_ptr<Stream>& stream,
                   std::shared_ptr<void> keep) {
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor::on_device(dtype, shape, std::make_shared<ViewStorage>(address, bytes, stream, std::move(keep)));
}

Tensor device_tensor(DType dtype, const Shape& shape, const std::shared_ptr<Stream>& stream) {
  const size_t bytes = size_t(shape_numel(shape)) * dtype_size(dtype);
  return Tensor::on_device(dtype, shape, std::make_shared<DeviceTensorStorage>(bytes, stream));
}

Tensor upload(const Tensor& host, const std::shared_ptr<Stream>& stream) {
  if (host.on_device()) return host;
  device();
  Tensor t = device_tensor(host.dtype(), host.shape(), stream);
  // From pageable memory the copy has read the host bytes when it returns; the device side stays
  // ordered on the stream.
  if (host.nbytes()) TERRACE_CU(cuMemcpyHtoDAsync, CUdeviceptr(t.device_address()), host.raw(), host.nbytes(), stream->get());
  return t;
}

void copy_to_device(CUdeviceptr dst, const void* src, size_t bytes, const Stream& stream) {
  if (bytes) TERRACE_CU(cuMemcpyHtoDAsync, dst, src, bytes, stream.get());
}

void copy_to_host(void* dst, CUdeviceptr src, size_t bytes, const Stream& stream) {
  if (bytes) TERRACE_CU(cuMemcpyDtoHAsync, dst, src, bytes, stream.get());
}

}  // namespace terrace::jit::cuda
