#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <random>
#include <utility>

#include "base/host_buffer.h"
#include "base/logging.h"
#include "engine/kv_identity.h"
#include "engine/kv_sizing.h"
#include "engine/model_executor.h"
#include "kv/kv_groups.h"
#include "kv/kv_tier_format.h"
#include "kv/paged_kv_cache.h"

namespace deepinfer {

// The engine as the multi-process control plane sees it (DistControl::Host): the calls it makes between the
// collective phases of an iteration, all on the engine thread except LocalStats.
class Engine::DistHost final : public DistControl::Host {
 public:
  explicit DistHost(Engine& e) : e_(e) {}
  void IngestRequests(std::vector<std::unique_ptr<Request>> requests, const std::vector<uint64_t>& aborts) override {
    e_.IngestRequests(std::move(requests), aborts);
  }
  void AbortAll() override { e_.AbortAll(); }
  bool HasSequences() const override { return !e_.seqs_.empty() || e_.prev_ != nullptr; }
  int64_t AssignedRequests() const override { return static_cast<int64_t>(e_.requests_.size()); }
  EngineStats LocalStats() const override {
    EngineStats s;
    {
      std::lock_guard<std::mutex> lock(e_.stats_mu_);
      s = e_.stats_;
    }
    if (e_.tiers_) s.kv_tiers = e_.tiers_->Stats();  // thread-safe: atomics and the tiers' own locks
    return s;
  }
  const KvEventLog* KvEvents() const override { return e_.kv_events_.get(); }
  std::vector<StepObservation> TakeStepTimings() override { return std::exchange(e_.unshared_timings_, {}); }
  void ObserveStepTimings(const std::vector<StepObservation>& leader) override {
    for (const StepObservation& o : leader)
      if (o.ok) e_.cost_.Observe(o.shape, o.seconds);
  }

 private:
  Engine& e_;
};
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int ResolveMaxModelLen(const ModelConfig& c, const EngineOptions& opt) {
  return opt.max_model_len > 0 ? std::min(opt.max_model_len, c.max_ctx) : c.max_ctx;
}

Status ValidateOptions(const EngineOptions& opt) {
  if (opt.max_num_seqs < 1) return InvalidArgument("--max-num-seqs must be >= 1");
  if (opt.max_batched_tokens < 1) return InvalidArgument("--max-batched-tokens must be >= 1");
  if (opt.block_size < 1 || opt.block_size > 1024) return InvalidArgument("--block-size must be in [1, 1024]");
  if (!(opt.kv_cache_fraction > 0 && opt.kv_cache_fraction <= 0.95))
    return InvalidArgument("--kv-cache-fraction must be in (0, 0.95]");
  if (!(opt.target_itl_ms >= 0) || !std::isfinite(opt.target_itl_ms))
    return InvalidArgument("--target-itl-ms must be a number of milliseconds >= 0 (0: off)");
  // --target-itl-ms under --tp / --cp > 1: the ranks of an attention group run identical schedulers without
  // exchanging schedules, so their prefill budgets must agree bit for bit. Each rank's own clock would not give
  // that; the group's cost models are fed the group leader's step timings instead, at the same iteration on
  // every rank (DistControl::shares_step_times(), Engine::Process). A group of one rank times itself.
  return Status::Ok();
}

// The KV tiers store and load group 0's blocks of one process's cache; what they cannot yet do exactly is refused
// with the reason rather than served approximately.
Status CheckKvTiers(const EngineOptions& opt, const KvLayout& layout, const dist::ParallelConfig* pc) {
  if (!opt.prefix_caching)
    return InvalidArgument("--kv-offload-ram / --kv-store sit behind the prefix cache: drop --no-prefix-cache");
  if (!opt.kv_store_dir.empty() && opt.kv_store_bytes == 0)
    return InvalidArgument("--kv-store needs --kv-store-size SIZE (the most bytes the store may hold)");
  // A hybrid cache is stored group by group: full-attention groups' blocks by chain, each windowed group's tied to
  // the anchor's (group 0's) block of the same positions; a hit resumes from the windows a load brings back, or
  // replays from the full groups' blocks. Without an anchor there is nothing to tie a window to.
  if (!layout.has_anchor())
    return InvalidArgument("--kv-offload-ram / --kv-store: every layer of this model has a sliding window (no "
                           "full-attention layer to anchor a stored prefix); add --swa-full (every layer keeps every "
                           "position: one full-attention group) to use the tiers with this model");
  // DeepSeek-V4's MTP rows are a plane of the model's own layout (KvLayout::mtp_first_layer), stored with it;
  // a draft model's and DeepSeek-V3's MTP module's K/V are caches of their own, which the tiers do not store.
  if (opt.draft || (opt.speculative == SpecMethod::kMtp && layout.mtp_first_layer < 0))
    return InvalidArgument("--kv-offload-ram / --kv-store do not store a draft model's K/V or DeepSeek-V3's MTP "
                           "module's yet (caches of their own that share the target's blocks): use --speculative "
                           "ngram or none (DeepSeek-V4's --speculative mtp is stored with the model's K/V)");
  // One rank per attention group (--dp, --ep): each rank's scheduler decides its own hits, as one process does.
  // With --tp or --cp the ranks of a group must schedule identically, and a load done sooner on one rank than on
  // another would split them.
  if (pc && pc->tp * pc->cp > 1)
    return InvalidArgument("--kv-offload-ram / --kv-store are not supported with --tp or --cp > 1 yet (the ranks of an "
                           "attention group would have to agree on each load's timing and length); they work with "
                           "--dp and --ep, one rank per attention group");
  return Status::Ok();
}

// --swa-checkpoint-every in tokens, rounded up to whole blocks (64-bit: the flag is any non-negative int).
int64_t CheckpointStride(const EngineOptions& opt) {
  const int64_t bs = opt.block_size;
  return (static_cast<int64_t>(opt.swa_checkpoint_every) + bs - 1) / bs * bs;
}

}  // namespace

