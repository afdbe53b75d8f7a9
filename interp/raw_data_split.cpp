#include "interp/raw_data_split.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace terrace {
namespace {

// Field numbers in onnx.proto.
constexpr uint32_t kModelGraph = 7, kGraphInitializer = 5, kTensorRawData = 9;
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// A cursor over wire-format bytes; every read is bounds-checked and sets `bad` on failure.
struct Wire {
  std::string_view bytes;
  size_t at = 0;
  bool bad = false;

  bool done() const { return bad || at >= bytes.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && at < bytes.size(); shift += 7) {
      const uint8_t b = uint8_t(bytes[at++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    bad = true;
    return 0;
  }
  // One field: its number, wire type, and its payload (for length-delimited fields the bytes
  // after the length; otherwise empty). The whole field, tag included, is [start, at).
  bool field(uint32_t& number, uint32_t& type, std::string_view& payload, size_t& start) {
    start = at;
    const uint64_t tag = varint();
    number = uint32_t(tag >> 3);
    type = uint32_t(tag & 7);
    payload = {};
    switch (type) {
      case kVarint: varint(); break;
      case kFixed64: skip(8); break;
      case kFixed32: skip(4); break;
      case kLengthDelimited: {
        const uint64_t n = varint();
        if (bad || n > bytes.size() - at) return bad = true, false;
        payload = bytes.substr(at, size_t(n));
        at += size_t(n);
        break;
      }
      default: bad = true;  // groups, which onnx.proto does not use
    }
    return !bad && number != 0;
  }
  // The value of the varint field starting here (its tag skipped).
  uint64_t skip_tag_varint() {
    varint();
    return varint();
  }
  void skip(size_t n) {
    if (n > bytes.size() - at) bad = true;
    else at += n;
  }
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

// `field`'s tag, then `payload` as its length-delimited content.
void put_message(std::string& out, uint32_t number, std::string_view payload) {
  put_varint(out, uint64_t(number) << 3 | kLengthDelimited);
  put_varint(out, payload.size());
  out.append(payload);
}

// Integer and string tensors are what shape inference reads as data (a Reshape's shape, Slice's
// starts): they keep their raw_data whatever their size.
bool may_cut(uint64_t data_type) {
  switch (data_type) {
    case onnx::TensorProto::INT32: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT32:
    case onnx::TensorProto::UINT64: case onnx::TensorProto::STRING: case onnx::TensorProto::BOOL:
      return false;
    default: return true;
  }
}

// A TensorProto's bytes with a large raw_data emptied; the raw bytes in `raw`. nullopt: kept whole.
std::optional<std::string> cut_tensor(std::string_view tensor, size_t min_bytes, std::string_view& raw, bool& bad) {
  constexpr uint32_t kDataType = 2;
  Wire w{tensor};
  uint32_t number, type;
  std::string_view payload;
  size_t start, raw_start = 0, raw_end = 0, raw_fields = 0;
  uint64_t data_type = 0;
  while (!w.done()) {
    if (!w.field(number, type, payload, start)) return bad = true, std::nullopt;
    if (number == kDataType && type == kVarint) data_type = Wire{tensor.substr(start)}.skip_tag_varint();
    if (number == kTensorRawData && type == kLengthDelimited) {
      ++raw_fields;
      raw = payload, raw_start = start, raw_end = w.at;
    }
  }
  // Given twice, protobuf keeps the last: leave such a tensor to it.
  if (raw_fields != 1 || raw.size() < min_bytes || !may_cut(data_type)) return std::nullopt;
  std::string out(tensor.substr(0, raw_start));
  // One byte, not none: ONNX's checker counts an empty raw_data as no value field.
  put_message(out, kTensorRawData, std::string_view("\0", 1));
  out.append(tensor.substr(raw_end));
  return out;
}

// A GraphProto's bytes with its initializers' large raw_data emptied.
std::optional<std::string> cut_graph(std::string_view graph, size_t min_bytes,
                                     std::vector<std::pair<size_t, std::string_view>>& cut, bool& bad) {
  Wire w{graph};
  std::string out;
  uint32_t number, type;
  std::string_view payload;
  size_t start, initializer = 0;
  while (!w.done()) {
    if (!w.field(number, type, payload, start)) return bad = true, std::nullopt;
    std::optional<std::string> tensor;
    std::string_view raw;
    if (number == kGraphInitializer && type == kLengthDelimited) {
      tensor = cut_tensor(payload, min_bytes, raw, bad);
      if (bad) return std::nullopt;
      if (tensor) cut.emplace_back(initializer, raw);
      ++initializer;
    }
    if (tensor) put_message(out, kGraphInitializer, *tensor);
    else out.append(graph.substr(start, w.at - start));
  }
  if (cut.empty()) return std::nullopt;
  return out;
}

thread_local CutRawData* current = nullptr;

}  // namespace

std::optional<SplitModel> split_large_raw_data(std::string_view model, size_t min_bytes) {
  Wire w{model};
  SplitModel s;
  uint32_t number, type;
  std::string_view payload;
  size_t start;
  bool bad = false, graph_seen = false;
  while (!w.done()) {
    if (!w.field(number, type, payload, start)) return std::nullopt;
    if (number == kModelGraph && type == kLengthDelimited) {
      if (graph_seen) return std::nullopt;  // protobuf would merge the two: initializer indices shift
      graph_seen = true;
      std::optional<std::string> graph = cut_graph(payload, min_bytes, s.cut, bad);
      if (bad) return std::nullopt;
      if (graph) {
        put_message(s.parsed, kModelGraph, *graph);
        continue;
      }
    }
    s.parsed.append(model.substr(start, w.at - start));
  }
  if (w.bad || s.cut.empty()) return std::nullopt;
  return s;
}

CutRawData::CutRawData(bool mapped) : mapped_(mapped), outer_(current) { current = this; }
CutRawData::~CutRawData() { current = outer_; }

void CutRawData::add(const onnx::TensorProto* p, std::string_view bytes) { cut_.emplace_back(p, bytes); }

std::optional<std::string_view> CutRawData::find(const onnx::TensorProto& p) {
  if (!current) return std::nullopt;
  for (const auto& [q, bytes] : current->cut_)
    if (q == &p) return bytes;
  return std::nullopt;
}

void CutRawData::done(const onnx::TensorProto& p) {
  const std::optional<std::string_view> bytes = find(p);
  if (!bytes || !current->mapped_) return;  // MADV_DONTNEED would zero heap memory
  // Whole pages inside the bytes only: the pages at either end may hold other fields.
  const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (uintptr_t(bytes->data()) + page - 1) / page * page;
  const uintptr_t end = (uintptr_t(bytes->data()) + bytes->size()) / page * page;
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace terrace
