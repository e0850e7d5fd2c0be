// The allocation and free paths of CachingAllocator: best fit, splitting, merging, stream events,
// and the out-of-memory ladder.
#include "allocator/caching_allocator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

#include "allocator/allocator_errors.h"
#include "allocator/cleanup.h"
#include "allocator/size_rounding.h"

namespace ferry {

namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

std::int64_t as_signed(std::size_t bytes) { return static_cast<std::int64_t>(bytes); }

}  // namespace

CachingAllocator::CachingAllocator(SegmentSource& source, EventSource& events, AllocatorConfig config)
    : source_(source), events_(events), config_(config), trace_(config.trace_entries) {
  if (config_.expandable_segments && !source_.supports_expandable_segments()) {
    throw AllocatorConfigError("expandable_segments:True is not supported by the '" + source_.name() +
                               "' segment source; unset it in FERRY_ALLOC_CONF");
  }
}

CachingAllocator::~CachingAllocator() {
  // Live allocations die with the allocator: give every segment back to the source. An expandable
  // segment's mapped pages are unmapped as the runs they were mapped in (a block may be a split piece of
  // a page). A failure is reported and the rest is still given back: a destructor never throws.
  for (auto& [address, segment] : segments_) {
    if (segment->expandable) {
      for (Block* block = segment->first; block != nullptr;) {
        if (!block->mapped) {
          block = block->next;
          continue;
        }
        const std::uintptr_t start = block->address;
        while (block != nullptr && block->mapped) block = block->next;
        const std::uintptr_t end = block != nullptr ? block->address : segment->address + segment->address_space;
        run_cleanup("unmapping an expandable segment's pages", [&] { source_.unmap_pages(reinterpret_cast<void*>(start), end - start); });
      }
      run_cleanup("releasing an expandable segment's address range",
                  [&] { source_.release_address_range(reinterpret_cast<void*>(segment->address), segment->address_space); });
    } else {
      run_cleanup("freeing a segment", [&] { source_.free_segment(reinterpret_cast<void*>(segment->address), segment->address_space); });
    }
  }
  for (auto& [event, block] : pending_events_) run_cleanup("releasing a stream event", [&] { events_.release(event); });
}

bool CachingAllocator::give_back(const char* what, const std::function<void()>& call) {
  try {
    call();
    return true;
  } catch (const std::exception& error) {
    ++stats_.num_release_failures;
    std::fprintf(stderr, "ferry: warning: %s failed; the memory stays cached and the run goes on: %s\n", what, error.what());
    return false;
  }
}

void CachingAllocator::record(TraceAction action, std::uintptr_t address, std::size_t size, StreamId stream,
                              MemoryCategory category, TagId tag) {
  if (!trace_.enabled()) return;
  trace_.record(TraceEvent{action, category, tag, now_ns(), address, size, stream});
}

CachingAllocator::Block* CachingAllocator::new_block() {
  if (!recycled_blocks_.empty()) {
    Block* block = recycled_blocks_.back();
    recycled_blocks_.pop_back();
    return block;
  }
  block_storage_.push_back(std::make_unique<Block>());
  return block_storage_.back().get();
}

void CachingAllocator::recycle_block(Block* block) {
  auto node = std::move(block->node);
  *block = Block{};
  block->node = std::move(node);
  recycled_blocks_.push_back(block);
}

void CachingAllocator::insert_free(Block* block) {
  BlockPool& pool = *block->pool;
  block->gc_count_base = pool.search_count;
  if (block->node) {
    block->node.value() = block;
    pool.blocks.insert(std::move(block->node));
  } else {
    pool.blocks.insert(block);
  }
  if (block->is_split()) {
    stats_.inactive_split.increase(pool.is_small, 1);
    stats_.inactive_split_bytes.increase(pool.is_small, as_signed(block->size));
  }
}

