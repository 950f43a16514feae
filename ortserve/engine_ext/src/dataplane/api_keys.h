// API keys on the native front end (service/api_keys.py is the Python side's; the Python front end and the HTTP
// port check there, this one the calls the native front end answers itself).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ortserve {

// The key in an `authorization` value "Bearer KEY" (the scheme in any case, spaces around KEY dropped); "" if none.
inline std::string_view BearerKey(std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    const char c = authorization[i];
    if ((c >= 'A' && c <= 'Z' ? c + ('a' - 'A') : c) != kScheme[i]) return {};
  }
  std::string_view key = authorization.substr(kScheme.size());
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  return key;
}

// Whether `presented` is one of `keys`, in time that depends on the keys' lengths only, never on where a guess
// first differs: every key is compared to the end, and no comparison stops early.
inline bool KeyAccepted(std::string_view presented, const std::vector<std::string>& keys) {
  unsigned accepted = 0;
  for (const std::string& key : keys) {
    // Differences are OR-ed over the key's every byte (presented read cyclically, its length compared apart).
    volatile unsigned char diff = presented.size() != key.size() || presented.empty();
    for (size_t i = 0; i < key.size(); ++i) {
      const unsigned char got = presented.empty() ? 0 : static_cast<unsigned char>(presented[i % presented.size()]);
      diff = diff | (got ^ static_cast<unsigned char>(key[i]));
    }
    accepted |= static_cast<unsigned>(diff == 0);
  }
  return accepted != 0;
}

}  // namespace ortserve