Engine::Engine(const ModelConfig& config, const Tokenizer* tok, const EngineOptions& opt, int num_blocks,
               const KvLayout& layout)
    : config_(config), tok_(tok), grammars_(tok), opt_(opt), kv_layout_(layout) {
  sched_cfg_.group_window = layout.group_window;
  sched_cfg_.max_num_seqs = opt.max_num_seqs;
  sched_cfg_.max_batched_tokens = opt.max_batched_tokens;
  sched_cfg_.max_model_len = ResolveMaxModelLen(config, opt);
  sched_cfg_.swa_replay_max = ReplayBound(layout, opt.swa_replay_max, sched_cfg_.max_model_len);
  // Checkpoints need windowed groups tied to a full-attention anchor (group 0): a model whose every layer is
  // windowed matches its prefixes by chain from block 0, which dropping a block would cut (Create warns).
  sched_cfg_.swa_checkpoint_every =
      layout.has_anchor() && layout.windowed() ? static_cast<int>(CheckpointStride(opt)) : 0;  // <= the replay bound (Create)
  if (opt.swa_replay_approx) {
    // A hit at H replays from H - W, moved back to the open block of every compressor (CSA pools the previous
    // block too), so each block the replay or the rest of the prompt closes finds all its inputs recomputed.
    const int window = config.sliding_window;
    const std::vector<int> ratios = config.dsv4.compress_ratio;
    sched_cfg_.approx_replay_from = [window, ratios](int hit) {
      int from = hit - window;
      for (int r : ratios)
        if (r > 0) from = std::min(from, hit / r * r - (r == 4 ? r : 0));
      return std::max(0, from);
    };
  }
  sched_cfg_.prefix_caching = opt.prefix_caching;
  sched_cfg_.prefix_drop_last_block = opt.speculative == SpecMethod::kMtp;
  sched_cfg_.spec_full_k = opt.spec_verify == SpecVerify::kRejection;
  pool_ = std::make_unique<BlockPool>(num_blocks, opt.block_size);
  pool_->set_link_own_blocks_only(sched_cfg_.prefix_drop_last_block);
  kv_events_ = std::make_unique<KvEventLog>();
  pool_->set_event_log(kv_events_.get());
  table_ = std::make_unique<TokenTable>(opt.max_num_seqs, sched_cfg_.max_model_len);
  SetUpLatencyTarget();
  sched_ = std::make_unique<Scheduler>(sched_cfg_, pool_.get(), table_.get());
  // The pool's size from the start: readers (/metrics, the KV-events "load" feed) may ask before the first step.
  stats_.kv_blocks_total = pool_->num_blocks();
  stats_.kv_blocks_free = pool_->num_available();
  stats_.kv_blocks_cached = pool_->num_cached();
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& opt) {
  DI_RETURN_IF_ERROR(ValidateOptions(opt));
  const ModelConfig& c = model.config;
  const int max_len = ResolveMaxModelLen(c, opt);
  const bool speculating = opt.speculative != SpecMethod::kNone;
  if (speculating || opt.draft) DI_RETURN_IF_ERROR(ValidateSpeculative(opt, model));
  dist::DistContext* dctx = opt.dist;
  if (dctx && dctx->pc.single()) dctx = nullptr;
  if (dctx && speculating)
    return InvalidArgument("--speculative is not supported in multi-process runs yet (run one process)");
  // Sliding-window layers get KV groups of their own, whose blocks are released as the window moves on (a
  // hybrid cache); --swa-full keeps every layer's K/V for every position, as llama.cpp's flag of that name.
  if (opt.swa_replay_approx && !c.is_dsv4())
    return InvalidArgument(std::string("--swa-replay approx is DeepSeek-V4.1's replay of DeepSeek-V4's windowed and "
                                       "compressed layers; ") + ArchName(c.arch) + " takes --swa-replay exact (the default)");
  if (opt.swa_replay_approx && opt.swa_full)
    return InvalidArgument("--swa-replay approx caches no sliding window and --swa-full keeps every one: choose one");
  if (opt.swa_checkpoint_every < 0) return InvalidArgument("--swa-checkpoint-every must be >= 0");
  if (opt.swa_checkpoint_every > 0 && opt.swa_replay_approx)
    return InvalidArgument("--swa-checkpoint-every keeps some cached windows and --swa-replay approx caches none: choose one");
  // DeepSeek-V4 under --speculative mtp: the MTP block's K=V rows are one more windowed plane of the main
  // layout (ModelConfig::Dsv4Layout(true)), not a cache of their own; other models' layouts are unchanged.
  const bool mtp_planes = opt.speculative == SpecMethod::kMtp && c.is_dsv4() && c.n_mtp > 0 && !opt.mtp_separate_cache;
  const KvLayout base_layout = mtp_planes ? RankConfig(model).Dsv4Layout(true) : RankKvLayout(model);
  KvLayout layout = base_layout;
  if (!c.mla) {
    // --swa-full: one full-attention kind (sparse layers, DeepSeek-V4's compressed rows, are still packed).
    const std::vector<int> windows = opt.swa_full ? std::vector<int>(static_cast<size_t>(layout.num_layers), 0)
                                                  : c.kv_layer_windows(mtp_planes);
    layout = GroupKvLayout(layout, windows, opt.block_size);
  }
  if (opt.swa_checkpoint_every > 0 && !opt.swa_replay_approx) {
    // A checkpoint is only reachable from a hit within the replay bound after it.
    const int64_t every = CheckpointStride(opt);
    const int bound = ReplayBound(layout, opt.swa_replay_max, ResolveMaxModelLen(c, opt));
    const bool windowed = layout.windowed();
    if (windowed && layout.has_anchor() && every > bound)
      return InvalidArgument("--swa-checkpoint-every " + std::to_string(every) + " keeps a window every " +
                             std::to_string(every) + " tokens, but a prefix hit may replay at most " + std::to_string(bound) +
                             " (--swa-replay-max): raise --swa-replay-max to at least " + std::to_string(every) +
                             " or checkpoint more often");
    if (!windowed || !layout.has_anchor())
      DI_LOG_WARN("--swa-checkpoint-every has no effect here: %s",
                  opt.swa_full ? "--swa-full keeps every window"
                  : !windowed  ? "no layer has a sliding window"
                               : "no full-attention layer anchors a window (prefixes match by chain from the first block)");
  }
  if (!layout.has_anchor() && (opt.draft || opt.speculative == SpecMethod::kMtp))
    return InvalidArgument("--speculative draft/mtp keeps its K/V in the blocks of the model's full-attention "
                           "layers, and every layer of this model has a sliding window: add --swa-full");
  // The proposers' caches share the target's block tables (group 0's): a block holds its positions in every cache.
  const bool mtp_cache = opt.speculative == SpecMethod::kMtp && !mtp_planes;  // the module's cache of its own
  KvLayout mtp_layout;
  if (mtp_cache) mtp_layout = Transformer(model, 1, dctx).MtpKvLayout();
  size_t bytes_per_token = PagedKvCache::BytesPerToken(layout, opt.kv_dtype());
  if (opt.draft) bytes_per_token += PagedKvCache::BytesPerToken(RankKvLayout(*opt.draft), opt.kv_dtype());
  if (mtp_cache) bytes_per_token += PagedKvCache::BytesPerToken(mtp_layout, opt.kv_dtype());
  const size_t block_bytes = bytes_per_token * opt.block_size;
  // No point holding more than every slot at full length needs.
  const int64_t seq_blocks =
      MaxSeqBlocks(layout, opt.block_size, max_len,
                   deepinfer::KvAhead(opt.overlap ? 2 : 1, opt.max_batched_tokens, speculating ? opt.num_speculative_tokens + 1 : 0));
  const size_t most = layout.num_groups() == 1 && layout.window(0) == 0
                          ? bytes_per_token * opt.max_num_seqs * (static_cast<size_t>(max_len) + opt.block_size)
                          : block_bytes * opt.max_num_seqs * static_cast<size_t>(seq_blocks + layout.num_groups());
  DI_ASSIGN_OR_RETURN(const int blocks, KvPoolBlocks(opt, block_bytes, most, dctx ? dctx->control.get() : nullptr));
  DI_ASSIGN_OR_RETURN(auto kv, PagedKvCache::Create(layout, blocks, opt.block_size, opt.kv_dtype()));
  DI_LOG_INFO("KV cache: %d blocks x %d tokens = %lld tokens, %s, %.1f MiB; max_model_len %d, max_num_seqs %d, "
              "max_batched_tokens %d, prefix caching %s, overlap %s",
              blocks, opt.block_size, static_cast<long long>(blocks) * opt.block_size, DTypeName(opt.kv_dtype()),
              kv->bytes() / 1048576.0, max_len, opt.max_num_seqs, opt.max_batched_tokens,
              opt.prefix_caching ? "on" : "off", opt.overlap ? "on (depth 1)" : "off (depth 0)");
  if (layout.num_groups() > 1 || layout.window(0) > 0) {
    // --swa-full's one group (sparse layers packed all the same).
    const KvLayout one = GroupKvLayout(base_layout, std::vector<int>(static_cast<size_t>(layout.num_layers), 0),
                                       opt.block_size);
    const int64_t full_blocks = MaxSeqBlocks(one, opt.block_size, max_len, 0);
    DI_LOG_INFO("KV cache: hybrid, %d groups of %d layers (windows:%s; %d padding planes); a sequence of %d tokens "
                "holds at most %.1f MiB (%.1f MiB with --swa-full)",
                layout.num_groups(), layout.num_planes(),
                [&] {
                  std::string w;
                  for (int g = 0; g < layout.num_groups(); ++g) w += " " + std::to_string(layout.window(g));
                  return w;
                }().c_str(),
                PaddingPlanes(layout), max_len,
                seq_blocks * PagedKvCache::BytesPerToken(layout, opt.kv_dtype()) * opt.block_size / 1048576.0,
                full_blocks * PagedKvCache::BytesPerToken(one, opt.kv_dtype()) * opt.block_size / 1048576.0);
  }
  std::unique_ptr<Engine> e(new Engine(c, model.tokenizer.get(), opt, blocks, layout));
  // The rank's shard of its attention group's K/V (tp and cp split it; --dp groups of one rank each hold all of
  // it): the ranks of a --dp job, and one process, share stored blocks when their weights are the same (under
  // --ep each rank's expert shard differs, and with it the digest).
  const int kv_shard = dctx ? dctx->pc.rank % (dctx->pc.tp * dctx->pc.cp) : 0;
  e->model_digest_ = ModelKvDigest(model, layout, opt.kv_dtype(), opt.block_size, kv_shard);
  e->kv_block_bytes_ = block_bytes;
  std::unique_ptr<PagedKvCache> draft_kv, mtp_kv;
  if (opt.draft) {
    DI_ASSIGN_OR_RETURN(draft_kv, PagedKvCache::Create(RankKvLayout(*opt.draft), blocks, opt.block_size, opt.kv_dtype()));
  }
  if (mtp_cache) {
    DI_ASSIGN_OR_RETURN(mtp_kv, PagedKvCache::Create(mtp_layout, blocks, opt.block_size, opt.kv_dtype()));
  }
  if (speculating)
    DI_LOG_INFO("speculative decoding: %s, %d tokens per step, %s verification%s", SpecMethodName(opt.speculative),
                opt.num_speculative_tokens, SpecVerifyName(opt.spec_verify),
                opt.speculative == SpecMethod::kNgram
                    ? (", n-gram " + std::to_string(opt.ngram_min) + ".." + std::to_string(opt.ngram_max)).c_str()
                    : "");
  if (opt.kv_offload_ram_bytes > 0 || !opt.kv_store_dir.empty()) {
    DI_RETURN_IF_ERROR(CheckKvTiers(opt, layout, dctx ? &dctx->pc : nullptr));
    KvTiers::Options to;
    to.ram_bytes = opt.kv_offload_ram_bytes;
    to.disk_dir = opt.kv_store_dir;
    to.disk_bytes = opt.kv_store_bytes;
    // --swa-replay approx writes full-attention K/V that a cold run would not (its windowed layers read nothing
    // below a hit's replay start): such entries must never be served to an exact engine, so they get keys of
    // their own.
    to.model_digest = opt.swa_replay_approx ? TierKey(e->model_digest_, 0x617070726f78ull /* "approx" */)
                                            : e->model_digest_;
    // A loop idle but for requests waiting on loads sleeps in the inbox: a finished load wakes it.
    to.on_load_done = [inbox = &e->inbox_] { inbox->Wake(); };
    to.before_load = opt.kv_tier_before_load;
    to.events = e->kv_events_.get();  // a router counts the tiers' blocks as hits too
    DI_ASSIGN_OR_RETURN(e->tiers_, KvTiers::Create(to, kv.get()));
    e->sched_->SetTiers(e->tiers_.get());
  }
  auto executor = std::make_unique<ModelExecutor>(model, std::move(kv), e->table_.get(), opt.max_batched_tokens, opt,
                                                  std::move(draft_kv), std::move(mtp_kv), opt.max_num_seqs, dctx);
  const ModelExecutor& built = *executor;
  e->executor_ = std::move(executor);  // before any return: the tiers hold the cache the executor owns
  // A configured method whose proposer was not built would run without drafts and say nothing: refuse instead.
  for (SpecMethod m : {SpecMethod::kDraft, SpecMethod::kMtp})
    if (opt.speculative == m && !built.HasProposer(m))
      return Internal(std::string("--speculative ") + SpecMethodName(m) + ": the engine built no " + SpecMethodName(m) +
                      " proposer for this model's KV layout" +
                      (m == SpecMethod::kMtp && c.is_dsv4() ? " (DeepSeek-V4's layout names no MTP plane)" : ""));
  if (dctx) {
    e->dist_host_ = std::make_unique<DistHost>(*e);
    e->dist_ = std::make_unique<DistControl>(*dctx, *e->dist_host_, e->inbox_, opt.block_size);
  }
  return e;
}

