#include "engine/snapshot/pickle_writer.h"

#include <bit>
#include <vector>

#include "engine/snapshot/pickle_reader.h"

namespace ferry {
namespace {

void little_endian(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

void scalar(std::string& out, const PickleDocument& document, PickleRef ref) {
  switch (document.kind(ref)) {
    case PickleKind::none: out += 'N'; break;
    case PickleKind::boolean: out += static_cast<char>(document.as_bool(ref) ? 0x88 : 0x89); break;
    case PickleKind::integer: {
      const std::int64_t value = document.as_int(ref);
      if (value >= 0 && value < 256) {
        out += 'K';
        little_endian(out, static_cast<std::uint64_t>(value), 1);
      } else if (value >= INT32_MIN && value <= INT32_MAX) {
        out += 'J';
        little_endian(out, static_cast<std::uint64_t>(value), 4);
      } else {
        out += static_cast<char>(0x8a);  // LONG1 of 8 two's-complement bytes
        out += static_cast<char>(8);
        little_endian(out, static_cast<std::uint64_t>(value), 8);
      }
      break;
    }
    case PickleKind::floating: {
      out += 'G';
      const auto bits = std::bit_cast<std::uint64_t>(document.as_float(ref));
      for (int i = 7; i >= 0; --i) out += static_cast<char>((bits >> (8 * i)) & 0xff);
      break;
    }
    case PickleKind::string:
    case PickleKind::bytes: {
      const std::string& text = document.as_text(ref);
      const bool unicode = document.kind(ref) == PickleKind::string;
      if (text.size() < 256) {
        out += static_cast<char>(unicode ? 0x8c : 'C');
        little_endian(out, text.size(), 1);
      } else {
        out += static_cast<char>(unicode ? 0x8d : 0x8e);
        little_endian(out, text.size(), 8);
      }
      out += text;
      break;
    }
    default: break;
  }
}

}  // namespace

std::string write_pickle(const PickleDocument& document, std::uint32_t max_depth) {
  std::string out = "\x80\x04";
  // An explicit stack of (container, next item); a container's closing opcode is written when done.
  struct Open {
    PickleRef ref;
    std::size_t next;
  };
  std::vector<Open> open;
  auto begin = [&](PickleRef ref) {
    const PickleKind kind = document.kind(ref);
    if (kind != PickleKind::list && kind != PickleKind::tuple && kind != PickleKind::dict) {
      scalar(out, document, ref);
      return;
    }
    if (open.size() >= max_depth) throw PickleError("(writing)", out.size(), -1, "values nested deeper than " + std::to_string(max_depth));
    out += kind == PickleKind::list ? "](" : kind == PickleKind::dict ? "}(" : "(";
    open.push_back(Open{ref, 0});
  };
  begin(document.root());
  while (!open.empty()) {
    Open& top = open.back();
    const std::span<const PickleRef> items = document.items(top.ref);
    if (top.next < items.size()) {
      begin(items[top.next++]);  // may grow `open`: `top` is not used after this
      continue;
    }
    const PickleKind kind = document.kind(top.ref);
    out += kind == PickleKind::list ? 'e' : kind == PickleKind::dict ? 'u' : 't';
    open.pop_back();
  }
  out += '.';
  return out;
}

}  // namespace ferry
