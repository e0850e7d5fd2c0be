#include "engine/snapshot/pickle_reader.h"

#include <bit>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unordered_map>
#include <vector>

namespace ferry {
namespace {

struct OpcodeName {
  int code;
  const char* name;
};

constexpr OpcodeName kOpcodeNames[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"}, {'I', "INT"},
    {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"},
    {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
    {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
    {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"},
    {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"},
    {'B', "BINBYTES"}, {'C', "SHORT_BINBYTES"}, {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"},
    {0x83, "EXT2"}, {0x84, "EXT4"}, {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"},
    {0x89, "NEWFALSE"}, {0x8a, "LONG1"}, {0x8b, "LONG4"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"},
    {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"}, {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"},
    {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"}, {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"},
    {0x98, "READONLY_BUFFER"},
};

bool valid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const std::size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 0;
    if (length == 0 || i + length > text.size()) return false;
    for (std::size_t k = 1; k < length; ++k) {
      if ((static_cast<unsigned char>(text[i + k]) & 0xc0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

// One pass over the bytes with an explicit stack: nothing here recurses.
class PickleParser {
 public:
  PickleParser(std::string_view data, const std::string& file, const PickleLimits& limits)
      : data_(data), file_(file), limits_(limits) {}

  PickleDocument parse() {
    if (data_.size() > limits_.max_bytes) {
      fail_at(0, -1, "the pickle is " + std::to_string(data_.size()) + " bytes; the limit is " + std::to_string(limits_.max_bytes));
    }
    while (true) {
      if (position_ >= data_.size()) fail_at(position_, -1, "the data ends before the STOP opcode (truncated)");
      start_ = position_;
      opcode_ = static_cast<unsigned char>(data_[position_++]);
      if (opcode_ == '.') break;
      step();
    }
    if (stack_.empty()) fail("STOP with nothing on the stack");
    document_.set_root(stack_.back());
    return std::move(document_);
  }

 private:
  [[noreturn]] void fail_at(std::size_t offset, int opcode, const std::string& problem) const {
    throw PickleError(file_, offset, opcode, problem);
  }
  [[noreturn]] void fail(const std::string& problem) const { fail_at(start_, opcode_, problem); }

  std::string_view take(std::uint64_t bytes) {
    if (bytes > data_.size() - position_) {
      fail("needs " + std::to_string(bytes) + " bytes of argument but " + std::to_string(data_.size() - position_) +
           " remain (truncated, or a size that is too large)");
    }
    const std::string_view result = data_.substr(position_, static_cast<std::size_t>(bytes));
    position_ += static_cast<std::size_t>(bytes);
    return result;
  }
  std::uint64_t unsigned_le(std::size_t bytes) {
    const std::string_view raw = take(bytes);
    std::uint64_t value = 0;
    for (std::size_t i = bytes; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(raw[i]);
    return value;
  }
  std::int64_t signed_le(std::size_t bytes) {
    if (bytes == 0) return 0;
    if (bytes > 8) fail("an integer of " + std::to_string(bytes) + " bytes does not fit in 64 bits");
    std::uint64_t value = unsigned_le(bytes);
    if (bytes < 8 && (value >> (8 * bytes - 1)) != 0) value |= ~std::uint64_t{0} << (8 * bytes);  // sign-extend
    return static_cast<std::int64_t>(value);
  }

  void push(PickleRef ref) {
    if (stack_.size() >= limits_.max_stack) fail("more than " + std::to_string(limits_.max_stack) + " values on the stack");
    stack_.push_back(ref);
  }
  PickleRef pop() {
    if (stack_.size() <= mark_floor()) fail("needs a value but the stack is empty");
    const PickleRef ref = stack_.back();
    stack_.pop_back();
    return ref;
  }
  PickleRef top() {
    if (stack_.size() <= mark_floor()) fail("needs a value but the stack is empty");
    return stack_.back();
  }
  std::size_t mark_floor() const { return marks_.empty() ? 0 : marks_.back(); }
  // The values pushed since the last MARK, which is removed.
  std::vector<PickleRef> pop_mark() {
    if (marks_.empty()) fail("needs a MARK but none is open");
    std::vector<PickleRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  void check_depth(std::uint32_t depth) const {
    if (depth > limits_.max_depth) fail("values nested " + std::to_string(depth) + " deep; the limit is " + std::to_string(limits_.max_depth));
  }
  PickleRef container(PickleKind kind, std::string_view use) {
    const PickleRef target = top();
    if (document_.kind(target) != kind) {
      fail(std::string(use) + " needs a " + std::string(pickle_kind_name(kind)) + " below its items, found a " +
           std::string(pickle_kind_name(document_.kind(target))));
    }
    return target;
  }
  void append_items(const std::vector<PickleRef>& items) {
    const PickleRef list = container(PickleKind::list, pickle_opcode_name(opcode_));
    for (PickleRef item : items) check_depth(document_.append(list, item));
  }
  void set_items(const std::vector<PickleRef>& items) {
    if (items.size() % 2 != 0) fail("needs keys and values in pairs, found " + std::to_string(items.size()) + " values");
    const PickleRef dict = container(PickleKind::dict, pickle_opcode_name(opcode_));
    for (std::size_t i = 0; i < items.size(); i += 2) {
      const PickleKind key_kind = document_.kind(items[i]);
      if (key_kind == PickleKind::list || key_kind == PickleKind::dict) fail("a " + std::string(pickle_kind_name(key_kind)) + " cannot be a dict key");
      check_depth(document_.set_item(dict, items[i], items[i + 1]));
    }
  }
  void push_tuple(std::vector<PickleRef> items) {
    const PickleRef tuple = document_.add_tuple(std::move(items));
    check_depth(document_.depth(tuple));
    push(tuple);
  }
  std::vector<PickleRef> pop_n(std::size_t count) {
    std::vector<PickleRef> items(count);
    for (std::size_t i = count; i-- > 0;) items[i] = pop();
    return items;
  }
  void push_text(std::uint64_t length, bool unicode) {
    std::string text(take(length));
    if (unicode && !valid_utf8(text)) fail("a string of " + std::to_string(length) + " bytes that is not valid UTF-8");
    push(unicode ? document_.add_string(std::move(text)) : document_.add_bytes(std::move(text)));
  }
  void memo_put(std::uint64_t index) { memo_[index] = top(); }
  void memo_get(std::uint64_t index) {
    const auto found = memo_.find(index);
    if (found == memo_.end()) fail("memo entry " + std::to_string(index) + " was never stored");
    push(found->second);
  }

  void step() {
    switch (opcode_) {
      case 0x80: {  // PROTO
        const auto version = static_cast<unsigned char>(take(1)[0]);
        if (version < 2 || version > 5) fail("protocol " + std::to_string(version) + "; ferry reads protocols 2 to 5");
        break;
      }
      case 0x95: {  // FRAME: a length hint; the opcodes inside follow as usual
        const std::uint64_t length = unsigned_le(8);
        if (length > data_.size() - position_) fail("a frame of " + std::to_string(length) + " bytes runs past the end of the data (" + std::to_string(data_.size() - position_) +
                                          " bytes left: truncated, or a size that is too large)");
        break;
      }
      case '(': marks_.push_back(stack_.size()); check_depth(static_cast<std::uint32_t>(marks_.size())); break;
      case '0': pop(); break;
      case '1': pop_mark(); break;
      case '2': push(top()); break;
      case 'N': push(document_.add_none()); break;
      case 0x88: push(document_.add_bool(true)); break;
      case 0x89: push(document_.add_bool(false)); break;
      case 'J': push(document_.add_int(signed_le(4))); break;
      case 'K': push(document_.add_int(static_cast<std::int64_t>(unsigned_le(1)))); break;
      case 'M': push(document_.add_int(static_cast<std::int64_t>(unsigned_le(2)))); break;
      case 0x8a: push(document_.add_int(signed_le(unsigned_le(1)))); break;
      case 0x8b: {
        const std::int64_t length = signed_le(4);
        if (length < 0 || length > 8) fail("an integer of " + std::to_string(length) + " bytes does not fit in 64 bits");
        push(document_.add_int(signed_le(static_cast<std::size_t>(length))));
        break;
      }
      case 'G': push(document_.add_float(std::bit_cast<double>(unsigned_be8()))); break;
      case 0x8c: push_text(unsigned_le(1), true); break;
      case 'X': push_text(unsigned_le(4), true); break;
      case 0x8d: push_text(unsigned_le(8), true); break;
      case 'C': push_text(unsigned_le(1), false); break;
      case 'B': push_text(unsigned_le(4), false); break;
      case 0x8e: push_text(unsigned_le(8), false); break;
      case ']': push(document_.add_list()); break;
      case '}': push(document_.add_dict()); break;
      case ')': push_tuple({}); break;
      case 0x85: push_tuple(pop_n(1)); break;
      case 0x86: push_tuple(pop_n(2)); break;
      case 0x87: push_tuple(pop_n(3)); break;
      case 't': push_tuple(pop_mark()); break;
      case 'l': {
        std::vector<PickleRef> items = pop_mark();
        push(document_.add_list());
        append_items(items);
        break;
      }
      case 'd': {
        std::vector<PickleRef> items = pop_mark();
        push(document_.add_dict());
        set_items(items);
        break;
      }
      case 'a': append_items(pop_n(1)); break;
      case 'e': append_items(pop_mark()); break;
      case 's': set_items(pop_n(2)); break;
      case 'u': set_items(pop_mark()); break;
      case 0x94: memo_put(memo_.size()); break;
      case 'q': memo_put(unsigned_le(1)); break;
      case 'r': memo_put(unsigned_le(4)); break;
      case 'h': memo_get(unsigned_le(1)); break;
      case 'j': memo_get(unsigned_le(4)); break;
      default:
        fail(opcode_known(opcode_) ? "is not in the subset ferry reads (plain dicts, lists, tuples, strings, bytes, numbers, "
                                     "bools, None and the memo); a snapshot holds no Python objects"
                                   : "is not a pickle opcode (the file is not a pickle, or it is corrupt)");
    }
  }
  std::uint64_t unsigned_be8() {  // BINFLOAT's IEEE double is big-endian
    std::uint64_t value = 0;
    for (char byte : take(8)) value = (value << 8) | static_cast<unsigned char>(byte);
    return value;
  }
  static bool opcode_known(int opcode) {
    for (const OpcodeName& each : kOpcodeNames) {
      if (each.code == opcode) return true;
    }
    return false;
  }

  std::string_view data_;
  const std::string& file_;
  const PickleLimits& limits_;
  PickleDocument document_;
  std::vector<PickleRef> stack_;
  std::vector<std::size_t> marks_;  // stack sizes at each open MARK
  std::unordered_map<std::uint64_t, PickleRef> memo_;
  std::size_t position_ = 0;
  std::size_t start_ = 0;  // offset of the current opcode
  int opcode_ = -1;
};

}  // namespace

std::string pickle_opcode_name(int opcode) {
  char code[8];
  std::snprintf(code, sizeof code, "0x%02x", opcode & 0xff);
  for (const OpcodeName& each : kOpcodeNames) {
    if (each.code == opcode) return std::string(each.name) + " (" + code + ")";
  }
  return code;
}

PickleError::PickleError(const std::string& file, std::size_t offset, int opcode, const std::string& problem)
    : std::runtime_error(file + ": offset " + std::to_string(offset) + (opcode >= 0 ? ": opcode " + pickle_opcode_name(opcode) : std::string()) +
                         ": " + problem),
      file_(file),
      offset_(offset),
      opcode_(opcode) {}

PickleDocument read_pickle(std::string_view data, const std::string& file_name, const PickleLimits& limits) {
  return PickleParser(data, file_name, limits).parse();
}

PickleDocument read_pickle_file(const std::string& path, const PickleLimits& limits) {
  std::error_code error;
  const std::uintmax_t size = std::filesystem::file_size(path, error);
  if (error) throw PickleError(path, 0, -1, "cannot read the file: " + error.message());
  if (size > limits.max_bytes) {
    throw PickleError(path, 0, -1, "the file is " + std::to_string(size) + " bytes; the limit is " + std::to_string(limits.max_bytes));
  }
  std::ifstream input(path, std::ios::binary);
  std::string data(static_cast<std::size_t>(size), '\0');
  if (!input.read(data.data(), static_cast<std::streamsize>(size))) throw PickleError(path, 0, -1, "cannot read the file");
  return read_pickle(data, path, limits);
}

}  // namespace ferry