StatusOr<std::unique_ptr<Engine>> Engine::CreateWithExecutor(const ModelConfig& config, const Tokenizer* tok,
                                                             const EngineOptions& opt, ExecutorFactory make) {
  DI_RETURN_IF_ERROR(ValidateOptions(opt));
  if (opt.num_kv_blocks <= 0) return InvalidArgument("CreateWithExecutor needs num_kv_blocks");
  std::unique_ptr<Engine> e(new Engine(config, tok, opt, opt.num_kv_blocks));
  e->executor_ = make(e->table_.get());
  return e;
}

Engine::~Engine() {
  if (thread_.joinable()) (void)Shutdown();
  if (prev_) stream_.Wait(prev_->done);  // never destroy state a launched step still uses
  if (sched_) sched_->DrainLoads();     // a tier load still writing into the cache (an aborted request's)
  // The tiers' threads stop before the inbox they wake (declared after them) is destroyed.
  tiers_.reset();
}

Status Engine::Validate(const std::vector<int32_t>& prompt, const RequestParams& p) const {
  const int max_len = sched_cfg_.max_model_len;
  if (prompt.empty()) return InvalidArgument("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= config_.vocab_size)
      return InvalidArgument("prompt token id " + std::to_string(t) + " is outside the vocabulary (size " +
                             std::to_string(config_.vocab_size) + ")");
  if (static_cast<int>(prompt.size()) >= max_len)
    return InvalidArgument("the prompt has " + std::to_string(prompt.size()) + " tokens; this model's context is " +
                           std::to_string(max_len) + " tokens, which leaves no room to generate");
  if (p.max_tokens < 1) return InvalidArgument("max_tokens must be >= 1");
  if (p.n < 1 || p.n > opt_.max_num_seqs)
    return InvalidArgument("n must be in [1, " + std::to_string(opt_.max_num_seqs) + "] (--max-num-seqs)");
  if (p.logprobs > 20) return InvalidArgument("logprobs must be <= 20");
  for (int32_t t : p.stop_token_ids)
    if (t < 0 || t >= config_.vocab_size) return InvalidArgument("stop_token_ids: " + std::to_string(t) + " is outside the vocabulary");
  DI_RETURN_IF_ERROR(p.SamplingParams::Validate(config_.vocab_size));
  SpecMethod method;
  int k;
  DI_RETURN_IF_ERROR(ResolveSpeculation(p, opt_, opt_.draft != nullptr, opt_.speculative == SpecMethod::kMtp,
                                        &method, &k));
  if (method != SpecMethod::kNone && dist_)
    return InvalidArgument("speculative decoding is not supported in multi-process runs yet");
  if (!p.compiled_grammar && !p.grammar.empty()) {
    auto g = grammar::ParseGbnf(p.grammar);
    return g.ok() ? InvalidArgument("grammar: given as source but not compiled") : g.status();
  }
  if (p.compiled_grammar && !tok_) return InvalidArgument("structured output needs the model's tokenizer");
  if (p.gate.enabled() && !p.compiled_grammar) return InvalidArgument("a grammar gate needs a grammar");
  if (!p.gate.open_after.empty() && !p.gate.open_headers.empty())
    return InvalidArgument("a grammar gate opens on headers or on a trigger, not both");
  const int64_t longest = std::min<int64_t>(static_cast<int64_t>(prompt.size()) + p.max_tokens, max_len);
  const int64_t blocks = MaxSeqBlocks(kv_layout_, opt_.block_size, longest, KvAhead());
  if (blocks > pool_->num_blocks())
    return InvalidArgument("the request needs up to " + std::to_string(longest) + " tokens of KV cache (" +
                           std::to_string(blocks) + " blocks) but the whole pool has " +
                           std::to_string(pool_->num_blocks()) + " blocks (raise --kv-cache or lower max_tokens)");
  return Status::Ok();
}

StatusOr<ValidatedRequest> Engine::Check(std::vector<int32_t> prompt, RequestParams params) const {
  DI_RETURN_IF_ERROR(Validate(prompt, params));
  ValidatedRequest v(this, std::move(prompt), std::move(params));
  if (v.params_.compiled_grammar) v.token_sets_ = grammars_.Sets(v.params_);
  return v;
}

StatusOr<uint64_t> Engine::Add(std::vector<int32_t> prompt, RequestParams p, OutputCallback cb) {
  DI_ASSIGN_OR_RETURN(ValidatedRequest v, Check(std::move(prompt), std::move(p)));
  return Add(std::move(v), std::move(cb));
}

StatusOr<uint64_t> Engine::Add(ValidatedRequest v, OutputCallback cb) {
  if (v.engine_ != this) return InvalidArgument("the request was validated by another engine");
  RequestParams& p = v.params_;
  if (!p.seed) p.seed = std::random_device{}() | (static_cast<uint64_t>(std::random_device{}()) << 32);
  auto req = std::make_unique<Request>();
  req->id = inbox_.NextId();
  req->params = std::move(p);
  req->prompt = std::move(v.prompt_);
  req->callback = std::move(cb);
  if (req->params.compiled_grammar && (!v.token_sets_ || v.token_sets_->trie() != grammars_.Trie().get()))
    v.token_sets_ = grammars_.Sets(req->params);
  if (req->params.compiled_grammar)
    for (int i = 0; i < req->params.n; ++i)
      req->matchers.push_back(std::make_unique<grammar::GrammarMatcher>(v.token_sets_));
  if (req->params.compiled_grammar && req->params.gate.enabled())
    for (int i = 0; i < req->params.n; ++i)
      req->gates.push_back(std::make_unique<GrammarGateState>(req->params.gate, v.token_sets_->trie(), req->prompt));
  const uint64_t id = req->id;
  DI_RETURN_IF_ERROR(inbox_.Push(std::move(req)));
  return id;
}

void Engine::Abort(uint64_t request_id) { inbox_.PushAbort(request_id); }

const KvEventLog& Engine::kv_events() const {
  const KvEventLog* job = dist_ ? dist_->JobKvEvents() : nullptr;
  return job ? *job : *kv_events_;
}

void Engine::Ingest() {
  std::vector<std::unique_ptr<Request>> inbox;
  std::vector<uint64_t> aborts;
  inbox_.Take(&inbox, &aborts);
  IngestRequests(std::move(inbox), aborts);
}

void Engine::AbortAll() {
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (uint64_t id : ids) AbortNow(id);
}

void Engine::IngestRequests(std::vector<std::unique_ptr<Request>> inbox, const std::vector<uint64_t>& aborts) {
  for (auto& r : inbox) {
    Request* req = r.get();
    req->unfinished = req->params.n;
    // Validated at Add: resolving again cannot fail.
    (void)ResolveSpeculation(req->params, opt_, opt_.draft != nullptr, opt_.speculative == SpecMethod::kMtp,
                             &req->spec_method, &req->spec_k);
    auto& list = seqs_of_[req->id];
    for (int i = 0; i < req->params.n; ++i) {
      std::unique_ptr<OutputText> text;
      if (tok_)
        text = std::make_unique<OutputText>(tok_, req->prompt, req->params.stop, req->params.include_stop_str_in_output);
      // Samples after the first wait until its prompt is in the prefix cache, then share those blocks.
      const bool held = i > 0 && opt_.prefix_caching;
      const uint64_t seq_id = next_seq_id_++;
      auto s = std::make_unique<Sequence>(seq_id, next_arrival_++, req, i, held, std::move(text));
      list.push_back(s.get());
      sched_->AddWaiting(s.get());
      seqs_.emplace(seq_id, std::move(s));
    }
    requests_.emplace(req->id, std::move(r));
  }
  for (uint64_t id : aborts) AbortNow(id);
}

bool Engine::HasWork() {
  if (dist_ && dist_->RemotePending()) return true;
  return !inbox_.Empty() || !seqs_.empty() || prev_ != nullptr;
}

void Engine::Launch(SchedulerOutputs so) {
  WorkerStepState* st = &ring_[so.step % 2];
  if (st->phase != WorkerStepState::Phase::kFree) {
    DI_LOG_ERROR("engine: step ring entry reused while live (step %llu)", static_cast<unsigned long long>(so.step));
    std::abort();
  }
  st->sched = std::move(so);
  st->out.rows.clear();
  st->status = Status::Ok();
  st->phase = WorkerStepState::Phase::kLaunched;
  // The step's shape (for the latency target's cost model) before it is queued: the stream reads it.
  StepTiming* timing = &timing_[st->sched.step % 2];
  timing->shape = StepShape{};
  timing->shape.prefill_limit = prefill_limit_;
  for (const SequenceMetadata& r : st->sched.rows) {
    const bool prefill = r.q_begin < seqs_.at(r.seq_id)->prefill_end();
    timing->shape.tokens += r.q_len;
    timing->shape.prefill_tokens += prefill ? r.q_len : 0;
    timing->shape.decode_rows += prefill ? 0 : 1;
    timing->shape.attention += AttentionPairs(r.q_begin, r.q_len);
  }
  Executor* ex = executor_.get();
  const auto* step_clock = &opt_.step_clock;
  const double scale = opt_.step_time_scale;
  st->done = stream_.Enqueue([ex, st, timing, step_clock, scale] {
    // The step's own execution on the stream, not the gap between two schedules: with overlap the host's work
    // runs beside it and must not count.
    const auto t0 = Clock::now();
    ex->Execute(*st);
    timing->seconds = (*step_clock ? (*step_clock)(timing->shape) : Seconds(Clock::now() - t0)) * scale;
  });
  const int64_t prompt_tokens = timing->shape.prefill_tokens;
  for (const SequenceMetadata& r : st->sched.rows) seqs_.at(r.seq_id)->Launched(st->done);
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.prefill_budget = timing->shape.prefill_limit;
  if (timing->shape.prefill_limit >= 0 &&
      timing->shape.prefill_limit < sched_cfg_.max_batched_tokens - (timing->shape.tokens - timing->shape.prefill_tokens)) {
    ++stats_.target_limited_steps;
    if (timing->shape.prefill_tokens >= timing->shape.prefill_limit) ++target_filled_steps_;  // prompts wanted more
  }
  ++stats_.steps;
  stats_.rows += static_cast<int64_t>(st->sched.rows.size());
  stats_.prompt_tokens_computed += prompt_tokens;
}

void Engine::StepOnce() {
  const auto t0 = Clock::now();
  double waited = 0;
  if (dist_) dist_->Exchange();
  else Ingest();
  SchedulerOutputs so;
  so.step = next_step_;
  prefill_limit_ = -1;  // set by PrefillLimit when the latency target sizes this step's prefill
  sched_->Schedule(&so);
  // Multi-process: a step runs when any rank has rows (MoE layers are collective), empty here if need be.
  const bool launch = dist_ ? dist_->Sync(!so.empty()) : !so.empty();
  if (opt_.host_overhead_us > 0) {  // bench sim: emulate host work (tokenization, detokenization, ...)
    const auto until = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(opt_.host_overhead_us * 1e3));
    while (Clock::now() < until) {
    }
  }
  WorkerStepState* cur = nullptr;
  if (launch) {
    cur = &ring_[so.step % 2];
    Launch(std::move(so));
    ++next_step_;
  }
  // Step N's results are processed while step N+1 computes.
  auto process = [&](WorkerStepState* st) {
    const auto w0 = Clock::now();
    stream_.Wait(st->done);
    waited += Seconds(Clock::now() - w0);
    Process(*st);
  };
  if (prev_) {
    process(prev_);
    prev_ = nullptr;
  }
  if (cur) {
    if (opt_.overlap) prev_ = cur;
    else process(cur);
  }
  sched_->Reclaim(CompletedFence());
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_.host_seconds += Seconds(Clock::now() - t0) - waited;
  // Snapshot scheduler state for readers on other threads (metrics).
  stats_.preemptions = sched_->preemptions();
  stats_.priority_preemptions = sched_->priority_preemptions();
  stats_.cached_prompt_tokens = sched_->cached_tokens();
  stats_.replayed_prompt_tokens = sched_->replayed_tokens();
  stats_.waiting = sched_->num_waiting();
  stats_.loading = sched_->num_loading();
  stats_.running = sched_->num_running();
  stats_.kv_blocks_total = pool_->num_blocks();
  stats_.kv_blocks_free = pool_->num_available();
  stats_.kv_blocks_cached = pool_->num_cached();
}

