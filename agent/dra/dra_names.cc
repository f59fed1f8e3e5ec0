#include "agent/dra/dra_names.h"

#include <algorithm>
#include <cstdint>
#include <set>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fabric::dra {
namespace {

constexpr size_t kMaxLabel = 63;
constexpr size_t kHashHex = 8;

uint64_t Fnv1a(std::string_view s, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// The digits of a token's unit ID ("mlx5_0.t07" -> "07"), so the published
// name carries the same zero padding as the pool's ID; "" if not a token ID.
std::string TokenDigits(const PublishedUnit& u) {
  const std::string prefix = u.ibdev + ".t";
  if (u.unit_id.size() <= prefix.size() || u.unit_id.compare(0, prefix.size(), prefix) != 0) {
    return "";
  }
  std::string digits = u.unit_id.substr(prefix.size());
  for (char c : digits) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return "";
  }
  return digits;
}

std::string Suffix(const PublishedUnit& u) {
  if (u.token < 0) return "";
  std::string digits = TokenDigits(u);
  return absl::StrCat("-t", digits.empty() ? std::to_string(u.token) : digits);
}

std::string TrimDashes(std::string s) {
  size_t b = s.find_first_not_of('-');
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of('-');
  return s.substr(b, e - b + 1);
}

// "<label shortened to fit>-<hash>[-tNN]"; `salt` > 0 only after a hash
// collided with another name.
std::string HashedName(const PublishedUnit& u, int salt) {
  std::string key = u.resource + '\0' + u.ibdev;
  if (salt > 0) key += '\0' + std::to_string(salt);
  const std::string hash = absl::StrFormat("%08x", static_cast<uint32_t>(Fnv1a(key) >> 32));
  const std::string suffix = Suffix(u);
  const size_t room = kMaxLabel - kHashHex - 1 - suffix.size();
  std::string stem = TrimDashes(LabelOf(u.ibdev));
  if (stem.size() > room) stem = TrimDashes(stem.substr(0, room));
  return stem.empty() ? absl::StrCat(hash, suffix) : absl::StrCat(stem, "-", hash, suffix);
}

using GroupKey = std::pair<std::string, std::string>;  // (resource, ibdev)

}  // namespace

std::string LabelOf(std::string_view ibdev) {
  std::string out;
  out.reserve(ibdev.size());
  for (unsigned char c : ibdev) {
    char l = absl::ascii_tolower(c);
    out.push_back((l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') ? l : '-');
  }
  return out;
}

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > kMaxLabel) return false;
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  for (char c : s) {
    if (!alnum(c) && c != '-') return false;
  }
  return alnum(s.front()) && alnum(s.back());
}

std::vector<PublishedUnit> UnitsOf(const std::vector<std::shared_ptr<const PoolSnapshot>>& pools) {
  std::vector<PublishedUnit> out;
  for (const auto& pool : pools) {
    if (!pool) continue;
    for (const PoolUnit& unit : pool->units) {
      PublishedUnit u{pool->resource, unit.device, unit.id, -1};
      if (pool->mode == PoolMode::kShared) {
        int index;
        std::string digits = TokenDigits(u);
        if (!digits.empty() && absl::SimpleAtoi(digits, &index)) u.token = index;
      }
      out.push_back(std::move(u));
    }
  }
  return out;
}

DraNames DraNames::Assign(std::vector<PublishedUnit> units) {
  // Sorted and deduplicated, so the names do not depend on the input order.
  auto key = [](const PublishedUnit& u) { return std::tie(u.resource, u.unit_id); };
  std::sort(units.begin(), units.end(),
            [&](const PublishedUnit& a, const PublishedUnit& b) { return key(a) < key(b); });
  units.erase(
      std::unique(units.begin(), units.end(),
                  [&](const PublishedUnit& a, const PublishedUnit& b) { return key(a) == key(b); }),
      units.end());

  std::map<std::string, int> plain_count;
  for (const PublishedUnit& u : units) ++plain_count[LabelOf(u.ibdev) + Suffix(u)];
  // A device whose plain name is not a label or is shared gets hashed names
  // for all of its units, so its tokens stay recognisably one device's.
  std::set<GroupKey> hashed;
  for (const PublishedUnit& u : units) {
    const std::string plain = LabelOf(u.ibdev) + Suffix(u);
    if (!IsDnsLabel(plain) || plain_count[plain] > 1) hashed.insert({u.resource, u.ibdev});
  }

  DraNames names;
  std::map<GroupKey, std::vector<const PublishedUnit*>> hashed_units;
  for (const PublishedUnit& u : units) {
    if (hashed.count({u.resource, u.ibdev})) {
      hashed_units[{u.resource, u.ibdev}].push_back(&u);
      continue;
    }
    std::string name = LabelOf(u.ibdev) + Suffix(u);
    names.by_unit_[{u.resource, u.unit_id}] = name;
    names.by_name_.emplace(std::move(name), u);
  }
  for (const auto& [group, members] : hashed_units) {
    // A hash that lands on a taken name (vanishingly rare) is salted and
    // retried; groups are visited in sorted order, so the outcome is stable.
    for (int salt = 0;; ++salt) {
      std::vector<std::string> candidate;
      std::set<std::string> seen;
      bool clash = false;
      for (const PublishedUnit* u : members) {
        candidate.push_back(HashedName(*u, salt));
        clash |=
            names.by_name_.count(candidate.back()) > 0 || !seen.insert(candidate.back()).second;
      }
      if (clash) continue;
      for (size_t i = 0; i < members.size(); ++i) {
        names.by_unit_[{members[i]->resource, members[i]->unit_id}] = candidate[i];
        names.by_name_.emplace(candidate[i], *members[i]);
      }
      break;
    }
  }
  return names;
}

const std::string* DraNames::NameOf(const std::string& resource, const std::string& unit_id) const {
  auto it = by_unit_.find({resource, unit_id});
  return it == by_unit_.end() ? nullptr : &it->second;
}

const PublishedUnit* DraNames::Lookup(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

}  // namespace fabric::dra
