#include "kv/paged_kv_cache.h"

#include <algorithm>
#include <cstring>

namespace deepinfer {

size_t PagedKvCache::BytesPerToken(const KvLayout& layout, DType dtype) {
  return static_cast<size_t>(layout.num_planes()) * (layout.k_elems + layout.v_elems) * GetDTypeInfo(dtype).block_bytes;
}

int PagedKvCache::BlocksForBytes(const KvLayout& layout, DType dtype, int block_size, size_t bytes) {
  const size_t per_block = BytesPerToken(layout, dtype) * block_size;
  return static_cast<int>(std::min<size_t>(bytes / per_block, 1u << 30));
}

StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const KvLayout& layout, int num_blocks, int block_size,
                                                             DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)
    return InvalidArgument(std::string("KV cache dtype must be f32, bf16 or f16, not ") + DTypeName(dtype));
  if (num_blocks <= 0 || block_size <= 0)
    return InvalidArgument("KV cache needs at least one block of at least one token (got " +
                           std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) + ")");
  std::unique_ptr<PagedKvCache> kv(new PagedKvCache);
  kv->layout_ = layout;
  kv->rows_written_.assign(layout.num_groups(), 0);
  kv->num_planes_ = layout.num_planes();
  kv->num_blocks_ = num_blocks;
  kv->block_size_ = block_size;
  kv->k_elems_ = layout.k_elems;
  kv->v_elems_ = layout.v_elems;
  kv->dtype_ = dtype;
  const size_t esize = GetDTypeInfo(dtype).block_bytes;
  if (layout.packed() && layout.v_elems != 0) return InvalidArgument("a packed KV layout stores K rows only");
  kv->elem_bytes_ = esize;
  kv->k_row_bytes_ = static_cast<size_t>(kv->k_elems_) * esize;
  kv->v_row_bytes_ = static_cast<size_t>(kv->v_elems_) * esize;
  kv->k_plane_bytes_ = kv->k_row_bytes_ * num_blocks * block_size;
  kv->v_plane_bytes_ = kv->v_row_bytes_ * num_blocks * block_size;
  DI_ASSIGN_OR_RETURN(kv->buf_, HostBuffer::Allocate((kv->k_plane_bytes_ + kv->v_plane_bytes_) * kv->num_planes_,
                                                     /*huge_pages=*/true));
  // Every step writes K/V into blocks it may be the first to touch: their pages are backed ahead of that, in
  // chunks of blocks that span at least a 2 MiB page of each plane, each chunk in every plane before the next.
  const size_t block_k = kv->k_plane_bytes_ / num_blocks, block_v = kv->v_plane_bytes_ / num_blocks;
  const size_t per_chunk = std::max<size_t>(1, (size_t{2} << 20) / std::max<size_t>(1, std::min(block_k, block_v ? block_v : block_k)));
  std::vector<MemoryBacker::Range> ranges;
  for (size_t b0 = 0; b0 < static_cast<size_t>(num_blocks); b0 += per_chunk) {
    const size_t b1 = std::min<size_t>(num_blocks, b0 + per_chunk);
    for (int plane = 0; plane < kv->num_planes_; ++plane) {
      uint8_t* k = kv->buf_->data() + static_cast<size_t>(plane) * (kv->k_plane_bytes_ + kv->v_plane_bytes_);
      ranges.push_back({k + b0 * block_k, (b1 - b0) * block_k});
      if (block_v) ranges.push_back({k + kv->k_plane_bytes_ + b0 * block_v, (b1 - b0) * block_v});
    }
  }
  kv->backer_ = std::make_unique<MemoryBacker>(std::move(ranges), "KV cache");
  return kv;
}

namespace {
void StoreRow(DType t, const float* src, uint8_t* dst, int n) {
  switch (t) {
    case DType::kBF16:
      for (int d = 0; d < n; ++d) reinterpret_cast<uint16_t*>(dst)[d] = F32ToBF16(src[d]);
      break;
    case DType::kF16:
      for (int d = 0; d < n; ++d) reinterpret_cast<uint16_t*>(dst)[d] = F32ToF16(src[d]);
      break;
    default:
      std::memcpy(dst, src, sizeof(float) * n);
  }
}
}  // namespace