int64_t Engine::KvAhead() const {
  const int64_t spec = opt_.speculative != SpecMethod::kNone ? opt_.num_speculative_tokens + 1 : 0;
  return deepinfer::KvAhead(opt_.overlap ? 2 : 1, opt_.max_batched_tokens, spec);
}

void Engine::SetUpLatencyTarget() {
  if (opt_.target_itl_ms <= 0) return;
  sched_cfg_.prefill_limit = [this](const SchedulerOutputs& decode_rows) { return PrefillLimit(decode_rows); };
  DI_LOG_INFO("latency target: %.3g ms per step with decode rows; prefill sized from the fitted step cost "
              "(--max-batched-tokens %d until %d steps are timed; at least %d prefill tokens per step)",
              opt_.target_itl_ms, opt_.max_batched_tokens, StepCostModel::kWarmupSteps, opt_.block_size);
}

int Engine::PrefillLimit(const SchedulerOutputs& so) {
  // No decode row: no stream waits on this step (a sequence whose first token comes out of it starts its
  // inter-token clock after it), so prompts get the whole budget. Before the fit is warm: the same.
  if (so.rows.empty() || !cost_.warm()) return INT_MAX;
  double attention = 0;
  for (const SequenceMetadata& r : so.rows) attention += AttentionPairs(r.q_begin, r.q_len);
  // Where the prefill will start: the furthest a running prompt has got (its chunk sees the most keys). Taking
  // every prefill token at that context bounds the attention of several shorter chunks from above. A new
  // admission's prefix-cache hit is not known here (it is counted as context 0).
  int64_t context = 0;
  for (const auto& [id, s] : seqs_)
    if (s->status() == SeqStatus::kRunning && s->sched() < s->prefill_end())
      context = std::max<int64_t>(context, s->sched());
  const int cap = std::max(0, sched_cfg_.max_batched_tokens - so.num_tokens);
  const int fits = cost_.MaxPrefill(opt_.target_itl_ms * 1e-3, so.num_tokens, attention, context, cap);
  // Prompts always progress by at least one KV block per step, even when the decode rows alone are over the
  // target (many streams, or a target below one decode step): they would never start otherwise.
  prefill_limit_ = std::max(fits, std::min(opt_.block_size, cap));
  if (fits == 0 && cap > 0 && !target_infeasible_logged_) {
    // Said once: a target below what the decode rows alone cost turns every prompt into one-block chunks, which
    // costs time to first token and throughput; the user should know the target cannot be met here.
    target_infeasible_logged_ = true;
    DI_LOG_WARN("latency target: %.3g ms is below the predicted time of the decode rows alone (%.3g ms for %zu rows); "
                "prompts get the minimum of %d tokens per step while that lasts (raise --target-itl-ms)",
                opt_.target_itl_ms, cost_.Predict(so.num_tokens, attention) * 1e3, so.rows.size(), prefill_limit_);
  }
  return prefill_limit_;
}