void CachingAllocator::remove_free(Block* block) {
  BlockPool& pool = *block->pool;
  auto node = pool.blocks.extract(block);
  // A block keeps one spare node; a second one (from a merged neighbour) is simply dropped.
  if (!block->node) block->node = std::move(node);
  if (block->is_split()) {
    stats_.inactive_split.decrease(pool.is_small, 1);
    stats_.inactive_split_bytes.decrease(pool.is_small, as_signed(block->size));
  }
}

Allocation CachingAllocator::malloc(std::size_t bytes, StreamId stream, MemoryCategory category, TagId tag) {
  if (bytes == 0) return {};
  std::lock_guard lock(mutex_);
  if (!pending_events_.empty()) process_events();
  if (bytes > kMaxManagedBytes) {  // no device holds it; rounding it up would wrap
    ++stats_.num_ooms;
    throw OutOfMemoryError("out of memory: tried to allocate " + std::to_string(bytes) + " bytes for " +
                               std::string(category_name(category)) + ", more than any device ferry manages (" +
                               std::to_string(kMaxManagedBytes) + " bytes)",
                           bytes, bytes, category);
  }

  const std::size_t rounded = round_size(bytes, config_);
  BlockPool& pool = pool_for(is_small_request(rounded));
  Block* block = find_free_block(pool, stream, rounded);
  if (block == nullptr && !pending_events_.empty()) {
    // Memory never grows while freed blocks wait for their uses on other streams (a copy still running):
    // wait for those and look again, as a device whose events complete at once (meta's dry run) would find
    // them free. PyTorch waits only when out of memory. (A hit can still pick another block than the dry
    // run's while one is awaited: only holding such memory in program order removes all timing.)
    synchronize_and_free_events();
    block = find_free_block(pool, stream, rounded);
  }
  if (block == nullptr) {
    if (config_.garbage_collection_threshold > 0) collect_garbage();
    block = allocate_new_block(pool, stream, rounded);
    if (block == nullptr && release_oversize_blocks(pool, stream, rounded)) {
      block = allocate_new_block(pool, stream, rounded);
    }
    if (block == nullptr && release_cached_blocks()) {
      block = allocate_new_block(pool, stream, rounded);
      if (block != nullptr) ++stats_.num_alloc_retries;
    }
    if (block == nullptr) raise_out_of_memory(bytes, rounded, stream, category, tag);
  }

  split_block(block, rounded);
  block->allocated = true;
  block->requested = bytes;
  block->category = category;
  block->tag = tag;

  const bool small = pool.is_small;
  stats_.allocation.increase(small, 1);
  stats_.allocated_bytes.increase(small, as_signed(block->size));
  stats_.active.increase(small, 1);
  stats_.active_bytes.increase(small, as_signed(block->size));
  stats_.requested_bytes.increase(small, as_signed(bytes));
  stats_.category_allocated_bytes[category_index(category)].increase(as_signed(block->size));
  stats_.category_requested_bytes[category_index(category)].increase(as_signed(bytes));
  stats_.note_allocated_peak();
  record(TraceAction::alloc, block->address, block->size, stream, category, tag);
  return Allocation{reinterpret_cast<void*>(block->address), block->size, block};
}