void PagedKvCache::CountWritten(int layer, int n) {
  if (layout_.plane_of(layer) == 0 && layout_.offset_of(layer) == 0) rows_written_[layout_.group_of(layer)] += n;
}

void PagedKvCache::Write(int layer, const float* k, const float* v, const int32_t* rows, int n) {
  uint8_t* kb = buf_->data() + LayerOffset(layer);
  uint8_t* vb = kb + k_plane_bytes_;
  int written = 0;
  const int ke = layout_.elems_of(layer);
  for (int i = 0; i < n; ++i) {
    if (rows[i] < 0) continue;
    ++written;
    StoreRow(dtype_, k + static_cast<size_t>(i) * ke, buf_->data() + RowOffset(layer, rows[i]), ke);
    if (v_elems_ > 0)
      StoreRow(dtype_, v + static_cast<size_t>(i) * v_elems_, vb + static_cast<size_t>(rows[i]) * v_row_bytes_, v_elems_);
  }
  CountWritten(layer, written);
}

void PagedKvCache::Encode(const float* k, const float* v, int n, uint8_t* k_out, uint8_t* v_out) const {
  for (int i = 0; i < n; ++i) {
    StoreRow(dtype_, k + static_cast<size_t>(i) * k_elems_, k_out + static_cast<size_t>(i) * k_row_bytes_, k_elems_);
    if (v_elems_ > 0)
      StoreRow(dtype_, v + static_cast<size_t>(i) * v_elems_, v_out + static_cast<size_t>(i) * v_row_bytes_, v_elems_);
  }
}

void PagedKvCache::WriteEncoded(int layer, const uint8_t* k, const uint8_t* v, const int32_t* rows, int n) {
  uint8_t* kb = buf_->data() + LayerOffset(layer);
  uint8_t* vb = kb + k_plane_bytes_;
  int written = 0;
  for (int i = 0; i < n; ++i) {
    if (rows[i] < 0) continue;
    ++written;
    std::memcpy(kb + static_cast<size_t>(rows[i]) * k_row_bytes_, k + static_cast<size_t>(i) * k_row_bytes_, k_row_bytes_);
    if (v_elems_ > 0)
      std::memcpy(vb + static_cast<size_t>(rows[i]) * v_row_bytes_, v + static_cast<size_t>(i) * v_row_bytes_, v_row_bytes_);
  }
  CountWritten(layer, written);
}

void PagedKvCache::CopyBlock(int32_t src, int32_t dst) {
  for (int p = 0; p < num_planes_; ++p) {
    uint8_t* k = buf_->data() + static_cast<size_t>(p) * (k_plane_bytes_ + v_plane_bytes_);
    uint8_t* v = k + k_plane_bytes_;
    const size_t kb = k_row_bytes_ * block_size_, vb = v_row_bytes_ * block_size_;
    std::memcpy(k + dst * kb, k + src * kb, kb);
    if (vb) std::memcpy(v + dst * vb, v + src * vb, vb);
  }
}

void PagedKvCache::ReadBlock(int32_t block, uint8_t* out) const {
  const size_t kb = k_row_bytes_ * block_size_, vb = v_row_bytes_ * block_size_;
  for (int p = 0; p < num_planes_; ++p) {
    const uint8_t* k = buf_->data() + static_cast<size_t>(p) * (k_plane_bytes_ + v_plane_bytes_);
    std::memcpy(out, k + block * kb, kb);
    out += kb;
    if (vb) std::memcpy(out, k + k_plane_bytes_ + block * vb, vb);
    out += vb;
  }
}

void PagedKvCache::WriteBlock(int32_t block, const uint8_t* in) {
  const size_t kb = k_row_bytes_ * block_size_, vb = v_row_bytes_ * block_size_;
  for (int p = 0; p < num_planes_; ++p) {
    uint8_t* k = buf_->data() + static_cast<size_t>(p) * (k_plane_bytes_ + v_plane_bytes_);
    std::memcpy(k + block * kb, in, kb);
    in += kb;
    if (vb) std::memcpy(k + k_plane_bytes_ + block * vb, in, vb);
    in += vb;
  }
}

}  // namespace deepinfer