Fence Engine::CompletedFence() const {
  // Multi-process: the tensor-parallel ranks of a group must free slots and blocks at the same iteration (their
  // schedulers stay identical only on identical inputs), so they go by the last step this loop processed, which
  // is complete on every rank, rather than by what the stream happens to have finished by now.
  return dist_ ? processed_fence_ : stream_.completed();
}

void Engine::Process(WorkerStepState& st) {
  processed_fence_ = std::max(processed_fence_, st.done);
  // The fence has passed: the stream's write of the step's duration is visible. A failed step's time says
  // nothing about a normal one.
  if (opt_.target_itl_ms > 0) {
    const StepTiming& t = timing_[st.sched.step % 2];
    if (dist_ && dist_->shares_step_times()) {
      // A group of several ranks: this rank's clock is not the group's. The timing goes out with the next Sync,
      // and every rank of the group observes its leader's there (DistControl::Sync), all at the same iteration.
      unshared_timings_.push_back(StepObservation{st.sched.step, st.status.ok(), t.shape, t.seconds});
    } else if (st.status.ok()) {
      // What the target was sized from against what the step took (DEEPINFER_LOG=debug): a step far over the
      // target says which shape the fit gets wrong.
      if (cost_.warm() && GetLogLevel() <= LogLevel::kDebug) {
        // How many prompt chunks the step held, and how many of them ended their prompt (those rows sample).
        int chunks = 0, last_chunks = 0;
        for (const SequenceMetadata& r : st.sched.rows) {
          const int64_t end = seqs_.at(r.seq_id)->prefill_end();
          if (r.q_begin >= end) continue;
          ++chunks;
          last_chunks += r.q_begin + r.q_len >= end ? 1 : 0;
        }
        DI_LOG_DEBUG("latency target: step %llu, %d tokens (%d prefill in %d chunks, %d ending a prompt; %d decode "
                     "rows), %.0f attention pairs, prefill limit %d: %.1f ms, predicted %.1f ms",
                     static_cast<unsigned long long>(st.sched.step), t.shape.tokens, t.shape.prefill_tokens, chunks,
                     last_chunks, t.shape.decode_rows, t.shape.attention, t.shape.prefill_limit, t.seconds * 1e3,
                     cost_.Predict(t.shape.tokens, t.shape.attention) * 1e3);
      }
      cost_.Observe(t.shape, t.seconds);
    }
  }
  for (size_t i = 0; i < st.sched.rows.size(); ++i) {
    const SequenceMetadata& r = st.sched.rows[i];
    Sequence* s = seqs_.at(r.seq_id).get();
    if (r.dynamic) {
      // The run's real extent: K/V is valid for the input position and the accepted drafts.
      const VerifiedRun* run = st.status.ok() ? &st.out.runs[i] : nullptr;
      const int advanced = run ? static_cast<int>(run->tokens.size()) : 0;
      s->RunProcessed(r.q_len, advanced, sched_cfg_.max_model_len);
      // A row comes back empty only when its sequence reached its limit on the device, which the host learns
      // from an earlier step: it must be finished (or aborting) by now. Anything else would reschedule it forever.
      if (run && advanced == 0 && s->status() == SeqStatus::kRunning && !AbortPending(s->req()->id)) {
        DI_LOG_ERROR("engine: step %llu: request %llu's speculative row committed nothing (a bug); aborting it",
                     static_cast<unsigned long long>(st.sched.step), static_cast<unsigned long long>(s->req()->id));
        Finish(s, "abort");
      }
      s->Processed(run && advanced > 0 ? run->kv_end : 0);
    } else {
      s->Processed(r.q_begin + r.q_len);
    }
    if (s->status() == SeqStatus::kFinished) {  // a ghost row: scheduled before its stop or abort was known
      if (r.samples) {
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.ghost_rows;
      }
      MaybeRelease(s);
      continue;
    }
    if (!st.status.ok()) {
      DI_LOG_ERROR("engine: step %llu failed: %s", static_cast<unsigned long long>(st.sched.step),
                   st.status.ToString().c_str());
      Finish(s, "abort");
      MaybeRelease(s);
      continue;
    }
    if (r.dynamic) {
      CommitRun(s, st.out.runs[i]);
    } else if (r.samples) {
      Commit(s, st.out.rows[i]);
    } else {
      sched_->Publish(s);
    }
    sched_->Slide(s);  // after Publish: a block is offered to the prefix cache before it leaves the window
    MaybeRelease(s);
  }
  st.phase = WorkerStepState::Phase::kFree;
}

