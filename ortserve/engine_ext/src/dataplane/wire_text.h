// The message helpers the wire rules' files share (infer_wire.h has the rules; IsValidUtf8 and PyRepr are there too,
// for the bindings): quoting a name, printing a list as Python does, an INVALID_ARGUMENT.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "infer_wire.h"

namespace ortserve {

// 'text' as the messages quote a name the server chose (a caller's text goes through PyRepr).
std::string Quote(std::string_view text);

// ['a', 'b'] as Python prints a list of str.
std::string List(const std::vector<std::string_view>& items);

// [1, 2] as Python prints a list of int.
std::string List(const std::vector<int64_t>& items);

WireError Invalid(std::string message);

}  // namespace ortserve