CachingAllocator::Block* CachingAllocator::find_free_block(BlockPool& pool, StreamId stream, std::size_t size) {
  ++pool.search_count;
  search_key_.stream = stream;
  search_key_.size = size;
  search_key_.address = 0;
  auto it = pool.blocks.lower_bound(&search_key_);
  if (it == pool.blocks.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  if (config_.max_split_size_set()) {
    // Small requests never take an oversize block; large ones only take a nearly exact one.
    if (size < config_.max_split_size && block->size >= config_.max_split_size) return nullptr;
    if (size >= config_.max_split_size && block->size >= size + kLargeBuffer) return nullptr;
  }
  remove_free(block);
  return block;
}

CachingAllocator::Block* CachingAllocator::allocate_new_block(BlockPool& pool, StreamId stream, std::size_t size) {
  return config_.expandable_segments ? allocate_expandable_block(pool, stream, size)
                                     : allocate_segment_block(pool, stream, size);
}

CachingAllocator::Block* CachingAllocator::allocate_segment_block(BlockPool& pool, StreamId stream,
                                                                  std::size_t size) {
  const std::size_t segment_bytes = segment_size_for(size);
  void* address = source_.allocate_segment(segment_bytes);
  if (address == nullptr) return nullptr;

  Block* block = add_segment(pool, stream, address, segment_bytes, 0);
  stats_.reserved_bytes.increase(pool.is_small, as_signed(segment_bytes));
  ++stats_.num_device_alloc;
  record(TraceAction::segment_alloc, block->address, segment_bytes, stream);
  return block;
}

CachingAllocator::Block* CachingAllocator::add_segment(BlockPool& pool, StreamId stream, void* address,
                                                       std::size_t bytes, std::size_t page_size) {
  auto segment = std::make_unique<Segment>();
  segment->address = reinterpret_cast<std::uintptr_t>(address);
  segment->address_space = bytes;
  segment->mapped_bytes = page_size == 0 ? bytes : 0;
  segment->stream = stream;
  segment->small_pool = pool.is_small;
  segment->expandable = page_size != 0;
  segment->page_size = page_size;
  Block* block = new_block();
  block->address = segment->address;
  block->size = bytes;
  block->stream = stream;
  block->pool = &pool;
  block->segment = segment.get();
  block->mapped = page_size == 0;
  segment->first = block;
  segments_.emplace(segment->address, std::move(segment));
  stats_.segment.increase(pool.is_small, 1);
  return block;
}

void CachingAllocator::split_block(Block* block, std::size_t size) {
  const std::size_t remaining = block->size - size;
  const bool split = (block->pool->is_small || block->segment->expandable)
                         ? remaining >= kMinBlockSize
                         : size < config_.max_split_size && remaining > kSmallSize;
  if (!split) return;
  Block* rest = new_block();
  rest->address = block->address + size;
  rest->size = remaining;
  rest->stream = block->stream;
  rest->pool = block->pool;
  rest->segment = block->segment;
  rest->prev = block;
  rest->next = block->next;
  if (block->next != nullptr) block->next->prev = rest;
  block->next = rest;
  block->size = size;
  // The chosen block's spare tree node serves the remainder: no heap allocation on a cache hit.
  if (!rest->node && block->node) rest->node = std::move(block->node);
  insert_free(rest);
}

void CachingAllocator::free(Allocation allocation) {
  if (!allocation) return;
  std::lock_guard lock(mutex_);
  Block* block = allocation.block;
  if (!block->allocated || block->address != reinterpret_cast<std::uintptr_t>(allocation.address)) {
    throw InvalidFreeError("free of an allocation at address " +
                           std::to_string(reinterpret_cast<std::uintptr_t>(allocation.address)) +
                           " that is not live (double free?)");
  }
  const bool small = block->pool->is_small;
  block->allocated = false;
  stats_.allocation.decrease(small, 1);
  stats_.allocated_bytes.decrease(small, as_signed(block->size));
  stats_.requested_bytes.decrease(small, as_signed(block->requested));
  stats_.category_allocated_bytes[category_index(block->category)].decrease(as_signed(block->size));
  stats_.category_requested_bytes[category_index(block->category)].decrease(as_signed(block->requested));
  record(TraceAction::free_requested, block->address, block->size, block->stream, block->category, block->tag);

  if (!block->stream_uses.empty()) {
    for (StreamId use : block->stream_uses) {
      pending_events_.emplace_back(events_.record(use), block);
      ++block->event_count;
    }
    block->stream_uses.clear();
    return;
  }
  free_block(block);
}

void CachingAllocator::free(void* address) {
  const auto target = reinterpret_cast<std::uintptr_t>(address);
  Allocation allocation;
  {
    std::lock_guard lock(mutex_);
    auto it = segments_.upper_bound(target);
    if (it != segments_.begin()) {
      const Segment& segment = *std::prev(it)->second;
      for (Block* block = segment.first; block != nullptr && block->address <= target; block = block->next) {
        if (block->address == target && block->allocated) {
          allocation = Allocation{address, block->size, block};
          break;
        }
      }
    }
  }
  if (!allocation) {
    throw InvalidFreeError("free of address " + std::to_string(target) +
                           " that this allocator did not hand out or that was already freed");
  }
  free(allocation);
}

void CachingAllocator::record_stream(Allocation allocation, StreamId stream) {
  if (!allocation) return;
  std::lock_guard lock(mutex_);
  Block* block = allocation.block;
  if (stream == block->stream) return;
  if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end()) {
    block->stream_uses.push_back(stream);
  }
}