void Engine::Commit(Sequence* s, const SampledToken& t) {
  const RequestParams& p = s->req()->params;
  s->Commit(t.token);
  sched_->Publish(s);
  if (s->index() == 0 && s->num_outputs() == 1)  // its prompt is in the prefix cache now: release the siblings
    for (Sequence* sib : seqs_of_[s->req()->id]) sib->Unhold();
  RequestOutput ev;
  ev.token_ids.push_back(t.token);
  if (p.logprobs >= 0) ev.logprobs.push_back({t.token, t.logprob, t.top});
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++stats_.generated_tokens;
  }
  std::string reason, stop_reason;
  OutputText* text = s->text();
  if (!p.ignore_eos && tok_ && tok_->IsEog(t.token)) {
    reason = "stop";
  } else if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) != p.stop_token_ids.end()) {
    reason = "stop";
  } else if (text && text->Push(t.token)) {
    reason = "stop";
    stop_reason = text->stop_matched();
  } else if (s->num_outputs() >= p.max_tokens || static_cast<int>(s->tokens().size()) >= sched_cfg_.max_model_len) {
    reason = "length";
  }
  if (!reason.empty()) {
    Finish(s, std::move(reason), std::move(stop_reason), std::move(ev));
    return;
  }
  if (text) ev.text = text->TakeReady(false);
  Emit(s, std::move(ev));
}

