#include "engine/snapshot/json_pickle.h"

#include "engine/snapshot/torch_snapshot.h"

namespace ferry {
namespace {

constexpr int kMaxDepth = 32;
constexpr std::size_t kMaxValues = 1'000'000;

struct Converter {
  const PickleDocument& document;
  const std::string& file;
  const std::string& field;
  std::size_t visited = 0;

  nlohmann::json convert(PickleRef ref, int depth) {
    if (depth > kMaxDepth) throw SnapshotError(file, field, "values nested deeper than " + std::to_string(kMaxDepth));
    if (++visited > kMaxValues) throw SnapshotError(file, field, "more than " + std::to_string(kMaxValues) + " values");
    switch (document.kind(ref)) {
      case PickleKind::none: return nullptr;
      case PickleKind::boolean: return document.as_bool(ref);
      case PickleKind::integer: return document.as_int(ref);
      case PickleKind::floating: return document.as_float(ref);
      case PickleKind::string: return document.as_text(ref);
      case PickleKind::bytes: throw SnapshotError(file, field, "bytes where text was expected");
      case PickleKind::list:
      case PickleKind::tuple: {
        nlohmann::json array = nlohmann::json::array();
        for (PickleRef item : document.items(ref)) array.push_back(convert(item, depth + 1));
        return array;
      }
      case PickleKind::dict: {
        nlohmann::json object = nlohmann::json::object();
        const std::span<const PickleRef> entries = document.items(ref);
        for (std::size_t i = 0; i + 1 < entries.size(); i += 2) {
          if (document.kind(entries[i]) != PickleKind::string) throw SnapshotError(file, field, "a dict key that is not a string");
          object[document.as_text(entries[i])] = convert(entries[i + 1], depth + 1);
        }
        return object;
      }
    }
    return nullptr;
  }
};

}  // namespace

PickleRef json_to_pickle(PickleDocument& document, const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null: return document.add_none();
    case nlohmann::json::value_t::boolean: return document.add_bool(value.get<bool>());
    case nlohmann::json::value_t::number_integer: return document.add_int(value.get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return document.add_int(static_cast<std::int64_t>(value.get<std::uint64_t>()));
    case nlohmann::json::value_t::number_float: return document.add_float(value.get<double>());
    case nlohmann::json::value_t::string: return document.add_string(value.get<std::string>());
    case nlohmann::json::value_t::array: {
      const PickleRef list = document.add_list();
      for (const nlohmann::json& item : value) document.append(list, json_to_pickle(document, item));
      return list;
    }
    case nlohmann::json::value_t::object: {
      const PickleRef dict = document.add_dict();
      for (const auto& [key, item] : value.items()) {
        const PickleRef key_ref = document.add_string(key);
        document.set_item(dict, key_ref, json_to_pickle(document, item));
      }
      return dict;
    }
    default: return document.add_none();
  }
}

nlohmann::json pickle_to_json(const PickleDocument& document, PickleRef ref, const std::string& file, const std::string& field) {
  return Converter{document, file, field}.convert(ref, 0);
}

}  // namespace ferry
