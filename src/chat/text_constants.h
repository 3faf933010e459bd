// text_constants.h — the fixed prompt texts of CHAT.md §1.3/§1.4 (tools blocks), shared by the
// two renderers. Internal to ds4_chat.
#pragma once

#include <string>
#include <string_view>

namespace ds4::chat::detail {

// R-OFF tools block with the schema lines substituted (ends with one LF).
std::string official_tools_block(std::string_view schemas);
// R-DS4 tools block with the schema lines substituted (no trailing LF).
std::string ds4_tools_block(std::string_view schemas);

}  // namespace ds4::chat::detail