void Engine::CommitRun(Sequence* s, const VerifiedRun& run) {
  s->CountSpeculation(run.proposed, run.accepted);
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (run.proposed > 0) {
      ++stats_.spec_drafts;
      stats_.spec_draft_tokens += run.proposed;
      stats_.spec_accepted_tokens += run.accepted;
      ++stats_.spec_accepted_len[std::min(run.accepted, kMaxSpecTokens)];
      for (int i = 0; i < run.accepted && i < kMaxSpecTokens; ++i) ++stats_.spec_accepted_per_pos[i];
    }
  }
  // One event per token, as plain decoding sends them; a stop inside the run ends the sample, and the
  // tokens after it are ghosts, never streamed.
  // An abort that arrived while the run was being committed (a client that stops after seeing a token) takes
  // effect at that token, as it would between two plain decoding steps: the rest are never sent.
  for (size_t i = 0; i < run.tokens.size(); ++i) {
    if (s->status() != SeqStatus::kRunning || (i > 0 && AbortPending(s->req()->id))) break;
    Commit(s, run.tokens[i]);
  }
}

bool Engine::AbortPending(uint64_t request_id) const {
  return inbox_.HasAbort(request_id);
}

void Engine::Finish(Sequence* s, std::string reason, std::string stop_reason, RequestOutput ev) {
  if (s->status() == SeqStatus::kFinished || s->status() == SeqStatus::kReleased) return;  // first terminal reason wins
  if (s->status() == SeqStatus::kWaiting) sched_->RemoveWaiting(s);
  s->Finish(reason, std::move(stop_reason));
  if (s->index() == 0)
    for (Sequence* sib : seqs_of_[s->req()->id]) sib->Unhold();
  if (s->text()) ev.text += s->text()->TakeReady(true);
  ev.finished = true;
  ev.finish_reason = std::move(reason);
  ev.stop_reason = s->stop_reason();
  Request* req = s->req();
  --req->unfinished;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    if (req->unfinished == 0) ++(ev.finish_reason == "abort" ? stats_.requests_aborted : stats_.requests_finished);
  }
  Emit(s, std::move(ev));
}

void Engine::Emit(Sequence* s, RequestOutput ev) {
  const Request* req = s->req();
  ev.request_id = req->id;
  ev.index = s->index();
  ev.prompt_tokens = s->prompt_len();
  ev.cached_tokens = s->cached_tokens();
  ev.replayed_tokens = s->replayed_tokens();
  ev.completion_tokens = s->num_outputs();
  ev.spec_proposed = s->spec_proposed();
  ev.spec_accepted = s->spec_accepted();
  if (req->callback) req->callback(ev);
}

void Engine::MaybeRelease(Sequence* s) {
  if (s->status() != SeqStatus::kFinished || s->inflight() > 0) return;
  sched_->Release(s, CompletedFence());  // the one release path: runs once, on the finished -> released step
  Request* req = s->req();
  auto& list = seqs_of_[req->id];
  for (Sequence* x : list)
    if (x->status() != SeqStatus::kReleased) return;
  if (req->unfinished > 0) return;
  const uint64_t rid = req->id;
  for (Sequence* x : list) seqs_.erase(x->id());
  seqs_of_.erase(rid);
  requests_.erase(rid);
}

void Engine::AbortNow(uint64_t request_id) {
  auto it = seqs_of_.find(request_id);
  if (it == seqs_of_.end()) return;  // unknown or already gone: late signals are ignored
  std::vector<Sequence*> list = it->second;
  for (Sequence* s : list) {
    Finish(s, "abort");
  }
  for (Sequence* s : list) MaybeRelease(s);  // may erase the request: use the copy
}