void CachingAllocator::absorb(Block* block, Block* neighbour) {
  if (neighbour == block->prev) {
    block->address = neighbour->address;
    block->prev = neighbour->prev;
    if (block->prev != nullptr) {
      block->prev->next = block;
    } else {
      block->segment->first = block;
    }
  } else {
    block->next = neighbour->next;
    if (block->next != nullptr) block->next->prev = block;
  }
  block->size += neighbour->size;
  if (!block->node && neighbour->node) block->node = std::move(neighbour->node);
  recycle_block(neighbour);
}

void CachingAllocator::merge_with(Block* block, Block* neighbour) {
  if (neighbour == nullptr || !neighbour->is_free()) return;
  remove_free(neighbour);
  absorb(block, neighbour);
}

void CachingAllocator::free_block(Block* block) {
  const bool small = block->pool->is_small;
  stats_.active.decrease(small, 1);
  stats_.active_bytes.decrease(small, as_signed(block->size));
  const std::uintptr_t address = block->address;
  const std::size_t size = block->size;
  block->requested = 0;
  block->category = MemoryCategory::uncategorized;
  block->tag = 0;
  merge_with(block, block->prev);
  merge_with(block, block->next);
  insert_free(block);
  record(TraceAction::free_completed, address, size, block->stream);
}

void CachingAllocator::process_events() {
  std::erase_if(pending_events_, [this](const std::pair<EventId, Block*>& entry) {
    if (!events_.query(entry.first)) return false;
    events_.release(entry.first);
    if (--entry.second->event_count == 0) free_block(entry.second);
    return true;
  });
}

void CachingAllocator::synchronize_and_free_events() {
  if (pending_events_.empty()) return;
  ++stats_.num_sync_all_streams;
  for (auto& [event, block] : pending_events_) {
    events_.synchronize(event);
    events_.release(event);
    if (--block->event_count == 0) free_block(block);
  }
  pending_events_.clear();
}

void CachingAllocator::raise_out_of_memory(std::size_t bytes, std::size_t rounded, StreamId stream,
                                           MemoryCategory category, TagId tag) {
  ++stats_.num_ooms;
  record(TraceAction::oom, 0, rounded, stream, category, tag);
  throw OutOfMemoryError(out_of_memory_message(bytes, rounded, stream, category, tag), bytes, rounded, category);
}

TagId CachingAllocator::intern_tag(std::string_view tag) {
  if (tag.empty()) return 0;
  std::lock_guard lock(mutex_);
  auto [it, inserted] = tag_ids_.try_emplace(std::string(tag), static_cast<TagId>(tag_names_.size()));
  if (inserted) tag_names_.emplace_back(tag);
  return it->second;
}

std::string CachingAllocator::tag_name(TagId tag) const {
  std::lock_guard lock(mutex_);
  return tag < tag_names_.size() ? tag_names_[tag] : std::string();
}

}  // namespace ferry
