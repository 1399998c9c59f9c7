#include "kv/kv_cache.h"

#include <cstring>

namespace deepinfer {

size_t PagedKvCache::BytesPerToken(const ModelConfig& c, DType dtype) {
  return static_cast<size_t>(c.n_layers) * 2 * c.n_kv_heads * c.head_dim * GetDTypeInfo(dtype).block_bytes;
}

int PagedKvCache::BlocksForBytes(const ModelConfig& c, DType dtype, int block_size, size_t bytes) {
  const size_t per_block = BytesPerToken(c, dtype) * block_size;
  return static_cast<int>(std::min<size_t>(bytes / per_block, 1u << 30));
}

StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const ModelConfig& c, int num_blocks, int block_size,
                                                             DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16)
    return InvalidArgument(std::string("KV cache dtype must be f32, bf16 or f16, not ") + DTypeName(dtype));
  if (num_blocks <= 0 || block_size <= 0)
    return InvalidArgument("KV cache needs at least one block of at least one token (got " +
                           std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) + ")");
  std::unique_ptr<PagedKvCache> kv(new PagedKvCache);
  kv->num_layers_ = c.n_layers;
  kv->num_blocks_ = num_blocks;
  kv->block_size_ = block_size;
  kv->kv_dim_ = c.n_kv_heads * c.head_dim;
  kv->dtype_ = dtype;
  kv->row_bytes_ = static_cast<size_t>(kv->kv_dim_) * GetDTypeInfo(dtype).block_bytes;
  kv->plane_bytes_ = kv->row_bytes_ * num_blocks * block_size;
  DI_ASSIGN_OR_RETURN(kv->buf_, HostBuffer::Allocate(kv->plane_bytes_ * 2 * c.n_layers, /*huge_pages=*/true));
  return kv;
}

void PagedKvCache::Write(int layer, const float* k, const float* v, const int32_t* rows, int n) {
  uint8_t* kb = buf_->data() + LayerOffset(layer);
  uint8_t* vb = kb + plane_bytes_;
  for (int i = 0; i < n; ++i) {
    const float* kr = k + static_cast<size_t>(i) * kv_dim_;
    const float* vr = v + static_cast<size_t>(i) * kv_dim_;
    uint8_t* kd = kb + static_cast<size_t>(rows[i]) * row_bytes_;
    uint8_t* vd = vb + static_cast<size_t>(rows[i]) * row_bytes_;
    switch (dtype_) {
      case DType::kBF16:
        for (int d = 0; d < kv_dim_; ++d) {
          reinterpret_cast<uint16_t*>(kd)[d] = F32ToBF16(kr[d]);
          reinterpret_cast<uint16_t*>(vd)[d] = F32ToBF16(vr[d]);
        }
        break;
      case DType::kF16:
        for (int d = 0; d < kv_dim_; ++d) {
          reinterpret_cast<uint16_t*>(kd)[d] = F32ToF16(kr[d]);
          reinterpret_cast<uint16_t*>(vd)[d] = F32ToF16(vr[d]);
        }
        break;
      default:
        std::memcpy(kd, kr, row_bytes_);
        std::memcpy(vd, vr, row_bytes_);
    }
  }
}

void PagedKvCache::CopyBlock(int32_t src, int32_t dst) {
  const size_t block_bytes = row_bytes_ * block_size_;
  for (int l = 0; l < num_layers_; ++l) {
    uint8_t* base = buf_->data() + LayerOffset(l);
    for (int plane = 0; plane < 2; ++plane) {
      uint8_t* p = base + plane * plane_bytes_;
      std::memcpy(p + dst * block_bytes, p + src * block_bytes, block_bytes);
    }
  }
}

}  // namespace deepinfer