Status Engine::RunUntilIdle() {
  if (dist_ && !dist_->is_root()) {
    // A follower: step with the job until rank 0 shuts it down.
    while (!dist_->done()) StepOnce();
    sched_->DrainLoads();
    sched_->Reclaim(CompletedFence());
    return Status::Ok();
  }
  int stalls = 0;
  while (HasWork()) {
    const uint64_t before = next_step_;
    const bool had_prev = prev_ != nullptr;
    const uint64_t loads_seen = tiers_ ? tiers_->loads_completed() : 0;
    StepOnce();
    if (next_step_ == before && !had_prev && !dist_ && sched_->num_loads() > 0) {
      tiers_->WaitForLoad(loads_seen);  // only requests waiting on the tiers: sleep until a load is done
      stalls = 0;
    } else if (next_step_ == before && !had_prev && !dist_) {
      if (++stalls > 3) return Internal("engine: requests are queued but none can be scheduled (a bug)");
    } else {
      stalls = 0;
    }
  }
  return Status::Ok();
}

void Engine::Start() {
  thread_ = std::thread([this] {
    for (;;) {
      // Wakes for new requests, aborts or stop; the engine-thread state read here is this thread's own.
      const bool remote = dist_ && dist_->RemotePending();
      // Requests that only wait on tier loads (the last iteration launched nothing) need no iteration until a
      // load is done (its completion wakes the inbox) or something arrives.
      const bool loads_only = idle_on_loads_;
      const uint64_t loads_seen = idle_loads_seen_;
      // Rank 0 of a --dp job also iterates four times a second while idle: the groups' KV events (a tier's
      // write-through, the blocks the last step published, a restarted store's entries) reach rank 0's
      // /v1/kv_events only in an iteration's Sync. An idle iteration launches nothing.
      const double heartbeat_s = dist_ && dist_->is_root() && dist_->ships_events() ? 0.25 : 0;
      if (!inbox_.Wait(
              [&] {
                return remote || prev_ != nullptr ||
                       (!seqs_.empty() && (!loads_only || tiers_->loads_completed() != loads_seen));
              },
              heartbeat_s))
        break;
      idle_loads_seen_ = tiers_ ? tiers_->loads_completed() : 0;
      const uint64_t before = next_step_;
      const bool had_prev = prev_ != nullptr;
      StepOnce();
      // Nothing was in flight and nothing launched: only a load's completion (or the inbox) changes that. With a
      // step processed in this iteration, its slots and blocks may let the next one run: no sleep.
      idle_on_loads_ = tiers_ && !had_prev && next_step_ == before && prev_ == nullptr && sched_->num_loads() > 0;
    }
    DrainForShutdown();
  });
}

void Engine::DrainForShutdown() {
  if (dist_) {
    // The stop travels with the next exchange; every rank aborts what it holds and steps until the whole job
    // has drained, then all leave at the same iteration. (A follower whose loop already ended has nothing left.)
    while (!dist_->done()) StepOnce();
    sched_->DrainLoads();
    sched_->Reclaim(CompletedFence());
    if (opt_.target_itl_ms > 0) {
      // Every rank's fit, bit for bit (%a): the ranks of a group fed the same timings agree exactly
      // (tests/dist/itl_tp.mjs compares them).
      const auto& c = cost_.coefficients();
      std::lock_guard<std::mutex> lock(stats_mu_);
      DI_LOG_INFO("latency target: rank %d: %lld steps timed, fit a=%a s + b=%a s/token + c=%a s/pair; %lld of %lld "
                  "steps limited, %lld of them with their prefill cut to the limit", dist_->pc().rank,
                  static_cast<long long>(cost_.observed()), c[0], c[1], c[2],
                  static_cast<long long>(stats_.target_limited_steps), static_cast<long long>(stats_.steps),
                  static_cast<long long>(target_filled_steps_));
    }
    return;
  }
  // Abort whatever is left, then run the loop until the pipeline is empty: a launched step is never abandoned.
  Ingest();
  std::vector<uint64_t> ids;
  for (auto& [id, r] : requests_) ids.push_back(id);
  for (uint64_t id : ids) AbortNow(id);
  while (prev_ || !seqs_.empty()) StepOnce();
  sched_->DrainLoads();  // the aborted requests' tier loads: their blocks go back to the pool
  // Nothing is in flight now, so every fence has passed: the slots the aborts above returned (with no step
  // left to run, StepOnce's Reclaim never sees them) go back to the free list before the leak check.
  sched_->Reclaim(CompletedFence());
}

Status Engine::Shutdown() {
  inbox_.Stop();
  if (thread_.joinable()) thread_.join();
  else DrainForShutdown();
  return CheckNoLeaks();
}

Status Engine::CheckNoLeaks() const {
  if (prev_) return Internal("a step is still in flight");
  for (const auto& st : ring_)
    if (st.phase != WorkerStepState::Phase::kFree) return Internal("a step-ring entry is still live");
  if (!seqs_.empty() || !requests_.empty())
    return Internal(std::to_string(seqs_.size()) + " sequences / " + std::to_string(requests_.size()) +
                    " requests not released");
  return sched_->CheckNoLeaks();
}

EngineStats Engine::Stats() const {
  EngineStats s;
  {
    std::lock_guard<std::mutex> lock(stats_mu_);
    s = stats_;
  }
  if (tiers_) {
    s.kv_tiers = tiers_->Stats();
    s.kv_tiers.loading_requests = s.loading;
  }
  if (dist_ && dist_->is_root()) {
    // The job's totals: every group's leader's counters as last reported (rank 0's own are the freshest).
    const std::vector<RankReport> reports = dist_->Reports();
    for (size_t r = 1; r < reports.size(); ++r) {
      dist::ParallelConfig pc = dist_->pc();
      pc.rank = static_cast<int>(r);
      if (!pc.is_group_leader()) continue;
      s.rows += reports[r].rows;
      s.prompt_tokens_computed += reports[r].prompt_tokens_computed;
      s.generated_tokens += reports[r].generated_tokens;
      s.requests_finished += reports[r].requests_finished;
    }
  }
  s.device_busy_seconds = stream_.busy_seconds();
  s.device_idle_seconds = stream_.idle_seconds();
  return s;
}

}  // namespace deepinfer
