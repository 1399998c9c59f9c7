// Paged K/V storage: `planes` K/V planes (one per layer, or per layer of a KV group in a hybrid cache), each an
// array of physical rows ("slots"), num_blocks * block_size of them, each n_kv_heads * head_dim elements of the
// cache dtype (f32, bf16 or f16). Position p of a sequence lives, for layer l, in plane plane_of(l) at slot
// table[p / block_size] * block_size + p % block_size, where table is the sequence's block table of l's group.
// A packed layer (a sparse one in a packed layout, kv_layout.h) keeps RowsPerBlock rows of its own width at its
// offset in that block's region of the plane; slots stay the group's, and KRow / Write map them (RowOffset).
// The BlockPool decides which blocks a sequence owns; this class only holds the bytes.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "base/host_buffer.h"
#include "base/memory_backer.h"
#include "deepinfer/status.h"
#include "kv/kv_layout.h"
#include "tensor/dtype.h"

namespace deepinfer {

class PagedKvCache {
 public:
  static StatusOr<std::unique_ptr<PagedKvCache>> Create(const KvLayout& layout, int num_blocks, int block_size,
                                                        DType dtype);
  // K+V bytes one row of a block occupies across its planes (with one group: a token across all layers).
  static size_t BytesPerToken(const KvLayout& layout, DType dtype);
  // Blocks that fit in `bytes`.
  static int BlocksForBytes(const KvLayout& layout, DType dtype, int block_size, size_t bytes);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return buf_->size(); }
  // The pool's pages are backed beside the engine, blocks in the order the BlockPool hands them out (low ids
  // first; base/memory_backer.h says why). Blocks until that is done; its status (Unimplemented on a kernel that
  // leaves the pages to first write).
  Status WaitBacked() { return backer_->Wait(); }
  // Bytes of K+V per token per layer, as stored (for MLA: (kv_lora_rank + qk_rope_dim) x element size).
  size_t bytes_per_token_per_layer() const { return k_row_bytes_ + v_row_bytes_; }
  int k_row_elems() const { return k_elems_; }
  int v_row_elems() const { return v_elems_; }

  const KvLayout& layout() const { return layout_; }
  int group_of(int layer) const { return layout_.group_of(layer); }
  // Rows stored by Write/WriteEncoded into layer 0 of each group (tests: which positions a step wrote).
  int64_t rows_written(int group) const { return rows_written_[group]; }

  const void* k(int layer) const { return buf_->data() + LayerOffset(layer); }
  // Layer `layer`'s K row for slot `slot` (a packed layer's: the row its position takes in the slot's block), of
  // k_row_elems(layer) elements.
  const uint8_t* KRow(int layer, int32_t slot) const { return buf_->data() + RowOffset(layer, slot); }
  int k_row_elems(int layer) const { return layout_.elems_of(layer); }
  const void* v(int layer) const { return buf_->data() + LayerOffset(layer) + k_plane_bytes_; }
  // Stores n rows of K and V (f32; k_row_elems(layer) / v_row_elems each; v may be null when V rows are empty)
  // into slots rows[0..n), converting to the cache dtype. A negative slot is skipped (a position whose K/V the
  // cache already holds).
  void Write(int layer, const float* k, const float* v, const int32_t* rows, int n);
  // The same in two halves (unpacked layers: context parallelism, which no packed model runs under), for rows
  // produced on another rank (context parallelism sends them as stored, so
  // a bf16/f16 cache halves the traffic and the cache bytes stay those Write would store): Encode converts n
  // rows to the cache dtype (k_out: n x k_row_bytes(), v_out: n x v_row_bytes()); WriteEncoded stores such rows.
  size_t k_row_bytes() const { return k_row_bytes_; }
  size_t v_row_bytes() const { return v_row_bytes_; }
  void Encode(const float* k, const float* v, int n, uint8_t* k_out, uint8_t* v_out) const;
  void WriteEncoded(int layer, const uint8_t* k, const uint8_t* v, const int32_t* rows, int n);
  // Copies every plane's rows of block src into block dst.
  void CopyBlock(int32_t src, int32_t dst);
  // One block's bytes across every plane (its K rows then its V rows, plane by plane), as the KV tiers
  // (kv/kv_tiers.h) store them: ReadBlock copies them out, WriteBlock back into (another) block.
  size_t block_bytes() const { return static_cast<size_t>(num_planes_) * (k_row_bytes_ + v_row_bytes_) * block_size_; }
  void ReadBlock(int32_t block, uint8_t* out) const;
  void WriteBlock(int32_t block, const uint8_t* in);

 private:
  PagedKvCache() = default;
  size_t LayerOffset(int layer) const {
    return static_cast<size_t>(layout_.plane_of(layer)) * (k_plane_bytes_ + v_plane_bytes_);
  }
  void CountWritten(int layer, int n);
  // Byte offset of layer's K row for slot (see KRow).
  size_t RowOffset(int layer, int32_t slot) const {
    if (!layout_.packed()) return LayerOffset(layer) + static_cast<size_t>(slot) * k_row_bytes_;
    const int32_t block = slot / block_size_;
    const int ratio = layout_.ratio_of(layer);
    return LayerOffset(layer) + static_cast<size_t>(block) * block_size_ * k_row_bytes_ +
           (static_cast<size_t>(layout_.offset_of(layer)) +
            static_cast<size_t>(KvLayout::RowInBlock(ratio, block_size_, slot)) * layout_.elems_of(layer)) * elem_bytes_;
  }

  KvLayout layout_;
  std::vector<int64_t> rows_written_;
  int num_planes_ = 0, num_blocks_ = 0, block_size_ = 0, k_elems_ = 0, v_elems_ = 0;
  DType dtype_ = DType::kF32;
  size_t elem_bytes_ = 0, k_row_bytes_ = 0, v_row_bytes_ = 0, k_plane_bytes_ = 0, v_plane_bytes_ = 0;
  std::unique_ptr<HostBuffer> buf_;
  std::unique_ptr<MemoryBacker> backer_;  // after buf_: stops before the memory is unmapped
};

}  // namespace deepinfer
